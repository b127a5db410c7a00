from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from epochfs.common.config import ServiceSettings


class DataNodeSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="DN_", extra="ignore")

    port: int = 9864
    rpc_port: int = 9866
    namenode: str = "127.0.0.1:9871"
    """NameNode RPC address host:port; with several NameNodes (HA) all of them, comma-separated: heartbeats go to
    the active one and follow it on a failover."""
    advertise_host: str = ""
    """Address peers and the gateway use to reach this node's RPC port (default: host)."""
    local_reads: bool = True
    """Serve local reads: readers on this machine (the gateway, the mount, `epochfs://`) get the block files open
    through a Unix socket (common/localread.py, in EPOCHFS_LOCAL_DIR) and read them themselves."""
    capacity_bytes: int = 0
    """Space this node offers; 0 = the free space of the data directory's file system."""
    heartbeat_interval_s: float = 1.0
    block_report_interval_s: float = 60.0
    """How often a heartbeat carries the full list of stored blocks, which the NameNode reconciles with its
    metadata (surplus copies deleted, missing ones re-pushed); the first heartbeat after registering always does."""
    replication_interval_s: float = 1.0
    """How often queued replication jobs (pushes that failed or were interrupted) are retried."""
    replication_concurrency: int = 4
    scrub_bytes_per_s: int = 4 << 20
    """Pace of the scrubber, which re-reads every stored chunk and checks its CRC32C; 0 turns background scrubbing
    off (a scrub job started through the admin API then runs at the default pace)."""
    scrub_interval_s: float = 1.0
    """The scrubber reads scrub_bytes_per_s * scrub_interval_s bytes per pass."""
