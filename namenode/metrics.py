"""The NameNode's gauges, read from its state at scrape time: DataNodes, capacity, blocks, repair backlog,
replication lag and bucket usage."""
from __future__ import annotations

from epochfs.common.metrics import gauge


def register(meta, members, repair) -> None:
    def nodes():
        return list(members.nodes.values())

    def states():
        counts = {"alive": 0, "dead": 0}
        for n in nodes():
            counts["alive" if members.alive(n) else "dead"] += 1
        return [((k,), v) for k, v in counts.items()]

    gauge("epochfs_datanodes", "DataNodes by liveness", states, ("state",))
    gauge("epochfs_datanode_capacity_bytes", "Space each DataNode offers",
          lambda: [((str(n.id),), n.capacity) for n in nodes()], ("node",))
    gauge("epochfs_datanode_used_bytes", "Space each DataNode uses", lambda: [((str(n.id),), n.used) for n in nodes()],
          ("node",))
    gauge("epochfs_datanode_blocks", "Block replicas each DataNode holds",
          lambda: [((str(n.id),), n.blocks) for n in nodes()], ("node",))
    gauge("epochfs_replication_lag", "Replication jobs queued on each DataNode (from its heartbeat)",
          lambda: [((str(n.id),), (n.extra or {}).get("queued", 0)) for n in nodes()], ("node",))
    gauge("epochfs_blocks", "Block replicas held by all DataNodes", lambda: [((), sum(n.blocks for n in nodes()))])
    gauge("epochfs_under_replicated_blocks", "Blocks with fewer live replicas than their bucket's factor",
          lambda: [((), repair.status()["under_replicated"])])
    gauge("epochfs_lost_blocks", "Blocks with no live replica", lambda: [((), repair.status()["lost"])])
    gauge("epochfs_repairs_in_flight", "Copies ordered and not yet confirmed",
          lambda: [((), repair.status()["repairs_in_flight"])])
    gauge("epochfs_copies_waiting", "Missing copies waiting for a retry or a node with room, by reason",
          lambda: [((r,), n) for r, n in repair.status()["waiting"].items()], ("reason",))
    gauge("epochfs_garbage_blocks", "Block replicas waiting to be deleted", lambda: [((), meta.garbage_count())])
    gauge("epochfs_freed_blocks", "Block replicas of removed objects kept for reads under way (NN_FREE_GRACE_S)",
          lambda: [((), meta.freed_count())])
    gauge("epochfs_bucket_bytes", "Object bytes per bucket (current versions)",
          lambda: [((b,), u[0]) for b, u in meta.bucket_usage().items()], ("bucket",))
    gauge("epochfs_bucket_objects", "Objects per bucket (current versions)",
          lambda: [((b,), u[1]) for b, u in meta.bucket_usage().items()], ("bucket",))
