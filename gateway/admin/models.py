"""The admin API's request and response models (they make its OpenAPI schema at /admin/openapi.json)."""
from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from epochfs.common import defaults

Permission = Literal["read", "write", "owner"]
BucketName = Field(min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
BucketNameStr = Annotated[str, BucketName]
MAX_QUOTA = (1 << 53) - 1  # JSON's largest exact integer: a client's double can't round across the bound


def _integral(v):
    """JSON Schema's integer includes 2.0; strict mode takes neither 2.0 nor true nor "2", so 2.0 becomes 2 first."""
    return int(v) if type(v) is float and v.is_integer() else v


def Int(lo: int, hi: int):  # noqa: N802 (a type)
    return Annotated[int, Field(ge=lo, le=hi), BeforeValidator(_integral)]


BlockSize = Annotated[int, Field(ge=defaults.MIN_BLOCK_SIZE, le=defaults.MAX_BLOCK_SIZE,
                                 multiple_of=defaults.BLOCK_SIZE_STEP,
                                 description="bytes: a multiple of 64 KiB from 64 KiB to 32 MiB"),
                      BeforeValidator(_integral)]
Replication = Int(1, defaults.MAX_REPLICATION)
WritePolicy = Annotated[str, Field(pattern=r"^(async|sync:([1-9]|1[0-6]))$")]


BucketPerms = Field(json_schema_extra={"additionalProperties": False})  # keys: bucket names only


class Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class In(Msg):
    """A request body: its types are strict, as its schema says (no 0 for false, no "2" or 2.0 for 2)."""
    model_config = ConfigDict(extra="forbid", strict=True)


class Throughput(Msg):
    """Cumulative counters of the gateway that answered (the dashboard turns two readings into rates)."""
    requests: float
    errors: float
    bytes_in: float
    bytes_out: float


class Summary(Msg):
    health: Literal["ok", "degraded", "down"]
    capacity: int
    used: int
    free: int
    buckets: int
    objects: int
    bytes: int = Field(description="object bytes stored (current versions, before replication)")
    nodes: dict[str, int] = Field(description="DataNodes per state")
    under_replicated: int
    lost: int
    repairs_in_flight: int
    waiting_for_copies: int = Field(0, description="missing copies not being made now: re-replications waiting for a "
                                                   "retry or a node with room, and replica pushes refused by full "
                                                   "DataNodes (retried with backoff)")
    waiting_reasons: dict[str, int] = Field({}, description="waiting_for_copies by reason: no_space (no node with "
                                                            "room), no_node (too few nodes), unreachable, bad_source, "
                                                            "timeout")
    replication_queued: int = Field(0, description="replica pushes queued on the DataNodes (async writes not yet "
                                                   "copied to every secondary)")
    gateway: Throughput


class Node(Msg):
    id: int
    address: str
    http_port: int
    capacity: int
    used: int
    free: int
    blocks: int
    last_heartbeat_s: float | None = Field(description="seconds since the last heartbeat (null: none since the "
                                                       "NameNode started)")
    state: str = Field(description="alive | dead | decommissioning | decommissioned | read-only (its store refuses "
                                   "writes: it serves reads and gets no new blocks)")
    write_error: str | None = Field(None, description="why the node's store refuses writes (state read-only)")
    replication_lag: float | None = Field(description="replication jobs queued on the node")
    replication_lag_s: float | None = Field(None, description="age of the oldest queued replication job (s)")
    replication_refused: int = Field(0, description="queued replication jobs whose target refused the block for lack "
                                                    "of space (retried with backoff)")


class LockDays(In):
    """A default retention for new object versions: GOVERNANCE or COMPLIANCE for `days`."""
    mode: Literal["GOVERNANCE", "COMPLIANCE"]
    days: Int(1, 36500)


class LockYears(In):
    """A default retention for new object versions: GOVERNANCE or COMPLIANCE for `years`."""
    mode: Literal["GOVERNANCE", "COMPLIANCE"]
    years: Int(1, 100)


LockRule = LockDays | LockYears


class ObjectLock(In):
    """A bucket's object lock (it stays on once on); `rule`: the default retention, null for none."""
    rule: LockRule | None = None


class Logging(In):
    """Server access logging: records go as objects into `target_bucket` (same owner) under `target_prefix`."""
    target_bucket: BucketNameStr
    target_prefix: str = Field("", max_length=512)


class SseS3(In):
    """SSE-S3: objects encrypted under the cluster master key."""
    alg: Literal["AES256"]


class SseKms(In):
    """SSE-KMS: objects encrypted under a KMS key (GW_SSE_KMS_KEYS)."""
    alg: Literal["aws:kms"]
    kms_key_id: str | None = Field(None, min_length=1, max_length=2048, pattern=r"^[\x21-\x7e]+$",
                                   description="default: aws/s3")
class LifecycleRule(Msg):
    """A lifecycle rule (S3's LifecycleRule, flattened): the objects it takes (prefix, all of `tags`, sizes in
    bytes) and its actions, in days (NN_LIFECYCLE_DAY_S seconds each) or at a date (midnight UTC)."""
    id: str = Field(min_length=1, max_length=255)
    enabled: bool = True
    prefix: str = Field("", max_length=1024)
    tags: dict[str, str] = Field(default_factory=dict, description="all of these tags (1-10)")
    size_gt: Int(0, MAX_QUOTA) | None = Field(None, description="objects larger than this, bytes")
    size_lt: Int(0, MAX_QUOTA) | None = Field(None, description="objects smaller than this, bytes")
    expiration_days: Int(1, 2 ** 31 - 1) | None = Field(None, description="expire current versions this old")
    expiration_date: dt.date | None = Field(None, description="expire current versions from this day on")
    expired_object_delete_marker: bool | None = Field(None, description="remove delete markers left alone")
    noncurrent_days: Int(1, 2 ** 31 - 1) | None = Field(None, description="remove noncurrent versions this old")
    newer_noncurrent: Int(1, 100) | None = Field(None, description="but keep this many newest noncurrent ones")
    abort_upload_days: Int(1, 2 ** 31 - 1) | None = Field(None, description="abort uploads started this long ago")


class Bucket(Msg):
    name: str
    owner: str
    created: int = Field(description="creation time, ns since the epoch")
    bytes: int
    objects: int
    replication: int
    block_size: int = Field(description="bytes; new writes are cut into blocks of this size")
    write_policy: str = Field(description="async, or sync:N (acknowledge after N replicas)")
    quota_bytes: int | None
    quota_objects: int | None
    versioning: str | None
    policy: str | None = Field(None, description="the bucket policy (JSON text), as PutBucketPolicy set it")
    policy_public: bool = Field(False, description="the policy lets in everyone (S3's policy status IsPublic)")
    public_access_block: dict[str, bool] | None = Field(
        None, description="block_public_acls, ignore_public_acls, block_public_policy, restrict_public_buckets")
    object_lock: ObjectLock | None = None
    logging: Logging | None = None
    encryption: SseS3 | SseKms | None = Field(None, description="default encryption of new objects (null: none)")
    tags: dict[str, str] | None = Field(None, description="the bucket's tag set (S3 bucket tagging)")
    lifecycle: list[LifecycleRule] | None = Field(None, description="the bucket's lifecycle rules")


class BucketCreate(In):
    """A new bucket; a setting left out takes the cluster's default (NN_BLOCK_SIZE, NN_REPLICATION, ...)."""
    name: BucketNameStr
    owner_id: str | None = Field(None, max_length=128, pattern=r"^[\x21-\x7e]+$",
                                 description="canonical user id of the owner; default: the caller's")
    block_size: BlockSize | None = None
    replication: Replication | None = None
    write_policy: WritePolicy | None = None
    object_lock: bool = Field(False, description="object lock on (versioning on, for good)")


class BucketPatch(In):
    """Fields to change; a quota set to null is removed, a field left out is unchanged. A new block size or
    replication factor applies to blocks written from now on: existing objects keep theirs."""
    block_size: BlockSize | None = None
    replication: Replication | None = None
    write_policy: WritePolicy | None = None
    quota_bytes: Int(0, MAX_QUOTA) | None = None
    quota_objects: Int(0, MAX_QUOTA) | None = None
    object_lock: ObjectLock | None = Field(None, description="turn object lock on (needs versioning Enabled) or "
                                                             "change its default retention")
    logging: Logging | None = Field(None, description="server access logging; null turns it off")
    encryption: Annotated[SseS3 | SseKms, Field(discriminator="alg")] | None = Field(
        None, description="default encryption of new objects (as PutBucketEncryption); null removes it; an unknown "
                          "KMS key: 404")
    tags: dict[str, str] | None = Field(None, description="replace the tag set (at most 50 tags); null deletes it")
    lifecycle: list[LifecycleRule] | None = Field(None, max_length=1000,
                                                  description="replace the lifecycle rules; null deletes them")


class KeyCreate(In):
    access_key: str | None = Field(None, pattern=r"^[A-Za-z0-9_.+=-]{3,128}$",
                                   description="default: generated")
    secret_key: str | None = Field(None, min_length=8, max_length=128, pattern=r"^[\x21-\x7e]+$",
                                   description="default: generated")
    name: str | None = Field(None, max_length=128)
    owner_id: str | None = Field(None, max_length=128, pattern=r"^[\x21-\x7e]+$",
                                 description="canonical user id the key acts as; default: its own")
    admin: bool = False
    buckets: Annotated[dict[BucketNameStr, Permission], BucketPerms] = Field(default_factory=dict)


class KmsKeyCreate(In):
    key_id: str = Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9_.:/-]+$",
                        description="the id SSE-KMS requests name (x-amz-server-side-encryption-aws-kms-key-id); "
                                    "not aws/... (AWS's own keys)")
    description: str = Field("", max_length=1024)


class KeyPatch(In):
    disabled: bool | None = None
    admin: bool | None = None
    name: str | None = Field(None, max_length=128)
    buckets: Annotated[dict[BucketNameStr, Permission], BucketPerms] | None = Field(
        None, description="replaces the key's bucket permissions")


class Key(Msg):
    access_key: str
    name: str
    owner_id: str
    admin: bool
    disabled: bool
    buckets: dict[str, Permission] | None = Field(description="null: a GW_USERS key (owner and ACL rules only)")
    source: Literal["bootstrap", "admin"]


class KeyCreated(Key):
    secret_key: str = Field(description="shown this once")


NodeId = Int(0, 1 << 31)


class ClusterJobCreate(In):
    kind: Literal["rebalance", "gc"]


class ScrubJobCreate(In):
    kind: Literal["scrub"]
    node: NodeId | None = Field(None, description="only this DataNode (default: every live one)")


class DecommissionJobCreate(In):
    kind: Literal["decommission"]
    node: NodeId = Field(description="the DataNode to drain")


JobCreate = Union[ClusterJobCreate, ScrubJobCreate, DecommissionJobCreate]  # told apart by kind


class Job(Msg):
    id: str
    kind: str
    state: str = Field(description="running | done | failed | ...")
    progress: float | None = Field(description="0..1 where known")
    node: int | None = None
    detail: dict = Field(default_factory=dict)


class HaNameNode(Msg):
    """One NameNode as the metadata log and this gateway see it."""
    name: str
    address: str = Field(description="its RPC address, host:port")
    http: str = ""
    role: str = Field(description="active, standby, rebuilding, embedded (no HA), or unreachable (from this gateway)")
    applied: int = Field(description="sequence number of the last command it applied from the metadata log")
    lag: int = Field(description="commands it is behind the log's end")
    reachable: bool | None = Field(description="whether it answered this gateway (null: not among the addresses "
                                               "the gateway was given)")
    error: str | None = None
    current: bool = Field(description="whether this gateway's NameNode calls go to it now")
    stale_served: int = Field(0, description="stale reads (manifests, batch stats, dataset mounts) it served as a "
                                             "standby since it started")
    stale_refused: int = Field(0, description="stale reads it refused as too stale (the client asked the active one)")


class EtcdMember(Msg):
    endpoint: str
    healthy: bool
    leader: bool | None = None
    db_size: int | None = None
    revision: int | None = None
    error: str | None = None


class HaStatus(Msg):
    """NameNode high availability: `mode` embedded (one NameNode, no etcd) or etcd."""
    mode: str
    epoch: int = Field(description="the active NameNode's fencing epoch (its etcd leader key's revision; 0 embedded)")
    leader: str = Field(description="the active NameNode's RPC address (\"\": none elected)")
    log_first: int
    log_end: int
    namenodes: list[HaNameNode]
    etcd: list[EtcdMember]
    gateway_moves: int = Field(description="times this gateway's NameNode calls moved to another address")
    gateway_redirects: int = Field(description="NotLeader answers this gateway got (each one redirected a call)")
