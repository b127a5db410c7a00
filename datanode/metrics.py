"""The DataNode's gauges, read from its block store at scrape time."""
from __future__ import annotations

from prometheus_client import Counter

from epochfs.common.metrics import gauge

STALE_ORDERS = Counter("epochfs_datanode_stale_orders_total",
                       "Heartbeat replies whose orders were refused: they came from a deposed NameNode (a fencing "
                       "epoch below the highest seen)")
LOCAL_READS = Counter("epochfs_datanode_local_reads_total",
                      "Reads served to readers on this machine through the local socket: their files passed, not "
                      "their bytes (common/localread.py)")


def register(store, heartbeat) -> None:
    gauge("epochfs_datanode_stored_blocks", "Blocks stored on this DataNode", lambda: [((), store.count)])
    gauge("epochfs_datanode_stored_bytes", "Block bytes stored on this DataNode", lambda: [((), store.used)])
    gauge("epochfs_datanode_replication_queue", "Replication jobs this DataNode still has to push (its lag)",
          lambda: [((), store.replication_lag()["queued"])])
    gauge("epochfs_datanode_registered", "1 once the NameNode gave this DataNode an id",
          lambda: [((), 0 if heartbeat.node_id is None else 1)])
    gauge("epochfs_datanode_fencing_epoch", "Highest NameNode fencing epoch this DataNode has seen (HA; 0: embedded)",
          lambda: [((), heartbeat.epoch)])
