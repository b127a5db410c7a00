"""RocksDB key layout of the NameNode. Integers are big-endian so that range scans come back sorted.

  I <ino:8>                     -> inode (JSON)
  E <parent:8> <name>           -> child ino (8 bytes) for a file or symlink named `name`
  E <parent:8> <name> /         -> child ino for a directory: the trailing slash makes a depth-first walk of
                                   entries yield full keys in S3's lexicographic order ("a-b" < "a/x" < "a0")
  N <counter>                   -> next value of a counter (b"ino", b"blk", b"node")
  P <block:8>                   -> allocated, not yet committed block (JSON: time, nodes)
  G <node:4> <block:8>          -> block to be deleted from that node (garbage)
  F <freed:8> <node:4> <block:8> -> a copy of a block the namespace let go of at time `freed` (ns): it becomes
                                   garbage (G) once the free grace is over, so reads begun before stay whole
  U <upload id>                 -> multipart upload (JSON)
  Q <upload id> / <part:4>      -> uploaded part (JSON)
  V <ino:8> <~seq:8>            -> a noncurrent version of the file `ino` (JSON), newest first
  D <node:4>                    -> DataNode record (JSON)
  X <uuid>                      -> node id (4 bytes) registered under that DataNode uuid
  O <time:8> <ino:8>           -> a file inode whose last name went (POSIX rename/unlink); readable by inode
                                   by open handles until the NameNode reaps it after a grace period
  K <access key>                -> S3 access key created through the admin API (JSON: secret, owner, perms...)
  M <kms key id>                -> SSE-KMS key id created through the admin API (JSON: description, created); its
                                   material is derived from the master key in the gateways, never stored here
  S <bucket ino:8>              -> bucket usage [bytes, objects] of current versions, updated in each commit's batch
  W <block:8>                   -> replicas wanted (4 bytes) of a block written with fewer (nodes down or full),
                                   until the repair worker has topped it up
  R <end:8>                     -> inode numbers [first, end) reserved for a mount's own creates (JSON: first,
                                   owner: the access key that reserved them, used: how many it created), until all
                                   are used
  H a                           -> applied_seq: the sequence number (8 bytes) of the last command applied, written
                                   in each command's batch (namenode/ha/: where to resume the metadata log)
  H u <seq:8>                   -> undo record of command `seq` (HA mode, until etcd confirmed it): the pre-image of
                                   every key its batch wrote (MessagePack [[key, value or None], ...])
"""
from __future__ import annotations

ROOT_INO = 1


def u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


def u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def inode(ino: int) -> bytes:
    return b"I" + u64(ino)


def entry(parent: int, name: str, is_dir: bool = False) -> bytes:
    return b"E" + u64(parent) + name.encode() + (b"/" if is_dir else b"")


def entries(parent: int) -> bytes:
    return b"E" + u64(parent)


def counter(name: bytes) -> bytes:
    return b"N" + name


def pending(block: int) -> bytes:
    return b"P" + u64(block)


PENDING = b"P"


def garbage(node: int, block: int) -> bytes:
    return b"G" + u32(node) + u64(block)


def garbage_of(node: int) -> bytes:
    return b"G" + u32(node)


def freed(t_ns: int, node: int, block: int) -> bytes:
    return b"F" + u64(t_ns) + u32(node) + u64(block)


FREED = b"F"


def upload(upload_id: str) -> bytes:
    return b"U" + upload_id.encode()


UPLOADS = b"U"


def part(upload_id: str, number: int) -> bytes:
    return b"Q" + upload_id.encode() + b"/" + u32(number)


def parts(upload_id: str) -> bytes:
    return b"Q" + upload_id.encode() + b"/"


def version(ino: int, seq: int) -> bytes:
    return b"V" + u64(ino) + u64((1 << 64) - 1 - seq)


def versions(ino: int) -> bytes:
    return b"V" + u64(ino)


def node(node_id: int) -> bytes:
    return b"D" + u32(node_id)


NODES = b"D"


def node_uuid(uuid: str) -> bytes:
    return b"X" + uuid.encode()


def access_key(ak: str) -> bytes:
    return b"K" + ak.encode()


ACCESS_KEYS = b"K"


def kms_key(key_id: str) -> bytes:
    return b"M" + key_id.encode()


KMS_KEYS = b"M"


def usage(bucket_ino: int) -> bytes:
    return b"S" + u64(bucket_ino)


def short(block: int) -> bytes:
    return b"W" + u64(block)


SHORT = b"W"


def orphan(t_ns: int, ino: int) -> bytes:
    return b"O" + u64(t_ns) + u64(ino)


ORPHANS = b"O"


def reserved(end: int) -> bytes:
    return RESERVED + u64(end)


RESERVED = b"R"


APPLIED_SEQ = b"Ha"
UNDO = b"Hu"


def undo(seq: int) -> bytes:
    return UNDO + u64(seq)
