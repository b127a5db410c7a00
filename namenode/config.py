from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from epochfs.common import defaults, errors, write_policy
from epochfs.common.config import ServiceSettings


class NameNodeSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="NN_", extra="ignore")

    port: int = 9870
    rpc_port: int = 9871
    block_size: int = defaults.BLOCK_SIZE
    """Default block size of new buckets (bytes; a multiple of 64 KiB from 64 KiB to 32 MiB). A bucket's own
    (x-epochfs-block-size at CreateBucket, the admin API) overrides it."""
    replication: int = defaults.REPLICATION
    """Default replication factor of new buckets."""
    heartbeat_timeout_s: float = 10.0
    """A DataNode silent for longer than this is dead: it gets no new blocks and its blocks are re-replicated."""
    repair_interval_s: float = 1.0
    """How often the repair worker sweeps for blocks with a dead holder (when a node is dead)."""
    repair_max_inflight: int = 16
    """Copy orders (re-replication, read repair, rebalance) out and not yet confirmed, at most; each carries the
    blocks going from one node to another, up to repair_batch_bytes."""
    repair_batch_bytes: int = 8 << 20
    """Bytes of blocks one copy order carries at most (many small blocks, or a few large ones); the source sends them
    in one call to the target."""
    repair_order_timeout_s: float = 60.0
    """A copy order not confirmed within this is dropped and planned again (from another holder)."""
    repair_scan_batch: int = 10_000
    """Metadata records (files, parts, versions) one repair pass reads; a sweep resumes where the last pass stopped."""
    repair_bytes_per_s: int = 64 << 20
    """Re-replication and decommission copies ordered per second, in bytes (0: no limit besides
    repair_max_inflight), so that training reads keep their bandwidth."""
    rebalance_tolerance: float = 0.05
    """A rebalance job (admin API) moves replicas until every live node stores within this fraction of the mean
    bytes per node; its copies share repair_max_inflight and repair_bytes_per_s."""
    default_write_policy: str = defaults.WRITE_POLICY
    """Write acknowledgement of buckets that set none: async, or sync:N (acknowledge after N durable replicas)."""
    pending_grace_s: float = 3600.0
    """Blocks allocated but not committed for this long (an upload cut off mid-way) are garbage-collected."""
    gc_interval_s: float = 10.0
    free_grace_s: float = 300.0
    """The blocks of a deleted or overwritten object (or a freed version, part or file) are deleted from the
    DataNodes only this long after, so that a read begun before the change still gets the old bytes whole: an S3 GET
    streaming the object, an fsspec file or a mount handle reading with its read token (60 s). Persisted with the
    time each was freed, so a restart keeps it. A GET still streaming this long after the change is cut off."""
    min_part_size: int = defaults.MIN_PART_SIZE
    """Minimum size of every multipart part but the last (S3: 5 MiB)."""
    lifecycle_day_s: float = 86_400.0
    """The length of a lifecycle "day" in seconds: bucket lifecycle rules count ages in these (S3: real days,
    rounded up to midnight UTC). Shorter only for tests, as Ceph RGW's rgw_lc_debug_interval (any other length is
    not rounded)."""
    lifecycle_interval_s: float = 0.0
    """Time between two sweeps of the lifecycle worker (0: a tenth of a lifecycle day, at most 600 s)."""
    lifecycle_actions_per_s: float = 200.0
    """Lifecycle actions (expirations, aborted uploads) per second, at most (0: no limit)."""
    command_log: str = ""
    """A file to append every namespace command the NameNode executes to (length-prefixed MessagePack, see
    namenode/commands.py): a journal for debugging and for replay checks. Empty: no log."""

    etcd_endpoints: str = ""
    """HA mode: etcd's client URLs, comma-separated ("http://h1:2379,http://h2:2379,..."); several NameNodes given the
    same endpoints and prefix elect one active and replicate its commands through etcd (namenode/ha/). Empty: the
    embedded mode, one NameNode, its RocksDB WAL fsynced before each reply."""
    name: str = ""
    """This NameNode's name among its peers (default: advertise_host:rpc_port)."""
    advertise_host: str = ""
    """The host peers and clients reach this NameNode at (default: host)."""
    lease_ttl_s: float = 2.0
    """HA: the leader's etcd lease; a dead leader is replaced after about this long, a cut-off one stops
    acknowledging before it."""
    etcd_max_request_bytes: int = Field(8 << 20, ge=64 << 10, le=64 << 20)
    """HA: etcd's --max-request-bytes (epochfs up --ha, the deploy files and the tests start etcd with 8 MiB; etcd's
    own default is 1.5 MiB): a command whose encoding would not fit in one log append with this limit is refused
    (EntityTooLarge) before it is applied, rather than failing in etcd and deposing the leader."""
    etcd_prefix: str = "/epochfs"
    """HA: the keys of this cluster in etcd (leader, log, members) start with it."""
    group_linger_s: float = Field(0.015, ge=0.0, le=0.5)
    """HA: under load, a log append waits at most this long for the commands of the callers the last one released
    (group commit; namenode/ha/etcd_journal.py _linger). Idle or one caller at a time it waits for nothing."""
    stale_read_max_s: float = Field(0.5, ge=0.0, le=60.0)
    """HA: a standby answers the reads that accept a stale answer (messages.StaleOk: manifests, stat_many, the
    dataset mount's reads) only while it is sure to miss at most this many seconds of writes (it confirms being at
    the log's end by an etcd read every half of it while such reads come); else it answers TooStale and the client
    asks the active NameNode. 0: standbys serve no reads."""

    @property
    def addr(self) -> str:
        return f"{self.advertise_host or self.host}:{self.rpc_port}"

    @property
    def http_addr(self) -> str:
        return f"{self.advertise_host or self.host}:{self.port}"

    @property
    def member_name(self) -> str:
        return self.name or self.addr
    @field_validator("lifecycle_day_s")
    @classmethod
    def _day(cls, v: float) -> float:
        if not 0.01 <= v <= 10 * 86_400:
            raise ValueError("lifecycle_day_s must be between 0.01 and 864000 seconds")
        return v

    @field_validator("block_size")
    @classmethod
    def _block_size(cls, v: int) -> int:
        try:
            return defaults.check_block_size(v)
        except errors.InvalidInput as e:
            raise ValueError(e.message) from None

    @field_validator("default_write_policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        try:
            return write_policy.validate(v)
        except errors.InvalidInput as e:
            raise ValueError(e.message) from None
