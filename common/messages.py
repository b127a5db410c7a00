"""The typed contract between epochfs services: every value that crosses a process boundary, defined once.

Requests are tagged msgspec Structs: the tag (the JSON field "op") names the handler, the fields are its arguments,
and the class attribute `Reply` is the type of its answer. `common/rpc.py` sends them as a frame's JSON head (raw block
bytes travel beside them, in the frame's payload) and a server decodes a request straight into its type;
`common/clients.py` has one typed client per service whose methods mirror the handlers one to one.

Field names on the wire are the short names the services have always used (and that the NameNode stores on disk), kept
through msgspec's field renaming, so no data migration is needed: `size: int = field(name="sz")`.

Why msgspec: measured with bench/wire_codec.py (CPU per encode+decode, 100k calls), a typed Struct costs no more than
the orjson dicts it replaced: stat reply of a 1-block object 0.96 us (orjson dict 1.02), a DataNode put header 0.33 us
(0.44), a 32-block stat 6.51 us (4.91; ~1% of a ~100 us RPC). pydantic models cost 5-20x more per message.
"""
from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import field


# Numbers in requests are 64-bit, as the records and keys they end up in: a request carrying a larger one is refused
# when it is decoded (InvalidInput), before any handler sees it. (Replies and records keep plain ints: checking them
# again would cost the reader ~40% more decode time for nothing.)
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Nat = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # an inode number


class Msg(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A typed, frozen value that crosses a process boundary; fields left at their default are not sent."""


class Request(Msg, tag_field="op"):
    """A call to a service. Subclasses give `tag="op_name"` and set `Reply`; no reply type has a field named "err"
    (that names an error reply, common/rpc.py)."""
    Reply: ClassVar[type]


def op_name(t: type[Request]) -> str:
    """The op a request type is sent as (its tag)."""
    return t.__struct_config__.tag


class Done(Msg):
    """The reply of a request that answers nothing but success."""


class Changed(Msg):
    """A namespace change's success and its NameNode time: the new mtime and ctime of the directory it changed (0
    from a NameNode that doesn't say)."""
    t: I64 = 0


class StaleOk(Msg, array_like=True):
    """Sent as the `stale` field of a read that a standby NameNode may answer from its own store (HA observer reads,
    as HDFS's observer NameNodes): the answer may miss the last NN_STALE_READ_MAX_S of writes, never more (a standby
    not sure of that answers TooStale and the client asks the active NameNode). Only the reads whose request has a
    `stale` field can be sent so (namenode/app.py STALE_READS): the manifest, stat_many, the mount's reads by inode;
    never S3's HEAD, GET or LIST, whose requests have no such field. `min_seq` > 0: read-your-writes, the standby
    answers only once it applied command `min_seq` (the log position the active NameNode returned from `msync`)."""
    min_seq: Nat = 0


class LogPosition(Msg):
    """The sequence number of the last command the active NameNode applied and made durable."""
    seq: int


class Msync(Request, tag="msync"):
    """The active NameNode's log position (HDFS's msync): a client passes it as StaleOk.min_seq so standbys answer
    only once they applied everything up to it (read-your-writes, or reads after another client's writes)."""
    Reply = LogPosition


class BlockRef(Msg, array_like=True):
    """A block of a file: on the wire and on disk the list [id, size, crc, nodes] (nodes[0] is the primary)."""
    id: int
    size: int
    crc: int
    nodes: tuple[int, ...] = ()


def to_builtins(msg: Any) -> Any:
    """A message as plain JSON-able data (for the admin API's JSON and for logs)."""
    return msgspec.to_builtins(msg)


# ---------------------------------------------------------------------------------------------------------------------
# DataNode protocol: block I/O (datanode/api.py). Called through DataNodeClient.
# ---------------------------------------------------------------------------------------------------------------------

class Secondary(Msg, array_like=True):
    """A secondary a primary replicates a block to: on the wire [node id, "host:port"]."""
    node: int
    addr: str


class ReplicaHead(Msg, array_like=True):
    """One block of a put_replicas batch (or a write_tokened call): on the wire [id, crc, size]; its bytes are `size`
    bytes of the payload, or, [id, crc, size, true] (`zero`), `size` zero bytes that are not in the payload."""
    id: int
    crc: int
    size: int
    zero: bool = False


class BlockRead(Msg, array_like=True):
    """A piece of a block to read: on the wire [id, offset, length] (length -1: to the block's end)."""
    id: int
    offset: int = 0
    length: int = -1


class ReadGrant(Msg):
    """A gateway's read token (common/readtoken.py): it lets a client without the cluster secret read `blocks`
    until `exp` (unix seconds); `tok` is the MAC of both under a key derived from the cluster secret."""
    blocks: list[int]
    exp: int
    tok: str


class PieceError(Msg, array_like=True):
    """Why one piece of a batch read failed: on the wire [error class, message]."""
    err: str
    msg: str


class Pieces(Msg):
    """The reply of a read: the pieces back to back in the payload, `lens` their sizes in request order; a piece
    that failed has length -1 and its error in `errs` (by index), so the caller reads it from another replica.
    `unchecked`: pieces the DataNode sent from its disk without reading them (sendfile), each with the CRC32C of
    every `chunk` bytes from its start, which the reader checks (common/clients.py)."""
    lens: list[int]
    errs: dict[int, PieceError] = {}
    chunk: int = 0
    unchecked: dict[int, list[int]] = {}


class Stored(Msg):
    """The reply of put_replicas: the error class of each block (by index) that was not stored."""
    errs: dict[int, str] = {}


class BlockIds(Msg):
    blocks: list[int]


class HasBlocks(Msg):
    has: list[bool]


class ReplicationPass(Msg):
    ok: int
    failed: int


class Put(Request, tag="put"):
    """Store a block (the payload) as its primary; replicate it to `secondaries`; acknowledge once `acks` copies,
    this one included, are on disk (the write policy: 1 async, N > 1 sync:N). `zero`: the block is that many zero
    bytes, not sent (the payload is empty; blocks.zero_size)."""
    block_id: I64
    crc: I64
    secondaries: list[Secondary] = []
    acks: I64 = 1
    zero: Nat = 0
    Reply = Done


class PutReplica(Request, tag="put_replica"):
    """Store a replica (the payload) from its primary (fresh: the write's own replication) or a repair copy; `zero`
    as in Put."""
    block_id: I64
    crc: I64
    fresh: bool = False
    zero: Nat = 0
    Reply = Done


class PutReplicas(Request, tag="put_replicas"):
    """Store several copies at once, their bytes back to back in the payload: repair copies (a NameNode copy order),
    or fresh ones (a primary's replication of a put_many batch: a block deleted meanwhile is dropped, and the reply
    waits until the copies are on disk)."""
    blocks: list[ReplicaHead]
    fresh: bool = False
    Reply = Stored


class NewBlock(Msg, array_like=True):
    """One block of a put_many batch: on the wire [id, crc, size, secondaries]; its bytes are `size` bytes of the
    payload, `secondaries` the node ids it is replicated to (their addresses in PutMany.addrs)."""
    id: I64
    crc: I64
    size: I64
    secondaries: tuple[I64, ...] = ()


class PutMany(Request, tag="put_many"):
    """Store many blocks (the payload, back to back) as their primary in one write batch with their replication
    jobs, replicate them as `put` does (one put_replicas per secondary for the whole batch) and answer once `acks`
    copies of each, this one included, are on disk. A block that fails (CRC mismatch, no room) is that block's error
    in the reply, the others are stored."""
    blocks: list[NewBlock]
    addrs: dict[str, str] = {}  # str(node id) -> "host:port" of every secondary named
    acks: I64 = 1
    Reply = Stored


class Get(Request, tag="get"):
    """Bytes [offset, offset + length) of a block (length -1: to its end), in the reply's payload, as one piece.
    `check`: the DataNode reads and checks every byte itself, never sending one unread (`Pieces.unchecked`)."""
    block_id: I64
    offset: I64 = 0
    length: I64 = -1
    check: bool = False
    Reply = Pieces


class GetMany(Request, tag="get_many"):
    """Several pieces in one round trip (the gateway's batch and multi-block reads); `check` as Get's."""
    reads: list[BlockRead]
    check: bool = False
    Reply = Pieces


class ReadTokened(Request, tag="read_tokened"):
    """GetMany for a native client without the cluster secret: `grant` must cover every block read."""
    reads: list[BlockRead]
    grant: ReadGrant
    check: bool = False
    Reply = Pieces


class LocalRead(Msg):
    """A request on a DataNode's local socket (common/localread.py): where `reads` lie in its files, their
    descriptors passed along, for a reader on the same machine to read itself. `proof` (a gateway's, from the
    cluster secret) or `grant` (a native client's read token, covering every block read) says it is one of ours."""
    reads: list[BlockRead]
    proof: str = ""
    grant: ReadGrant | None = None


class LocalSpan(Msg, array_like=True):
    """Where one read lies: chunks `size` bytes long from byte `at` of the reply's descriptor number `fd`, starting
    at block offset `lo`, with the CRC32C of each chunk; `fd` ZERO_SPAN: the bytes are zeros (no file), REMOTE_SPAN:
    not in a file here (read it over RPC)."""
    fd: int
    at: int = 0
    lo: int = 0
    size: int = 0
    crcs: list[int] = []


ZERO_SPAN, REMOTE_SPAN = -1, -2


class LocalSpans(Msg):
    """The reply to LocalRead: a span per read, or its error (by index: NoSuchBlock, CorruptBlock), or `err` for the
    whole request (Unauthorized, InvalidInput)."""
    spans: list[LocalSpan] = []
    errs: dict[int, PieceError] = {}
    chunk: int = 0  # the bytes each CRC32C covers (the last chunk of a block may be shorter)
    err: str = ""
    msg: str = ""


class Delete(Request, tag="delete"):
    blocks: list[I64]
    Reply = Done


class Blocks(Request, tag="blocks"):
    """Every block id this DataNode stores."""
    Reply = BlockIds


class Has(Request, tag="has"):
    """Which of `blocks` this DataNode stores."""
    blocks: list[I64]
    Reply = HasBlocks


class ReplicateOnce(Request, tag="replicate_once"):
    """Run one replication pass over every queued job now (tests and operators)."""
    Reply = ReplicationPass


# (end of the DataNode protocol)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: nodes, heartbeats and the orders that ride on them (namenode/api/nodes.py).
# ---------------------------------------------------------------------------------------------------------------------


class Registered(Msg):
    node_id: int
    epoch: int = 0  # the registering NameNode's fencing epoch (see HeartbeatOrders)


class Register(Request, tag="register"):
    """A DataNode announces itself (its uuid survives restarts, so it gets its old node id back)."""
    uuid: str
    host: str
    rpc_port: I64
    http_port: I64 = 0
    capacity: I64 = 0
    used: I64 = 0
    Reply = Registered


class CopyDone(Msg, array_like=True):
    """A copy order's block now on `target`: [block, target]."""
    block: int
    target: int


class CopyFailed(Msg, array_like=True):
    """A copy order's block that could not be pushed to `target`: [block, target, error class name]."""
    block: int
    target: int
    error: str = ""


class ReplicationLag(Msg):
    """A DataNode's replication queue: jobs queued, the oldest's age, those its targets refused for lack of space."""
    queued: int = 0
    oldest_s: float = 0.0
    no_space: int = 0


class ScrubProgress(Msg):
    """A DataNode's pass for scrub job `job`: bytes and blocks checked of `total` bytes, bad copies found."""
    job: str
    bytes: int = 0
    total: int = 0
    blocks: int = 0
    bad: int = 0
    done: bool = False


class DeleteOrder(Msg):
    """Blocks the DataNode deletes (garbage); the next heartbeat's `deleted` confirms them."""
    blocks: list[int]


class CopyOrder(Msg, array_like=True):
    """Push `blocks` to node `target` at `addr` (re-replication, read repair, rebalance): [target, addr, blocks]."""
    target: int
    addr: str
    blocks: list[int]


class ScrubOrder(Msg):
    """Start a full scrub pass for job `job` (its progress rides on the following heartbeats)."""
    job: str


class HeartbeatOrders(Msg):
    """What a heartbeat's reply asks of the DataNode; `reregister`: the NameNode does not know it (restarted).
    `epoch`: the fencing epoch of the NameNode that gave the orders (HA: the leader key's revision in etcd; 0 for an
    embedded NameNode). A DataNode obeys no order whose epoch is below the highest it has seen."""
    reregister: bool = False
    epoch: int = 0
    delete: DeleteOrder | None = None
    copy: list[CopyOrder] = []
    scrub: ScrubOrder | None = None


class Heartbeat(Request, tag="heartbeat"):
    """A DataNode's periodic state, the outcomes of its last orders and, now and then, its full block report
    (`report`: every block id it stores)."""
    node_id: I64
    used: I64 = 0
    capacity: I64 = 0
    blocks: I64 = 0
    # the file system whose free space `capacity` counts (common/space.py); "": a configured capacity
    disk: Annotated[str, msgspec.Meta(max_length=128)] = ""
    deleted: list[I64] = []
    copied: list[CopyDone] = []
    copy_failed: list[CopyFailed] = []
    extra: ReplicationLag = ReplicationLag()
    write_error: str = ""
    report: list[I64] | None = None
    scrub: ScrubProgress | None = None
    Reply = HeartbeatOrders


class Queued(Msg):
    queued: bool


class ReportBadReplica(Request, tag="report_bad_replica"):
    """A reader or scrubber found the copy of `block_id` on `node` corrupt or missing; `good` is a holder it read
    successfully, if any."""
    block_id: I64
    node: I64
    good: I64 | None = None
    Reply = Queued


# (end of nodes)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: buckets, objects, versions, listing (namenode/api/buckets.py, objects.py).
# ---------------------------------------------------------------------------------------------------------------------


class CorsRule(Msg):
    """One rule of a bucket's CORS configuration."""
    origins: list[str]
    methods: list[str]
    headers: list[str] = []
    expose: list[str] = []
    id: str | None = None
    max_age: int | None = None


class PublicAccessBlock(Msg):
    """A bucket's S3 public access block (PutPublicAccessBlock): each flag on refuses or ignores one kind of public
    access (public ACLs set, public ACLs honoured, public policies set, public policies honoured)."""
    block_public_acls: bool = field(default=False, name="bpa")
    ignore_public_acls: bool = field(default=False, name="ipa")
    block_public_policy: bool = field(default=False, name="bpp")
    restrict_public_buckets: bool = field(default=False, name="rpb")


class LockRule(Msg):
    """An object-lock default retention: mode GOVERNANCE or COMPLIANCE for `days` or `years` (one of them)."""
    mode: str = field(name="m")
    days: int | None = field(default=None, name="d")
    years: int | None = field(default=None, name="y")


class ObjectLockConfig(Msg):
    """A bucket's object lock: enabled (for good, once on) and optionally a default retention for new versions."""
    enabled: bool = field(default=True, name="on")
    rule: LockRule | None = field(default=None, name="r")


class LoggingTarget(Msg):
    """Where a bucket's server access logs go (S3 PutBucketLogging's LoggingEnabled). `grants` are
    [grantee ("id:..." / "uri:..." / "email:..."), permission]; `key_format` "simple" or
    "partitioned:EventTime" / "partitioned:DeliveryTime"."""
    bucket: str = field(name="b")
    prefix: str = field(default="", name="p")
    grants: list[tuple[str, str]] = field(default_factory=list, name="g")
    key_format: str = field(default="simple", name="kf")


class BucketEncryption(Msg):
    """A bucket's default encryption (PutBucketEncryption): `alg` "AES256" (SSE-S3) or "aws:kms" with `kms_key`
    (None: the default KMS key); `bucket_key` is S3's BucketKeyEnabled, stored and echoed."""
    alg: str
    kms_key: str | None = field(default=None, name="kid")
    bucket_key: bool = field(default=False, name="bk")


class LifecycleFilter(Msg):
    """Which objects a lifecycle rule applies to: all of the conditions given (S3's Filter; `and_` keeps whether
    they came in an <And> element, so GetBucketLifecycleConfiguration gives back what was put)."""
    prefix: str | None = field(default=None, name="p")
    tags: dict[str, str] = field(default_factory=dict, name="tg")
    size_gt: int | None = field(default=None, name="gt")  # ObjectSizeGreaterThan, bytes
    size_lt: int | None = field(default=None, name="lt")  # ObjectSizeLessThan
    and_: bool = field(default=False, name="and")


class LifecycleRule(Msg):
    """One rule of a bucket's lifecycle configuration (S3's LifecycleRule). `filter` None: the rule's legacy
    top-level <Prefix> (`prefix`). Days count from an object's creation (a noncurrent version's: from when it became
    noncurrent); `expiration_date` is midnight UTC in ns since the epoch."""
    id: str
    enabled: bool = field(default=True, name="on")
    prefix: str | None = field(default=None, name="p")
    filter: LifecycleFilter | None = field(default=None, name="f")
    expiration_days: int | None = field(default=None, name="ed")
    expiration_date: int | None = field(default=None, name="edt")
    expired_object_delete_marker: bool | None = field(default=None, name="edm")
    noncurrent_days: int | None = field(default=None, name="nd")
    newer_noncurrent: int | None = field(default=None, name="nn")
    abort_upload_days: int | None = field(default=None, name="ad")


class BucketRecord(Msg):
    """A bucket's settings, as the NameNode stores them (in the bucket directory's inode, "bkt")."""
    name: str = ""
    ino: int = 0  # the bucket directory's inode (absent in listings)
    owner: str = ""
    created: int = 0  # ns since the epoch
    block_size: int = field(default=0, name="bs")
    replication: int = field(default=0, name="rf")
    acl: str | list[tuple[str, str]] | None = None
    location: str = field(default="", name="loc")
    write_policy: str | None = field(default=None, name="wp")  # "async" or "sync:N"; None: the cluster's
    ownership: str | None = field(default=None, name="own")  # object ownership (S3 ObjectOwnership)
    quota_bytes: int | None = field(default=None, name="qb")
    quota_objects: int | None = field(default=None, name="qo")
    versioning: str | None = field(default=None, name="ver")  # None (never enabled), "Enabled", "Suspended"
    cors: list[CorsRule] | None = None
    policy: str | None = field(default=None, name="pol")  # the bucket policy, JSON as the owner put it
    public_access_block: PublicAccessBlock | None = field(default=None, name="pab")
    object_lock: ObjectLockConfig | None = field(default=None, name="olk")
    logging: LoggingTarget | None = field(default=None, name="lgt")
    encryption: BucketEncryption | None = field(default=None, name="enc")
    tags: dict[str, str] | None = field(default=None, name="tg")  # bucket tagging (None: no tag set)
    lifecycle: list[LifecycleRule] | None = field(default=None, name="lc")


class Buckets(Msg):
    buckets: list[BucketRecord]


class BucketCreate(Request, tag="bucket_create"):
    """Create a bucket; block size and replication default to the cluster's."""
    bucket: str
    owner: str = ""
    acl: str | list[tuple[str, str]] = "private"
    location: str = field(default="", name="loc")
    write_policy: str | None = None
    ownership: str | None = field(default=None, name="own")
    block_size: I64 | None = None
    replication: I64 | None = None
    object_lock: bool = False  # x-amz-bucket-object-lock-enabled: also turns versioning on, for good
    Reply = BucketRecord


class BucketDelete(Request, tag="bucket_delete"):
    """Delete an empty bucket (its pending uploads and the access keys' grants on it go with it)."""
    bucket: str
    Reply = Done


class BucketInfo(Request, tag="bucket_info"):
    bucket: str
    Reply = BucketRecord


class BucketList(Request, tag="bucket_list"):
    Reply = Buckets


class Unset(Msg):
    """In a settings change: remove the setting (a quota, CORS rules, object ownership)."""


class BucketSettings(Request, tag="bucket_settings"):
    """Change some of a bucket's settings; a field left out is unchanged, `Unset()` removes the setting. The
    NameNode validates each (replication >= 1, a known write policy, ...) and applies all or none."""
    bucket: str
    block_size: I64 | None = None  # for blocks written from now on
    replication: I64 | None = None
    write_policy: str | None = None
    quota_bytes: I64 | Unset | None = None
    quota_objects: I64 | Unset | None = None
    versioning: str | None = None  # "Enabled" or "Suspended"
    acl: str | list[tuple[str, str]] | None = None
    ownership: str | Unset | None = None
    cors: list[CorsRule] | Unset | None = None
    policy: str | Unset | None = None  # a bucket policy (JSON; the NameNode validates it: MalformedPolicy)
    public_access_block: PublicAccessBlock | None = None
    remove_public_access_block: bool = False  # (a union of two structs can't be decoded untagged: no Unset here)
    encryption: BucketEncryption | None = None  # the default encryption of new objects
    no_encryption: bool = False  # remove the default encryption (Unset() can't share a union with a Struct)
    Reply = BucketRecord


class BucketUsed(Msg, array_like=True):
    """What a bucket holds: on the wire [bytes, objects]."""
    bytes: int
    objects: int


class BucketLogging(Request, tag="bucket_logging"):
    """Set (PutBucketLogging) or, with `target` None, remove a bucket's server access logging; the gateway checked
    the target bucket and the caller's rights first."""
    bucket: str
    target: LoggingTarget | None = None
    Reply = BucketRecord


class BucketObjectLock(Request, tag="bucket_object_lock"):
    """Set a bucket's object lock configuration (PutObjectLockConfiguration): the bucket must have versioning
    Enabled (InvalidBucketState) or object lock already; `config.enabled` must be true (it can't be turned off)."""
    bucket: str
    config: ObjectLockConfig
    Reply = BucketRecord


class Usage(Msg):
    usage: dict[str, BucketUsed]  # bucket -> what it holds


class BucketUsage(Request, tag="bucket_usage"):
    """Bytes and objects of one bucket, or of all."""
    bucket: str | None = None
    Reply = Usage


class SseInfo(Msg):
    """How an object (or a multipart upload) is encrypted (gateway/crypto.py): `alg` "AES256" (SSE-S3), "aws:kms"
    (`kms_key`) or "SSE-C"; `dk` its data key wrapped by the master key, the KMS key or the customer's key. SSE-C
    also keeps the customer key's MD5 (echoed in responses) and a salted HMAC of it (`salt`, `mac`) to check the key
    of later requests; the key itself is never stored. Only gateways read or write these fields."""
    alg: str
    dk: str
    kms_key: str | None = field(default=None, name="kid")
    key_md5: str | None = field(default=None, name="kmd5")
    salt: str | None = None
    mac: str | None = None
    bucket_key: bool = field(default=False, name="bk")


class ObjectRecord(Msg):
    """An object (or one version of it) as the S3 side sees it; the NameNode stores it in the key's inode with the
    POSIX attributes besides (mode, uid, gid, links), which only the POSIX ops show."""
    ino: int = 0
    size: int = 0
    etag: str = ""
    mtime: int = field(default=0, name="mt")  # ns since the epoch
    blocks: tuple[BlockRef, ...] = field(default=(), name="blk")
    block_offset: int = field(default=0, name="boff")  # a ranged stat: the offset in the object of blocks[0]
    content_type: str | None = field(default=None, name="ctype")
    meta: dict[str, str] = {}  # x-amz-meta-*
    headers: dict[str, str] = field(default_factory=dict, name="hdr")  # standard headers stored with it
    xattrs: dict[str, str] = field(default_factory=dict, name="xa")  # set through the mount
    owner: str = ""
    acl: str | list[tuple[str, str]] | None = None
    storage_class: str | None = field(default=None, name="sc")
    checksum: dict[str, str] = field(default_factory=dict, name="cs")  # {alg: value, "type": ...}
    part_sizes: tuple[int, ...] = field(default=(), name="ps")
    part_checksums: tuple[str, ...] = field(default=(), name="pcs")
    version_id: str | None = field(default=None, name="vid")
    delete_marker: bool = field(default=False, name="dm")
    upload_id: str | None = field(default=None, name="mpu")  # the multipart upload it was completed from
    lock_mode: str | None = field(default=None, name="lkm")  # object lock retention: GOVERNANCE or COMPLIANCE
    lock_until: int | None = field(default=None, name="lku")  # ... until this time (ms since the epoch)
    legal_hold: bool | None = field(default=None, name="lh")  # None: never set (GET shows no header)
    sse: SseInfo | None = None  # server-side encryption: its blocks hold ciphertext
    tags: dict[str, str] = field(default_factory=dict, name="tg")  # object tagging, of this version


class WrittenBlock(Msg, array_like=True):
    """A block a writer stored, as a commit names it: [id, size, crc, nodes, acks], acks the copies its primary
    acknowledged as durable (the NameNode checks it against the bucket's write policy)."""
    id: int
    size: int
    crc: int
    nodes: tuple[int, ...]
    acks: int = 1


class Committed(Msg):
    """What a commit made: the object's inode, ETag, time and version id (a versioned bucket)."""
    ino: int
    etag: str
    mtime: int = field(name="mt")
    version_id: str | None = field(default=None, name="vid")


class PutObject(Request, tag="put_object"):
    """Commit an object: `obj` has its attributes (content type, metadata, owner, ACL, size, ETag, checksum; the
    NameNode sets inode, time and version id) and `blocks` its content; it replaces the key's current version
    atomically, if the conditions hold. The blocks must be pending (allocated and never committed): the same commit
    sent again (its answer was lost) answers as the first did and changes nothing; any other is InvalidInput."""
    bucket: str
    key: str
    obj: ObjectRecord
    blocks: tuple[WrittenBlock, ...] = ()
    if_match: str | None = None
    if_none_match: str | None = None
    Reply = Committed


class PutItem(Msg):
    """One object of a put_objects batch: as PutObject's fields."""
    key: str
    obj: ObjectRecord
    blocks: tuple[WrittenBlock, ...] = ()
    if_match: str | None = None
    if_none_match: str | None = None


class CommittedMany(Msg):
    """What a put_objects batch made: per item (in request order) its Committed, or None and its error in `errs`
    (by index: [error class, message])."""
    done: list[Committed | None]
    errs: dict[int, PieceError] = {}


class PutObjects(Request, tag="put_objects"):
    """Commit many new objects of one bucket in one NameNode command: each is committed as PutObject would (whole or
    not at all, its own ETag, version and conditions), in one write batch; an item that fails a check (quota,
    condition, write policy) is that item's error and the others still commit. Every block must be one allocated
    and not yet committed, as PutObject's: an item naming another is refused (InvalidInput), so a block is never
    committed twice nor taken from another object; an item committed before (the batch sent again) answers as it
    did."""
    bucket: str
    items: list[PutItem]
    Reply = CommittedMany


class Located(Msg):
    """An object's record and the addresses of its blocks' holders (str(node id) -> "host:port")."""
    obj: ObjectRecord
    addrs: dict[str, str]


class Stat(Request, tag="stat"):
    """The current version of a key, or version `version_id`; with `range` [lo, hi) (lo < 0: the last -lo bytes,
    hi None: to the end) only the blocks holding those bytes."""
    bucket: str
    key: str
    version_id: str | None = None
    range: tuple[I64, I64 | None] | None = None
    Reply = Located


class Deleted(Msg):
    existed: bool
    delete_marker: bool = field(default=False, name="dm")  # a delete marker was made or removed
    version_id: str | None = field(default=None, name="vid")


class DeleteObject(Request, tag="delete_object"):
    """Delete a key or one version of it, if the conditions (ETag, last-modified second, size) hold."""
    bucket: str
    key: str
    version_id: str | None = None
    if_match: str | None = None
    if_mtime: I64 | None = None
    if_size: I64 | None = None
    bypass: bool = False  # x-amz-bypass-governance-retention (the caller may bypass GOVERNANCE retention)
    Reply = Deleted


class ObjectLockSet(Request, tag="object_lock_set"):
    """PutObjectRetention (`retention`: True, with `mode`/`until`; mode None removes it) and/or PutObjectLegalHold
    (`legal_hold`) on the current version or `version_id`. The NameNode enforces S3's rules: the bucket has object
    lock (ObjectLockNotEnabled), a date in the future (InvalidInput), COMPLIANCE never shortened, changed or
    removed while it runs, GOVERNANCE only with `bypass` (ObjectLocked)."""
    bucket: str
    key: str
    version_id: str | None = None
    retention: bool = False
    mode: str | None = None
    until: I64 | None = None  # ms since the epoch
    legal_hold: bool | None = None
    bypass: bool = False
    Reply = ObjectRecord


class ObjectSettings(Request, tag="object_settings"):
    """Change an existing object's stored attributes (of its current version, or of `version_id`) without touching
    its data."""
    bucket: str
    key: str
    acl: str | list[tuple[str, str]] | None = None
    version_id: str | None = None
    Reply = Done


class TagsSet(Msg):
    """What a tagging change touched: the version of the object (a versioned bucket's, else None)."""
    version_id: str | None = field(default=None, name="vid")


class ObjectTags(Request, tag="object_tags"):
    """Replace the tag set of a key's current version, or of version `version_id` (empty: delete the tags)."""
    bucket: str
    key: str
    tags: dict[str, str] = {}
    version_id: str | None = None
    Reply = TagsSet


class BucketTags(Request, tag="bucket_tags"):
    """Replace a bucket's tag set (None: delete it)."""
    bucket: str
    tags: dict[str, str] | None
    Reply = BucketRecord


class BucketLifecycle(Request, tag="bucket_lifecycle"):
    """Replace a bucket's lifecycle configuration (`Unset()`: delete it)."""
    bucket: str
    rules: list[LifecycleRule] | Unset
    Reply = BucketRecord


class ListEntry(Msg, array_like=True, tag="k"):
    """A listed key: on the wire ["k", key, size, etag, mtime, owner, storage class]."""
    key: str
    size: int
    etag: str
    mtime: int
    owner: str
    storage_class: str


class ListPrefix(Msg, array_like=True, tag="p"):
    """A common prefix in a listing: ["p", prefix]."""
    prefix: str


class Listing(Msg):
    items: list[ListEntry | ListPrefix]
    truncated: bool


class ListObjects(Request, tag="list_objects"):
    """Keys and common prefixes in S3 order, after `after`."""
    bucket: str
    prefix: str = ""
    delimiter: str = ""
    after: str = ""
    max_keys: I64 = 1000
    Reply = Listing


class VersionEntry(Msg, array_like=True, tag="v"):
    """A listed version: ["v", key, version id, is latest, size, etag, mtime, owner, storage class, is a marker]."""
    key: str
    version_id: str
    latest: bool
    size: int
    etag: str
    mtime: int
    owner: str
    storage_class: str
    delete_marker: bool


class VersionListing(Msg):
    items: list[VersionEntry | ListPrefix]
    truncated: bool


class ListVersions(Request, tag="list_versions"):
    """Every version in S3 order (keys ascending, each key's newest first)."""
    bucket: str
    prefix: str = ""
    delimiter: str = ""
    key_marker: str = ""
    vid_marker: str = ""
    max_keys: I64 = 1000
    Reply = VersionListing


# (end of buckets and objects)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: multipart uploads (namenode/api/multipart.py).
# ---------------------------------------------------------------------------------------------------------------------

class UploadAttrs(Msg):
    """The attributes a multipart upload's object gets, chosen when the upload starts."""
    content_type: str | None = field(default=None, name="ctype")
    meta: dict[str, str] = {}
    headers: dict[str, str] = field(default_factory=dict, name="hdr")
    owner: str = ""
    acl: str | list[tuple[str, str]] | None = None
    storage_class: str | None = field(default=None, name="sc")
    checksum_algorithm: str | None = field(default=None, name="csa")
    checksum_type: str | None = field(default=None, name="cst")  # COMPOSITE or FULL_OBJECT
    lock_mode: str | None = field(default=None, name="lkm")  # object lock, as ObjectRecord's
    lock_until: int | None = field(default=None, name="lku")
    legal_hold: bool | None = field(default=None, name="lh")
    sse: SseInfo | None = None  # every part is encrypted with this upload's data key
    tags: dict[str, str] = field(default_factory=dict, name="tg")


class UploadRecord(Msg):
    """A multipart upload in progress."""
    id: str = ""  # in listings
    bucket: str = field(default="", name="b")
    key: str = field(default="", name="k")
    attrs: UploadAttrs = field(default_factory=UploadAttrs, name="a")
    initiated: int = field(default=0, name="t")  # ns since the epoch


class PartRecord(Msg):
    """An uploaded part (its blocks stay on the NameNode)."""
    number: int = field(default=0, name="n")
    size: int = 0
    etag: str = ""
    mtime: int = field(default=0, name="mt")
    checksum: dict[str, str] = field(default_factory=dict, name="cs")


class UploadCreated(Msg):
    upload_id: str


class MpuCreate(Request, tag="mpu_create"):
    bucket: str
    key: str
    attrs: UploadAttrs
    Reply = UploadCreated


class MpuGet(Request, tag="mpu_get"):
    bucket: str
    key: str
    upload_id: str
    Reply = UploadRecord


class MpuPutPart(Request, tag="mpu_put_part"):
    """Store part `number` (replacing any earlier upload of it): `part` has its size, ETag and checksums. The
    blocks must be pending, as PutObject's (the same part sent again changes nothing)."""
    bucket: str
    key: str
    upload_id: str
    number: I64
    part: PartRecord
    blocks: tuple[WrittenBlock, ...] = ()
    Reply = Done


class Parts(Msg):
    upload: UploadRecord
    parts: list[PartRecord]


class MpuListParts(Request, tag="mpu_list_parts"):
    bucket: str
    key: str
    upload_id: str
    Reply = Parts


class PartChoice(Msg):
    """A part named in CompleteMultipartUpload."""
    number: int = field(name="n")
    etag: str = ""
    checksum: dict[str, str] = field(default_factory=dict, name="cs")


class Completed(Msg):
    ino: int
    etag: str
    mtime: int = field(name="mt")
    version_id: str | None = field(default=None, name="vid")
    size: int = 0
    checksum: dict[str, str] = field(default_factory=dict, name="cs")


class MpuComplete(Request, tag="mpu_complete"):
    """Make the upload's chosen parts the object, atomically; `checksum` is what the client expects of it ({alg:
    value} and optionally "type")."""
    bucket: str
    key: str
    upload_id: str
    parts: list[PartChoice]
    checksum: dict[str, str] = {}
    if_match: str | None = None
    if_none_match: str | None = None
    Reply = Completed


class MpuAbort(Request, tag="mpu_abort"):
    bucket: str
    key: str
    upload_id: str
    Reply = Done


class Uploads(Msg):
    uploads: list[UploadRecord]


class MpuList(Request, tag="mpu_list"):
    """A bucket's uploads in progress, by key then time."""
    bucket: str
    Reply = Uploads


# (end of multipart)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: blocks and GC (namenode/api/blocks.py).
# ---------------------------------------------------------------------------------------------------------------------

class Placed(Msg, array_like=True):
    """An allocated block and the nodes to write it to: [id, nodes] (nodes[0] the primary)."""
    id: int
    nodes: tuple[int, ...]


class Allocation(Msg):
    block_size: int
    blocks: list[Placed]
    addrs: dict[str, str]  # str(node id) -> "host:port"
    acks: int = 1  # copies the primary waits for (the bucket's write policy)
    # seconds the NameNode keeps these blocks pending before it expires them (NN_PENDING_GRACE_S; 0: not said):
    # a commit naming an expired block is refused, so a gateway lets go of leased blocks well before
    grace_s: float = 0.0


class Allocate(Request, tag="allocate"):
    """Allocate `count` blocks for bucket `bucket`, placed from stripe `seed` and index `index` (0: by block id)."""
    bucket: str
    count: I64 = 1
    seed: I64 = 0
    index: I64 = 0
    Reply = Allocation


class Abandon(Request, tag="abandon"):
    """Allocated blocks that will never be committed."""
    blocks: list[I64]
    Reply = Done


class ReportShort(Request, tag="report_short"):
    """Blocks a writer stored on fewer nodes than placed: [(block, replicas wanted), ...], topped up later."""
    blocks: list[tuple[I64, int]]
    Reply = Done


class GcPass(Msg):
    expired: int
    released: int


class GcOnce(Request, tag="gc_once"):
    """One garbage collection pass now: expire stale allocations, release freed blocks past their grace."""
    Reply = GcPass


class BlockStats(Msg):
    """Garbage, pending allocations and the repair worker's counters."""
    garbage: int
    freed: int
    pending: int
    under_replicated: int = 0
    lost: int = 0
    waiting: dict[str, int] = {}
    repairs_in_flight: int = 0
    copy_orders: int = 0
    queued: int = 0
    dead_nodes: list[int] = []
    short_blocks: int = 0
    repaired: int = 0
    read_repairs: int = 0
    failed: int = 0
    expired: int = 0
    topped_up: int = 0
    surplus_deleted: int = 0
    gc_deleted: int = 0


class Stats(Request, tag="stats"):
    Reply = BlockStats


class Pending(Request, tag="pending"):
    """Blocks allocated and not yet committed or abandoned."""
    Reply = BlockIds


class Referenced(Request, tag="referenced"):
    """Every block some object, version or part refers to."""
    Reply = BlockIds


# (end of blocks and GC)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: the POSIX namespace, batch reads and manifests (namenode/api/posix.py, batch.py).
# ---------------------------------------------------------------------------------------------------------------------


# Batch reads and manifests, for training loaders (namenode/api/batch.py, gateway/s3/batch.py).

class ReadStat(Msg):
    """One key of a StatMany: what a read needs of its record (the rest of the inode stays on the NameNode), or
    why it can't be read (`error`: a DomainError class name, `msg` its text)."""
    size: int = 0
    etag: str = ""
    mt: int = 0
    blk: list[BlockRef] = []
    acl: Any = None
    owner: str = ""  # the object's owner (full control of it, whatever its ACL)
    sse: SseInfo | None = None
    tags: dict[str, str] = field(default_factory=dict, name="tg")  # for policy conditions on the object's tags
    error: str = ""
    msg: str = ""


class ReadStats(Msg):
    """StatMany's answer, in the order asked; `addrs` has the RPC address of every holder of a block listed."""
    objs: list[ReadStat]
    addrs: dict[str, str] = {}


class StatMany(Request, tag="stat_many"):
    """The records of many objects ([bucket, key] each) for one batch read."""
    items: list[tuple[str, str]]
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = ReadStats


class ManifestItem(Msg, array_like=True):
    """One key of a manifest: [key, size, etag, mtime_ns]."""
    key: str
    size: int
    etag: str
    mtime_ns: int


class ManifestPage(Msg):
    items: list[ManifestItem]
    truncated: bool = False


class Manifest(Request, tag="manifest"):
    """A page of every key under `prefix`, in S3 order after `after` (from the listing summaries, no inode read)."""
    bucket: str
    prefix: str = ""
    after: str = ""
    limit: I64 = 10_000
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = ManifestPage


# The POSIX namespace, by inode (namenode/posix.py, namenode/api/posix.py). The mount sends these same messages to
# the gateway's /_epochfs/fs (gateway/s3/posix.py), which checks the caller's permission on the bucket, sets `bi` (and
# `bucket` for the operations that change its usage) and forwards them to the NameNode.



class InodeAttr(Msg):
    """An inode's attributes as stat shows them (times in ns); every field is always sent."""
    ino: int
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    rdev: int
    at: int
    mt: int
    ct: int
    etag: str


class DirEntry(Msg, array_like=True):
    """[name, attributes] of one directory entry."""
    name: str
    attr: InodeAttr


class DirPage(Msg):
    """Entries in key order; `next` is the `after` of the next page, None at the end."""
    entries: list[DirEntry]
    next: str | None


class BlockSpan(Msg, array_like=True):
    """[id, size] of one block of a file's layout."""
    id: int
    size: int


class FileLayout(Msg):
    """What a writer needs to change part of a file: its blocks in order, its size and version (ETag); `bs`, the
    size new extents are cut into, is the bucket's block size (set by the gateway)."""
    blk: list[BlockSpan]
    size: int
    etag: str
    bs: int = 0


class FsCommitted(InodeAttr):
    """A commit's answer: the file's new attributes and layout (`bs` as in FileLayout)."""
    layout: list[BlockSpan]
    bs: int = 0


class LinkTarget(Msg):
    target: str


class XattrValue(Msg):
    value: str


class XattrNames(Msg):
    names: list[str]


class FsUsage(Msg):
    """statfs: bytes of the live DataNodes, and inodes ever made."""
    capacity: int
    used: int
    files: int


class FileBlocks(Msg):
    """A file's blocks for a read, with the RPC address of every holder, its version and its object ACL."""
    blk: list[BlockRef]
    size: int
    etag: str
    acl: Any = None
    owner: str = ""  # the object's owner (full control of it, whatever its ACL)
    addrs: dict[str, str] = {}
    sse: SseInfo | None = None  # an object encrypted through S3: only the gateway can read its blocks


class AttrChanges(Msg):
    """setattr's changes: chmod, chown, utimens (ns) and truncation to zero (size 0); None leaves one alone."""
    mode: I64 | None = None
    uid: I64 | None = None
    gid: I64 | None = None
    at: I64 | None = None
    mt: I64 | None = None
    size: I64 | None = None


class FsRequest(Request, kw_only=True):
    """An operation scoped to the bucket whose directory inode is `bi` (None: the tree of buckets), set by the
    gateway after checking the caller's permission; every inode it names must lie in that bucket."""
    bi: Nat | None = None


class FsLookup(FsRequest, tag="fs_lookup"):
    parent: Nat
    name: str
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = InodeAttr


class FsGetattr(FsRequest, tag="fs_getattr"):
    ino: Nat
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = InodeAttr


class FsReaddir(FsRequest, tag="fs_readdir"):
    ino: Nat
    after: str = ""
    limit: Nat = 1000
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = DirPage


class FsReadlink(FsRequest, tag="fs_readlink"):
    ino: Nat
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = LinkTarget


class FsLayout(FsRequest, tag="fs_layout"):
    ino: Nat
    Reply = FileLayout


class FsMkdir(FsRequest, tag="fs_mkdir"):
    parent: Nat
    name: str
    mode: I64
    uid: I64
    gid: I64
    Reply = InodeAttr


class FsMknod(FsRequest, tag="fs_mknod"):
    """A regular file, FIFO, socket or device node; `bucket` is charged for a regular file."""
    parent: Nat
    name: str
    mode: I64
    uid: I64
    gid: I64
    rdev: I64 = 0
    bucket: str | None = None
    Reply = InodeAttr


class FsSymlink(FsRequest, tag="fs_symlink"):
    """`target`: its bytes as latin-1 text."""
    parent: Nat
    name: str
    target: str
    uid: I64
    gid: I64
    Reply = InodeAttr


class FsLink(FsRequest, tag="fs_link"):
    ino: Nat
    parent: Nat
    name: str
    bucket: str | None = None
    Reply = InodeAttr


class FsUnlink(FsRequest, tag="fs_unlink"):
    parent: Nat
    name: str
    bucket: str | None = None
    Reply = Changed


class FsRmdir(FsRequest, tag="fs_rmdir"):
    parent: Nat
    name: str
    Reply = Done


class FsRename(FsRequest, tag="fs_rename"):
    """`flags`: RENAME_NOREPLACE (1) or RENAME_EXCHANGE (2)."""
    parent: Nat
    name: str
    newparent: Nat
    newname: str
    flags: I64 = 0
    bucket: str | None = None
    Reply = Done


class FsSetattr(FsRequest, tag="fs_setattr"):
    ino: Nat
    fields: AttrChanges
    bucket: str | None = None
    Reply = InodeAttr


class FsGetxattr(FsRequest, tag="fs_getxattr"):
    ino: Nat
    name: str
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = XattrValue


class FsListxattr(FsRequest, tag="fs_listxattr"):
    ino: Nat
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = XattrNames


class FsSetxattr(FsRequest, tag="fs_setxattr"):
    """`value`: its bytes as latin-1 text; `flags`: XATTR_CREATE (1) or XATTR_REPLACE (2)."""
    ino: Nat
    name: str
    value: str
    flags: I64 = 0
    Reply = Done


class FsRemovexattr(FsRequest, tag="fs_removexattr"):
    ino: Nat
    name: str
    Reply = Done


class FsStatfs(Request, tag="fs_statfs"):
    Reply = FsUsage


class FsBlocks(FsRequest, tag="fs_blocks"):
    """A file's blocks, for the gateway's reads of it."""
    ino: Nat
    stale: StaleOk | None = None  # a standby may answer (StaleOk)
    Reply = FileBlocks


class FsCommit(FsRequest, tag="fs_commit"):
    """New content of file `ino`: blocks kept from version `base` (bare ids) and new ones, `size` bytes in all.
    `mt`: an mtime set explicitly after the last write (else the commit's time); `bucket` is charged. `fresh`: the
    new blocks must be pending (allocated, never committed): blocks a client wrote directly."""
    ino: Nat
    blk: list[WrittenBlock | I64]
    size: Nat
    etag: str
    bucket: str | None = None
    base: str | None = None
    mt: Nat | None = None
    fresh: bool = False
    held: AttrChanges | None = None  # chmod/chown/atime applied with the commit (FileWrite.held)
    Reply = FsCommitted


class InodeRange(Msg):
    """Inode numbers [first, first + n), reserved for one mount to give the files it creates itself."""
    first: Nat
    n: Nat


class FsReserveInodes(FsRequest, tag="fs_reserve_inodes"):
    """Reserve `n` inode numbers: a mount in write-back mode names the files it creates with them before they
    exist on the NameNode (FsCreateFiles)."""
    n: Annotated[int, msgspec.Meta(ge=1, le=1 << 16)]
    owner: str = ""  # set by the gateway: the caller's access key, the only one that may use them (FsCreateFiles)
    Reply = InodeRange


class NewFile(Msg):
    """One file of a batch create (PUT /_epochfs/fs/<bucket>?files=1): inode `ino` (reserved with FsReserveInodes)
    named `name` in directory `parent`, with its attributes (times in ns) and `size` bytes of content. `ct`: its
    ctime in the mount, `dt`: when the mount made it (its directory's new mtime and ctime, unless those are later
    already); without them the NameNode's time."""
    ino: Nat
    parent: Nat
    name: str
    mode: I64
    uid: I64
    gid: I64
    at: Nat
    mt: Nat
    size: Nat
    ct: Nat | None = None
    dt: Nat | None = None


class NewFiles(Msg):
    """The index ahead of a batch create's bytes (the files' contents back to back, in index order)."""
    items: list[NewFile]


class StoredFile(Msg):
    """A NewFile whose content is stored already: its blocks and ETag."""
    f: NewFile
    blk: list[WrittenBlock]
    etag: str


class FsCreateFiles(FsRequest, tag="fs_create_files"):
    """Create many regular files with their content, one NameNode command; each whole or not at all (its own
    error otherwise). `bucket` is charged."""
    items: list[StoredFile]
    bucket: str | None = None
    owner: str = ""  # set by the gateway: the caller's access key; each inode must be one it reserved


class FileCreated(Msg):
    """One file of a batch create: its attributes, or the name of its domain error and the message."""
    a: InodeAttr | None = None
    layout: list[BlockSpan] = []
    err: str | None = None
    msg: str = ""


class FilesCreated(Msg):
    items: list[FileCreated]


FsCreateFiles.Reply = FilesCreated

class DirNames(Msg, array_like=True):
    """[ino, attributes, names, inodes] of one directory: the names in it ("/" ended: a subdirectory) and their
    inodes, without their attributes. attr None: gone, not a directory or outside the bucket; names None: more
    than FsDirs.MAX_NAMES (ask with FsReaddir)."""
    ino: int
    attr: InodeAttr | None
    names: list[str] | None
    inos: list[int] | None


class DirsNames(Msg):
    dirs: list[DirNames]


class FsDirs(FsRequest, tag="fs_dirs"):
    """The attributes and names of several directories at once: how a write-back mount renews what it knows of
    the directories it is writing into (which names are free, their attributes) in one request a period."""
    inos: Annotated[list[Nat], msgspec.Meta(max_length=256)]
    MAX_NAMES: ClassVar[int] = 20_000
    Reply = DirsNames


# the operations the mount sends to the gateway's /_epochfs/fs (the gateway decodes one of them, never another op)
FS_OPS = (FsLookup, FsGetattr, FsReaddir, FsReadlink, FsLayout, FsMkdir, FsMknod, FsSymlink, FsLink, FsUnlink,
          FsRmdir, FsRename, FsSetattr, FsGetxattr, FsListxattr, FsSetxattr, FsRemovexattr, FsStatfs,
          FsReserveInodes, FsDirs)

# the reads a standby NameNode may answer when the request accepts a stale answer (its `stale` field, StaleOk): the
# loaders' batch stats and manifests, and the mount's reads by inode (a dataset-mode mount asks for it)
STALE_READS = (StatMany, Manifest, FsLookup, FsGetattr, FsReaddir, FsReadlink, FsGetxattr, FsListxattr, FsBlocks)

# (end of POSIX)

# ---------------------------------------------------------------------------------------------------------------------
# The gateway's read plans for native clients (gateway/s3/batch.py /_epochfs/locate and /batch, gateway/s3/posix.py
# GET /_epochfs/fs?locate=1), and the layout of a mount's write (PUT /_epochfs/fs). JSON over HTTP, decoded by
# common/client.py (one decoder per reply type); the wire form is the one these always had (pieces and segments are
# lists), so clients and gateways of either side of the change work together.
# ---------------------------------------------------------------------------------------------------------------------

class LocatedPiece(Msg, array_like=True, gc=False):
    """Bytes [offset, offset + length) of block `id`, held by `nodes` (primary first): on the wire
    [id, offset, length, [node, ...]]. What a client reads from a DataNode with the plan's read token. (gc=False: it
    holds only ints, so it can't be part of a reference cycle, and a plan's hundreds of them decode ~5% faster.)"""
    id: int
    offset: int
    length: int
    nodes: tuple[int, ...]


class FileLocated(Msg):
    """Where bytes of a mount's file are (GET /_epochfs/fs/<bucket>?ino=&off=&len=&locate=1): its version (ETag) and
    size, the pieces holding the bytes asked for in order, the RPC address of every holder (str(node id) ->
    "host:port") and a read token for every block listed."""
    etag: str
    size: int
    pieces: list[LocatedPiece] = field(name="p")
    addrs: dict[str, str]
    grant: ReadGrant


class BatchItem(Msg):
    """One item of a batch's index (POST /_epochfs/batch and /locate), in request order: either the item's length,
    the object's size, ETag (unquoted) and mtime (ns), with its pieces in a locate answer, or its error (`err`, the
    S3 code; `msg`). Fields left unset are not sent: an item carries `len` exactly when it succeeded."""
    length: int | None = field(name="len", default=None)
    size: int | None = None
    etag: str | None = None
    mt: int | None = None
    pieces: list[LocatedPiece] | None = field(name="p", default=None)
    err: str | None = None
    msg: str | None = None


class PutResult(Msg):
    """One object of a batch PUT (POST /_epochfs/put), in request order: its ETag (unquoted), mtime (ns), version id
    and checksums, or its error (`err`, the S3 code; `msg`)."""
    etag: str | None = None
    mt: int | None = None
    vid: str | None = None
    cs: dict[str, str] | None = None
    err: str | None = None
    msg: str | None = None


class PutResults(Msg):
    """The answer of a batch PUT: one PutResult per object of the request."""
    items: list[PutResult]


class BatchIndex(Msg):
    """The index ahead of a batch read's bytes (POST /_epochfs/batch): the items' bytes follow in this order."""
    items: list[BatchItem]


class BatchLocated(Msg):
    """A batch read's plan instead of its bytes (POST /_epochfs/locate): the items with their pieces, the RPC
    address of every holder and one read token for every block listed."""
    items: list[BatchItem]
    addrs: dict[str, str]
    grant: ReadGrant


class KeepBlock(Msg, array_like=True, tag="k"):
    """A block of the base version a file write keeps as it is: on the wire ["k", block id]."""
    id: Nat


class NewExtent(Msg, array_like=True, tag="n"):
    """`length` new bytes of a file write, sent in the body after the layout: on the wire ["n", length]."""
    length: Nat


class ZeroExtent(Msg, array_like=True, tag="z"):
    """`length` zero bytes of a file write, not in the body (a hole of the mount's local copy): on the wire ["z",
    length]. The gateway stores them as blocks of zeros, which cross the network as their sizes."""
    length: Nat


class RestOfBody(Msg, array_like=True, tag="r"):
    """All of a file write's content, new, is the rest of the body (sent chunked, its length not known when it
    starts): on the wire ["r"], the layout's only segment, with size 0."""


class FileWriteDirect(Msg):
    """A mount's file content written straight to the DataNodes (PUT /_epochfs/fs/<bucket>?ino=&direct=1): all of
    it new, the blocks of `receipts` in order, stored with the write tokens `grants` (PUT ...?alloc=N); `base`, `mt`
    and `held` as in FileWrite."""
    base: str | None
    grants: list[WriteGrant]
    receipts: list[BlockReceipt]
    mt: Nat | None = None
    held: AttrChanges | None = None


class FileWrite(Msg):
    """The layout ahead of a mount's file write (PUT /_epochfs/fs/<bucket>?ino=): the new content, `size` bytes, is
    `segs` in order, blocks kept from version `base` (its ETag; None: no base), new extents and extents of zeros.
    `mt`: an mtime set with utimens after the last write, which the commit takes instead of its own time. `held`: a
    chmod, chown or atime set while the changes were unsaved (mode, uid, gid, at only), applied with the commit as a
    setattr would be, saving the request of its own (an archiver restores each file's owner and mode before closing
    it)."""
    base: str | None
    size: Nat
    segs: list[KeepBlock | NewExtent | ZeroExtent | RestOfBody]
    mt: Nat | None = None
    held: AttrChanges | None = None

# (end of read plans)

# ---------------------------------------------------------------------------------------------------------------------
# NameNode protocol: access keys, jobs and operator calls (namenode/api/keys.py, jobs.py).
# ---------------------------------------------------------------------------------------------------------------------

class AccessKeyRecord(Msg):
    """An access key made through the admin API (the secret is left out of listings)."""
    access_key: str
    secret_key: str = ""
    owner_id: str = ""
    name: str = ""
    admin: bool = False
    disabled: bool = False
    buckets: dict[str, str] = {}  # bucket -> "read" | "write" | "owner"
    created: int = 0


class KeyCreate(Request, tag="key_create"):
    access_key: str
    secret_key: str
    owner_id: str = ""
    name: str = ""
    admin: bool = False
    buckets: dict[str, str] = {}
    Reply = AccessKeyRecord


class KeyGet(Request, tag="key_get"):
    access_key: str
    Reply = AccessKeyRecord


class AccessKeys(Msg):
    keys: list[AccessKeyRecord]


class KeyList(Request, tag="key_list"):
    Reply = AccessKeys


class KeyUpdate(Request, tag="key_update"):
    """Change some of a key's fields (left out: unchanged); its secret never changes."""
    access_key: str
    name: str | None = None
    owner_id: str | None = None
    admin: bool | None = None
    disabled: bool | None = None
    buckets: dict[str, str] | None = None
    Reply = AccessKeyRecord


class KeyDelete(Request, tag="key_delete"):
    access_key: str
    Reply = Done


class KmsKeyRecord(Msg):
    """An SSE-KMS key id made through the admin API: the gateways derive its material from the master key."""
    key_id: str
    description: str = ""
    created: int = 0


class KmsKeyCreate(Request, tag="kms_key_create"):
    key_id: str
    description: str = ""
    Reply = KmsKeyRecord


class KmsKeys(Msg):
    keys: list[KmsKeyRecord]


class KmsKeyList(Request, tag="kms_key_list"):
    Reply = KmsKeys


class JobInfo(Msg):
    """A NameNode job (repair, decommission, gc, scrub, rebalance): what every kind has, and its own counters."""
    id: str
    kind: str
    state: str
    node: int | None = None
    progress: float | None = None
    detail: dict[str, Any] = {}  # done, total, started, and per kind (a scrub's parts, a rebalance's bytes moved...)


class JobList(Msg):
    jobs: list[JobInfo]


class Jobs(Request, tag="jobs"):
    Reply = JobList


class JobStart(Request, tag="job_start"):
    """Start a scrub (of every live DataNode, or of `node`) or a rebalance job (or get the one running)."""
    kind: str
    node: I64 | None = None
    Reply = JobInfo


class Decommission(Request, tag="decommission"):
    """Drain DataNode `node`, then retire it."""
    node: I64
    Reply = JobInfo


class JobProgress(Msg):
    done: int
    total: int
    progress: float | None = None


class NodeInfo(Msg):
    """A DataNode as the operator sees it."""
    id: int
    uuid: str
    host: str
    rpc_port: int
    http_port: int = 0
    capacity: int = 0
    used: int = 0
    blocks: int = 0
    disk: str = ""
    last_seen: float = 0.0
    extra: dict[str, Any] = {}
    admin: str = ""
    write_error: str = ""
    alive: bool = False
    heartbeat_age_s: float | None = None
    state: str = ""
    replication_lag: ReplicationLag = field(default_factory=ReplicationLag)
    decommission: JobProgress | None = None


class NodeList(Msg):
    nodes: list[NodeInfo]


class Nodes(Request, tag="nodes"):
    Reply = NodeList


# (end of keys and jobs)


# ---------------------------------------------------------------------------------------------------------------------
# NameNode high availability (namenode/ha/): who is active, how far each NameNode has applied the metadata log.
# Answered by every NameNode, active or standby (the one request a standby serves besides its checkpoint).
# ---------------------------------------------------------------------------------------------------------------------

class HaMember(Msg):
    """One NameNode as the metadata log sees it."""
    name: str
    addr: str                  # its RPC address, "host:port"
    http: str = ""             # its HTTP address (checkpoint download, /healthz), "host:port"
    role: str = ""             # "active", "standby", "rebuilding", "embedded"
    applied: int = 0           # the sequence number of the last command durably applied to its RocksDB
    lag: int = 0               # commands behind the log's end


class HaState(Msg):
    """The metadata log and its NameNodes, as the answering NameNode sees them. `mode` is "embedded" (one NameNode,
    no etcd: `members` is itself) or "etcd"."""
    mode: str
    name: str                  # the answering NameNode
    role: str
    epoch: int = 0             # the current leader's fencing epoch (its etcd leader key's create revision)
    leader: str = ""           # the active NameNode's RPC address
    log_end: int = 0           # the sequence number of the last command in the log
    log_first: int = 0         # the first command still in etcd (older ones were truncated after a checkpoint)
    members: list[HaMember] = []
    etcd: list[dict[str, Any]] = []  # per endpoint: {"endpoint", "healthy", "leader", "db_size", "revision", "error"}
    stale_served: int = 0      # stale reads (StaleOk) the answering NameNode served as a standby since it started
    stale_refused: int = 0     # and those it refused as TooStale (the client asked the active one)


class HaStatus(Request, tag="ha_status"):
    Reply = HaState


class LogGroup(Msg, array_like=True):
    """One group of the metadata log as etcd committed it (namenode/ha/etcd_journal.py: its stored value, `size`
    bytes of the payload, in order)."""
    first: int                 # its first command's sequence number (its log key)
    rev: int                   # the etcd revision that wrote it
    size: int


class LogPush(Request, tag="log_push"):
    """The active NameNode to a standby: log groups etcd has committed, in log order, so that the standby need not
    receive them through an etcd watch (the payload: their values). Answered with the standby's applied position;
    a standby that finds a gap reads the log from etcd."""
    groups: list[LogGroup]
    Reply = LogPosition


# ---------------------------------------------------------------------------------------------------------------------
# Direct writes (common/writetoken.py, common/directwrite.py): a native client stores blocks on the DataNodes itself,
# the gateway only authorizes, allocates (POST /_epochfs/allocate/<bucket>) and commits (POST /_epochfs/commit/<bucket>).
# ---------------------------------------------------------------------------------------------------------------------

class WriteGrant(Msg):
    """A gateway's write token: it lets the client `who` (an access key) store the allocated `blocks` of bucket
    `bucket` (each at most `size` bytes, on exactly its placed nodes, whose RPC addresses are `addrs`) until `exp`
    (unix seconds), each replicated to the block's other nodes and acknowledged once `acks` copies are on disk.
    `tok` is the MAC of all of it under a key derived from the cluster secret: a DataNode refuses a block the token
    does not name, a size over `size`, an expired token, and a node list or address the client changed."""
    bucket: str
    who: str
    blocks: list[Placed]
    addrs: dict[str, str]
    size: int
    exp: int
    acks: int = 1
    tok: str = ""


class BlockReceipt(Msg, array_like=True):
    """What a DataNode stored of a direct write: [id, size, crc, digest, nodes (the primary first), acks, mac]; the
    digest is the block's MD5 (hex) or "x" and its XXH3-128 (common/writetoken.py block_digest). `mac` (under a key
    derived from the cluster secret) lets the gateway's commit trust size, CRC32C and digest without seeing the
    bytes."""
    id: int
    size: int
    crc: int
    digest: str
    nodes: tuple[int, ...]
    acks: int
    mac: str


class Receipts(Msg):
    """The reply of write_tokened: per block (request order) its receipt, or None and its error class in `errs`."""
    done: list[BlockReceipt | None]
    errs: dict[int, str] = {}


class WriteTokened(Request, tag="write_tokened"):
    """Store blocks (their bytes back to back in the payload, `blocks` [id, crc, size] each) as their primary, for a
    native client without the cluster secret: `grant` must name every block, on this node, and allow its size (the
    size is checked before the payload is read). Each is stored and replicated as put/put_many do; a block that is
    stored here already (a token allows one write of a block) or fails its CRC is that block's error. `fast`: the
    blocks belong to an object of several blocks, their receipts carry XXH3-128s, not MD5s (block_digest)."""
    grant: WriteGrant
    blocks: list[ReplicaHead]
    fast: bool = False
    Reply = Receipts


class WriteAsk(Msg):
    """POST /_epochfs/allocate/<bucket>: blocks for objects `keys` (each checked as a PutObject of it): enough for
    objects of `sizes` bytes (in the bucket's block size) plus `more` blocks (a stream of unknown length asks in
    rounds). Answered with a WriteGrant."""
    keys: list[str]
    sizes: list[Nat] = []
    more: Nat = 0


class DirectItem(Msg):
    """One object of a direct commit: its key, its blocks' receipts in order, and what a PutObject's headers would
    give it (Content-Type, x-amz-meta-*, x-amz-checksum-crc32c (base64; checked against the blocks' CRCs),
    If-None-Match "*", If-Match)."""
    key: str
    blocks: list[BlockReceipt] = []
    ctype: str | None = None
    meta: dict[str, str] = {}
    checksum: dict[str, str] = {}
    if_none_match: str | None = None
    if_match: str | None = None


class DirectCommit(Msg):
    """POST /_epochfs/commit/<bucket>: make objects of directly written blocks. `grants` are the write tokens the
    blocks were allocated with (this caller's, this bucket's). Answered with PutResults, one per item."""
    grants: list[WriteGrant]
    items: list[DirectItem]

# (end of direct writes)
