"""Every change to the NameNode's namespace, as a typed value: the commands of its state machine.

A command carries everything its effect depends on besides the state it is applied to: the time, the random version
or upload id, the placement chosen from the membership, the bucket scope of a mount operation. Whoever issues it
(an RPC handler, a worker) chooses those first; `MetaStore.execute(cmd)` then applies it, which turns it into one
RocksDB write batch (or a DomainError and nothing written), and appends it to the command log if one is configured.
Applying the same commands in the same order to the same state gives the same bytes: that is what a replicated log of
them (NameNode HA) relies on. Two settings of the store also shape the bytes (`free_grace_s` decides whether freed
blocks wait in F or go straight to G); every replica must use the same ones.

Commands are msgspec structs, tagged with their op name ("op" field), encoded as MessagePack. The log is a file of
length-prefixed entries (4-byte big-endian length, then the encoded command): a development journal now.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Union

import msgspec

from epochfs.common.messages import LifecycleRule


def _op_name(cls_name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls_name).lower()


class Command(msgspec.Struct, frozen=True, tag_field="op", tag=_op_name, forbid_unknown_fields=True):
    """Base of every namespace command; the tag ("op") is the class name in snake_case."""


Record = dict[str, Any]  # a record's fields as the NameNode stores them (see metastore.py and posix.py)


# ------------------------------------------------------------------ buckets
class InitRoot(Command, frozen=True):
    """The root directory of an empty store."""
    t: int


class CreateBucket(Command, frozen=True):
    bucket: str
    owner: str
    settings: Record
    t: int


class UpdateBucket(Command, frozen=True):
    """Merge `fields` into the bucket's settings (ACL, policy, quota "qb"/"qo", ...)."""
    bucket: str
    fields: Record


class DeleteBucket(Command, frozen=True):
    bucket: str
    t: int


class SetBucketTags(Command, frozen=True):
    """Replace the bucket's tag set (checked, sorted by key); None deletes it."""
    bucket: str
    tags: dict[str, str] | None


class SetBucketLifecycle(Command, frozen=True):
    """Replace the bucket's lifecycle rules (checked); None deletes them."""
    bucket: str
    rules: list[LifecycleRule] | None


# ------------------------------------------------------------------ objects and versions
class PutObject(Command, frozen=True):
    """Commit an object; `vid` is its version id if the bucket turns out to have versioning enabled. `fresh`: its
    blocks must be pending (allocated, never committed) when it is applied; the same commit applied before (sent
    again after its answer was lost) answers as it did and writes nothing; any other is refused."""
    bucket: str
    key: str
    obj: Record
    t: int
    vid: str
    if_match: str | None = None
    if_none_match: str | None = None
    fresh: bool = False


class PutItem(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One object of a PutObjects batch, as PutObject's fields; `vid` its version id if the bucket versions."""
    key: str
    obj: Record
    vid: str
    if_match: str | None = None
    if_none_match: str | None = None


class PutObjects(Command, frozen=True):
    """Commit many objects of one bucket in one write batch, each as PutObject would: an item that fails a check
    (quota, condition) writes nothing and is that item's error; the others commit. `fresh`: each item's blocks must
    be pending (allocated, never committed) when it is applied, as PutObject's."""
    bucket: str
    items: list[PutItem]
    t: int
    fresh: bool = False


class UpdateObject(Command, frozen=True):
    """Change stored attributes of the key's current version, or of version `version_id`."""
    bucket: str
    key: str
    fields: Record
    version_id: str | None = None


class SetObjectTags(Command, frozen=True):
    """Replace the tag set of the key's current version, or of version `version_id` ({}: no tags)."""
    bucket: str
    key: str
    tags: dict[str, str]
    version_id: str | None = None


class DeleteObject(Command, frozen=True):
    """Delete a key or one version; `vid` is the id of the delete marker a versioned bucket makes."""
    bucket: str
    key: str
    t: int
    vid: str
    version_id: str | None = None
    if_match: str | None = None
    if_mtime: int | None = None
    if_size: int | None = None
    bypass: bool = False  # the caller may bypass GOVERNANCE retention (object lock)


# ------------------------------------------------------------------ object lock (namenode/meta/lock.py)
class SetBucketLock(Command, frozen=True):
    """A bucket's object lock configuration ("olk": {"on": true, "r": {"m", "d" | "y"}})."""
    bucket: str
    config: Record


class LockObject(Command, frozen=True):
    """Retention (`retention`: set `mode`/`until` ms, mode None removes it) and/or legal hold of a version;
    `t` (ns) is the time the rules are checked against."""
    bucket: str
    key: str
    version_id: str | None
    retention: bool
    mode: str | None
    until: int | None
    legal_hold: bool | None
    bypass: bool
    t: int


# ------------------------------------------------------------------ multipart uploads
class CreateUpload(Command, frozen=True):
    bucket: str
    key: str
    upload_id: str
    attrs: Record
    t: int


class PutPart(Command, frozen=True):
    """Store part `number` of an upload (replacing one stored before); `fresh` as PutObject's."""
    bucket: str
    key: str
    upload_id: str
    number: int
    part: Record
    t: int
    fresh: bool = False


class CompleteUpload(Command, frozen=True):
    bucket: str
    key: str
    upload_id: str
    parts: list[Record]
    min_part_size: int
    t: int
    vid: str
    checksum: Record | None = None
    if_match: str | None = None
    if_none_match: str | None = None


class AbortUpload(Command, frozen=True):
    bucket: str
    key: str
    upload_id: str
    t: int


# ------------------------------------------------------------------ block map and GC
class Allocate(Command, frozen=True):
    """Reserve block ids first, first+1, ... (the next ones: checked) placed on `nodes[i]`, as pending."""
    first: int
    nodes: list[list[int]]
    t: int


class Abandon(Command, frozen=True):
    block_ids: list[int]


class ExpirePending(Command, frozen=True):
    """Pending allocations made before `cutoff` (ns) become garbage."""
    cutoff: int


class ReleaseFreed(Command, frozen=True):
    """Freed copies (F) whose time is before `cutoff` become garbage, at most `limit` of them."""
    cutoff: int
    limit: int


class GarbageDone(Command, frozen=True):
    node: int
    block_ids: list[int]


class AddGarbage(Command, frozen=True):
    node: int
    block_ids: list[int]


class DropStrayCopy(Command, frozen=True):
    block_id: int
    node: int


class ReplaceReplicas(Command, frozen=True):
    """(block, old node or None for a top-up, new node, hint key of the record holding it)"""
    changes: list[tuple[int, Union[int, None], int, Union[bytes, None]]]


class MarkShort(Command, frozen=True):
    blocks: list[tuple[int, int]]


class DropShort(Command, frozen=True):
    block_ids: list[int]


# ------------------------------------------------------------------ DataNodes and access keys
class AssignNodeId(Command, frozen=True):
    """The next node id, for a DataNode uuid seen for the first time."""
    uuid: str


class SaveNode(Command, frozen=True):
    node_id: int
    rec: Record


class CreateAccessKey(Command, frozen=True):
    access_key: str
    rec: Record


class UpdateAccessKey(Command, frozen=True):
    access_key: str
    fields: Record


class DeleteAccessKey(Command, frozen=True):
    access_key: str


class CreateKmsKey(Command, frozen=True):
    key_id: str
    rec: Record  # description, created (ns, chosen before)


# ------------------------------------------------------------------ POSIX (the mount), scoped to bucket inode `bi`
class Mkdir(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    mode: int
    uid: int
    gid: int
    t: int


class Mknod(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    mode: int
    uid: int
    gid: int
    rdev: int
    bucket: str | None
    t: int


class Symlink(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    target: str
    uid: int
    gid: int
    t: int


class Link(Command, frozen=True):
    bi: int | None
    ino: int
    parent: int
    name: str
    bucket: str | None
    t: int


class Unlink(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    bucket: str | None
    t: int


class Rmdir(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    t: int


class Rename(Command, frozen=True):
    bi: int | None
    parent: int
    name: str
    newparent: int
    newname: str
    flags: int
    bucket: str | None
    t: int


class SetAttr(Command, frozen=True):
    bi: int | None
    ino: int
    fields: Record
    bucket: str | None
    t: int


class Commit(Command, frozen=True):
    """New content of file `ino` (blocks admitted already, see RepairWorker.admit)."""
    bi: int | None
    ino: int
    blk: list[Any]
    size: int
    etag: str
    bucket: str | None
    base: str | None
    mt: int | None
    t: int
    fresh: bool = False
    held: Record | None = None  # mode, uid, gid, at set with the commit (FileWrite.held)


class ReserveInodes(Command, frozen=True):
    """Inode numbers for a mount to give the files it creates in write-back mode (CreateFiles), for `owner` (the
    access key the gateway authenticated) alone."""
    bi: int | None
    n: int
    owner: str = ""


class CreateFiles(Command, frozen=True):
    """Regular files with their content (blocks admitted already), each with the inode number reserved for it;
    `items` as messages.StoredFile's builtins."""
    bi: int | None
    items: list[Record]
    bucket: str | None
    t: int
    owner: str = ""


class SetXattr(Command, frozen=True):
    bi: int | None
    ino: int
    name: str
    value: str
    flags: int
    t: int


class RemoveXattr(Command, frozen=True):
    bi: int | None
    ino: int
    name: str
    t: int


class StampDirs(Command, frozen=True):
    """Directories found through the mount below bucket `bi` (a lookup or listing) are recorded as lying in it."""
    bi: int
    inos: list[int]


AnyCommand = Union[
    InitRoot, CreateBucket, UpdateBucket, DeleteBucket, SetBucketTags, SetBucketLifecycle, PutObject, PutObjects,
    UpdateObject, SetObjectTags, DeleteObject, SetBucketLock, LockObject,
    CreateUpload, PutPart, CompleteUpload, AbortUpload,
    Allocate, Abandon, ExpirePending, ReleaseFreed, GarbageDone, AddGarbage, DropStrayCopy, ReplaceReplicas,
    MarkShort, DropShort, AssignNodeId, SaveNode, CreateAccessKey, UpdateAccessKey, DeleteAccessKey,
    CreateKmsKey,
    Mkdir, Mknod, Symlink, Link, Unlink, Rmdir, Rename, SetAttr, Commit, SetXattr, RemoveXattr, StampDirs,
    ReserveInodes, CreateFiles,
]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(AnyCommand)


def encode(cmd: Command) -> bytes:
    return _encoder.encode(cmd)


def decode(raw: bytes) -> Command:
    return _decoder.decode(raw)


class CommandLog:
    """Appends each executed command to a file, length-prefixed (a development journal; etcd's log later)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "ab")

    def append(self, raw: bytes) -> None:
        self._f.write(len(raw).to_bytes(4, "big") + raw)
        self._f.flush()

    def close(self) -> None:
        self._f.close()


def read_log(path: Path | str) -> Iterator[Command]:
    """The commands of a log file in order (a torn last entry, from a crash mid-write, is ignored)."""
    data = Path(path).read_bytes()
    i = 0
    while i + 4 <= len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        if i + 4 + n > len(data):
            return
        yield decode(data[i + 4:i + 4 + n])
        i += 4 + n
