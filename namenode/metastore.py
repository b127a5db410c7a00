"""The namespace: a POSIX tree of inodes and directory entries in RocksDB, seen by S3 as buckets and keys.

A bucket is a top-level directory; the S3 key "a/b/c" is the file c in directory b in directory a. A name may be a
file and a directory at once ("a/b" and "a/b/c" are both valid S3 keys): their entries differ by the directory's
trailing slash. Directories created only to hold keys are "implicit" and vanish when they become empty; a directory
with a marker (PUT "a/b/", or mkdir) is itself listed as the key "a/b/".

Every change is a command (commands.py): a public method here builds one, with the time and random ids it needs, and
`execute` applies it through its `_apply_<op>` method, which writes one RocksDB batch (or raises a DomainError and
writes nothing). Everything runs synchronously on the NameNode's event loop, so each command is atomic with respect
to every other one and to a crash. Reads go to the store directly.
"""
from __future__ import annotations

import hashlib
import os
import time
import uuid as uuidlib
from typing import Iterator

import orjson

from epochfs.common import checksums, errors
from epochfs.common.kv import KV, prefix_end
from epochfs.common.paths import split_key

from . import access_keys, commands as cmds, keys
from .commands import Command, CommandLog
from .keys import ROOT_INO

S_IFDIR = 0o040000
S_IFREG = 0o100000
S_IFLNK = 0o120000


def now_ns() -> int:
    return time.time_ns()


def enc_record(d: dict) -> bytes:
    """A record's stored bytes (JSON)."""
    return orjson.dumps(d)


class _Page:
    """One page of a listing: items up to max_keys, common prefixes deduplicated and kept after the marker."""

    def __init__(self, max_keys: int, after: str) -> None:
        self.items: list = []
        self.truncated = False
        self._max, self._after, self._last_prefix = max_keys, after, None

    def add(self, item: list) -> bool:
        """Append an item; False (and truncated) when the page is already full."""
        if len(self.items) >= self._max:
            self.truncated = True
            return False
        self.items.append(item)
        return True

    def add_prefix(self, prefix: str) -> bool:
        if prefix == self._last_prefix or prefix <= self._after:
            return True
        self._last_prefix = prefix
        return self.add(["p", prefix])

    def result(self) -> dict:
        return {"items": self.items, "truncated": self.truncated}


class MetaStore:
    def __init__(self, kv: KV, *, pending_grace_s: float = 3600.0, free_grace_s: float = 0.0,
                 log: CommandLog | None = None) -> None:
        self.kv = kv
        self.pending_grace_s = pending_grace_s
        self.free_grace_s = free_grace_s  # see free_blocks
        self.log = log
        self._counters: dict[bytes, int] = {}
        self._usage: dict[int, list[int]] = {}  # bucket ino -> [bytes, objects], cached from keys.usage
        from .posix import Posix  # posix.py builds on this module
        self._posix = Posix(self)  # applies the mount's commands
        self._appliers = {}
        for cls in cmds.AnyCommand.__args__:
            name = "_apply_" + cls.__struct_config__.tag
            self._appliers[cls] = getattr(self, name, None) or self._posix.applier(name)
        if self.kv.get(keys.inode(ROOT_INO)) is None:
            self.execute(cmds.InitRoot(t=now_ns()))

    # ---------------------------------------------------------------- the state machine
    def execute(self, cmd: Command):
        """Apply one command: one write batch, or a DomainError and nothing written. Returns the command's result.
        An applied command is appended to the command log (if any)."""
        raw = cmds.encode(cmd) if self.log is not None else None
        try:
            with self.kv.batch() as b:
                result = self._appliers[type(cmd)](b, cmd)
        except BaseException:
            self._counters.clear()  # caches a failed command may have advanced: read again from the store
            self._usage.clear()
            raise
        if raw is not None:
            self.log.append(raw)
        return result

    def _apply_init_root(self, b, c: cmds.InitRoot) -> None:
        b.put(keys.inode(ROOT_INO), self._enc({"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0,
                                               "mt": c.t, "ct": c.t}))

    # ---------------------------------------------------------------- helpers
    _enc = staticmethod(enc_record)

    @staticmethod
    def _dec(b: bytes) -> dict:
        return orjson.loads(b)

    def _peek(self, name: bytes) -> int:
        """The value the next _next(name) reserves."""
        cur = self._counters.get(name)
        if cur is None:
            raw = self.kv.get(keys.counter(name))
            cur = int.from_bytes(raw, "big") if raw else 2
        return cur

    def _next(self, batch, name: bytes, n: int = 1) -> int:
        """Reserve n consecutive values of a counter; the new high-water mark is written in the caller's batch."""
        cur = self._peek(name)
        self._counters[name] = cur + n
        batch.put(keys.counter(name), keys.u64(cur + n))
        return cur

    next_id = _next  # for the mount's commands (posix.py)

    def get_inode(self, ino: int) -> dict | None:
        raw = self.kv.get(keys.inode(ino))
        return self._dec(raw) if raw is not None else None

    def _lookup(self, parent: int, name: str, is_dir: bool) -> int | None:
        raw = self.kv.get(keys.entry(parent, name, is_dir))
        return int.from_bytes(raw[:8], "big") if raw is not None else None

    def _put_file(self, b, parent: int, name: str, ino: int, rec: dict) -> None:
        """Write a file's inode and its directory entry; the entry carries what a listing shows (size, ETag, time,
        owner, storage class, delete marker), so listing a directory reads no inode. "ln" lists the entries that
        name the inode (hard links made through the mount, see posix.py)."""
        rec.setdefault("ln", [[parent, name]])
        b.put(keys.inode(ino), self._enc(rec))
        summary = [rec.get("size", 0), rec.get("etag", ""), rec.get("mt", 0), rec.get("owner", ""),
                   rec.get("sc", "STANDARD"), bool(rec.get("dm"))]
        b.put(keys.entry(parent, name, False), keys.u64(ino) + self._enc(summary))

    def is_empty(self, ino: int) -> bool:
        p = keys.entries(ino)
        return next(iter(self.kv.scan_keys(p, prefix_end(p))), None) is None

    # ---------------------------------------------------------------- buckets
    def bucket_ino(self, bucket: str) -> int:
        ino = self._lookup(ROOT_INO, bucket, True)
        if ino is None:
            raise errors.NoSuchBucket("The specified bucket does not exist", bucket=bucket)
        return ino

    def create_bucket(self, bucket: str, owner: str, settings: dict | None = None) -> dict:
        return self.execute(cmds.CreateBucket(bucket=bucket, owner=owner, settings=settings or {}, t=now_ns()))

    def _apply_create_bucket(self, b, c: cmds.CreateBucket) -> dict:
        existing = self._lookup(ROOT_INO, c.bucket, True)
        if existing is not None:
            rec = self.get_inode(existing)
            if rec and rec.get("bkt", {}).get("owner") == c.owner:
                raise errors.BucketAlreadyOwnedByYou()
            raise errors.BucketAlreadyExists()
        t = c.t
        ino = self._next(b, b"ino")
        rec = {"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0, "mt": t, "ct": t,
               "bkt": {"owner": c.owner, "created": t, **c.settings}}
        b.put(keys.inode(ino), self._enc(rec))
        b.put(keys.entry(ROOT_INO, c.bucket, True), keys.u64(ino))
        self.add_usage(b, ino, 0, 0)
        return {"name": c.bucket, **rec["bkt"]}

    def bucket_info(self, bucket: str) -> dict:
        ino = self.bucket_ino(bucket)
        return {"name": bucket, "ino": ino, **self.get_inode(ino).get("bkt", {})}

    def update_bucket(self, bucket: str, fields: dict) -> dict:
        return self.execute(cmds.UpdateBucket(bucket=bucket, fields=fields))

    def _apply_update_bucket(self, b, c: cmds.UpdateBucket) -> dict:
        ino = self.bucket_ino(c.bucket)
        rec = self.get_inode(ino)
        rec["bkt"] = {**rec.get("bkt", {}), **c.fields}
        b.put(keys.inode(ino), self._enc(rec))
        return {"name": c.bucket, **rec["bkt"]}

    def list_buckets(self) -> list[dict]:
        out = []
        p = keys.entries(ROOT_INO)
        for k, v in self.kv.scan(p, prefix_end(p)):
            if not k.endswith(b"/"):
                continue
            rec = self.get_inode(int.from_bytes(v, "big")) or {}
            out.append({"name": k[9:-1].decode(), **rec.get("bkt", {})})
        return out

    def delete_bucket(self, bucket: str) -> None:
        self.execute(cmds.DeleteBucket(bucket=bucket, t=now_ns()))

    def _apply_delete_bucket(self, b, c: cmds.DeleteBucket) -> None:
        bucket = c.bucket
        ino = self.bucket_ino(bucket)
        if not self.is_empty(ino):
            raise errors.BucketNotEmpty("The bucket you tried to delete is not empty", bucket=bucket)
        for up_id, up in self._uploads():
            if up["b"] == bucket:
                self._drop_upload(b, up_id, c.t)
        b.delete(keys.entry(ROOT_INO, bucket, True))
        b.delete(keys.inode(ino))
        b.delete(keys.usage(ino))
        self._usage.pop(ino, None)

    # ---------------------------------------------------------------- objects
    def _resolve(self, bucket: str, key: str) -> tuple[int, str, bool]:
        """(parent directory ino, last name, is a directory marker) for an existing key's parent; raises NoSuchKey."""
        parts = split_key(key)
        d = self.bucket_ino(bucket)
        for p in parts[:-1]:
            nxt = self._lookup(d, p, True)
            if nxt is None:
                raise errors.NoSuchKey("The specified key does not exist.", key=key)
            d = nxt
        if parts[-1] == "":
            return d, "", True
        return d, parts[-1], False

    def stat(self, bucket: str, key: str, version_id: str | None = None) -> dict:
        """The current version of a key, or the version `version_id`. A current delete marker reads as NoSuchKey
        (with details saying so); asking for a delete marker's version id is MethodNotAllowed, as in S3."""
        parent, name, marker = self._resolve(bucket, key)
        if marker:
            rec = self.get_inode(parent)
            if rec is None or "mk" not in rec or version_id not in (None, "null"):
                raise errors.NoSuchKey("The specified key does not exist.", key=key)
            return {**rec["mk"], "ino": parent, "blk": []}
        ino = self._lookup(parent, name, False)
        if ino is None:
            if version_id is not None:
                raise errors.NoSuchVersion("The specified version does not exist.", key=key, version_id=version_id)
            raise errors.NoSuchKey("The specified key does not exist.", key=key)
        rec = self.get_inode(ino)
        if rec is None or rec.get("t") != "f":
            raise errors.NoSuchKey("The specified key does not exist.", key=key)
        if version_id is not None and rec.get("vid", "null") != version_id:
            found = self._find_version(ino, version_id)
            if found is None:
                raise errors.NoSuchVersion("The specified version does not exist.", key=key, version_id=version_id)
            rec = found[1]
        if rec.get("dm"):
            if version_id is not None:
                raise errors.MethodNotAllowed("The specified method is not allowed against this resource.",
                                              dm=True, vid=rec["vid"])
            raise errors.NoSuchKey("The specified key does not exist.", key=key, dm=True, vid=rec["vid"])
        rec["ino"] = ino
        return rec

    # ---------------------------------------------------------------- versions
    def versioning(self, bucket: str) -> str | None:
        """None (never enabled), "Enabled" or "Suspended"."""
        return (self.get_inode(self.bucket_ino(bucket)) or {}).get("bkt", {}).get("ver")

    def _versions(self, ino: int) -> list[tuple[bytes, dict]]:
        p = keys.versions(ino)
        return [(k, self._dec(v)) for k, v in self.kv.scan(p, prefix_end(p))]

    def _find_version(self, ino: int, vid: str) -> tuple[bytes, dict] | None:
        return next(((k, r) for k, r in self._versions(ino) if r.get("vid", "null") == vid), None)

    def _new_vid(self) -> str:
        return os.urandom(16).hex()

    def _retire(self, b, ino: int, cur: dict, ver: str | None, t: int) -> None:
        """The current version of `ino` stops being current: kept as a noncurrent version, or freed."""
        cur = {k: v for k, v in cur.items() if k != "ino"}
        if ver == "Enabled" or (ver == "Suspended" and cur.get("vid", "null") != "null"):
            cur.setdefault("vid", "null")
            seq = self._next(b, b"ver")
            b.put(keys.version(ino, seq), self._enc(cur))
        else:
            self.free_blocks(b, cur.get("blk", []), t)
        if ver == "Suspended":  # the new current version takes the id "null": an older "null" version goes
            for k, r in self._versions(ino):
                if r.get("vid", "null") == "null":
                    self.free_blocks(b, r.get("blk", []), t)
                    b.delete(k)

    def _stat_or_none(self, bucket: str, key: str) -> dict | None:
        try:
            return self.stat(bucket, key)
        except errors.NoSuchKey:
            return None

    @staticmethod
    def check_conditions(cur: dict | None, if_match: str | None, if_none_match: str | None) -> None:
        if if_none_match is not None:
            if cur is not None and (if_none_match.strip() == "*" or _etag_in(cur.get("etag"), if_none_match)):
                raise errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold",
                                                condition="If-None-Match")
        if if_match is not None:
            if cur is None:
                raise errors.NoSuchKey("The specified key does not exist.")
            if not (if_match.strip() == "*" or _etag_in(cur.get("etag"), if_match)):
                raise errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold",
                                                condition="If-Match")

    def put_object(self, bucket: str, key: str, obj: dict, *, if_match: str | None = None,
                   if_none_match: str | None = None) -> dict:
        """Commit an object: `obj` holds size, etag, blocks ("blk") and headers. Atomic replace of any old version."""
        return self.execute(cmds.PutObject(bucket=bucket, key=key, obj=obj, t=obj.get("mt") or now_ns(),
                                           vid=self._new_vid(), if_match=if_match, if_none_match=if_none_match))

    def _apply_put_object(self, b, c: cmds.PutObject) -> dict:
        return self._put(b, c.bucket, c.key, c.obj, c.t, c.vid, c.if_match, c.if_none_match)

    def _put(self, b, bucket: str, key: str, obj: dict, t: int, vid: str, if_match: str | None,
             if_none_match: str | None) -> dict:
        parts = split_key(key)
        cur = self._stat_or_none(bucket, key) if (if_match is not None or if_none_match is not None) else None
        self.check_conditions(cur, if_match, if_none_match)
        obj = {**obj, "t": "f", "mt": t, "ct": t}
        delta = self._usage_delta(bucket, key, obj)
        d = self.bucket_ino(bucket)
        self.add_usage(b, d, *delta)
        created: dict[int, dict] = {}  # directories this batch creates (not readable from the KV yet)
        for p in parts[:-1]:
            nxt = self._lookup(d, p, True)
            if nxt is None:
                nxt = self._next(b, b"ino")
                created[nxt] = {"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0, "mt": t, "ct": t}
                b.put(keys.inode(nxt), self._enc(created[nxt]))
                b.put(keys.entry(d, p, True), keys.u64(nxt))
            d = nxt
        if parts[-1] == "":  # directory marker: metadata only, on the directory inode
            rec = created.get(d) or self.get_inode(d)
            mk = {k: v for k, v in obj.items() if k != "blk"}
            self.free_blocks(b, obj.get("blk", []), t)
            rec["mk"] = mk
            rec["mt"] = t
            b.put(keys.inode(d), self._enc(rec))
            ino = d
        else:
            ver = self.versioning(bucket)
            if ver is not None:
                obj["vid"] = vid if ver == "Enabled" else "null"
            ino = self._lookup(d, parts[-1], False)
            if ino is not None:
                old = self.get_inode(ino)
                if old is not None:
                    if self._detach(b, d, parts[-1], ino, old, t):  # the other names keep the old content
                        ino = self._next(b, b"ino")
                        old["ln"] = [[d, parts[-1]]]
                    else:
                        self._retire(b, ino, old, ver, t)
                    obj.setdefault("mode", old.get("mode", S_IFREG | 0o644))
                    obj.setdefault("uid", old.get("uid", 0))
                    obj.setdefault("gid", old.get("gid", 0))
                    obj.setdefault("ln", old.get("ln", [[d, parts[-1]]]))
            else:
                ino = self._next(b, b"ino")
            obj.setdefault("mode", S_IFREG | 0o644)
            obj.setdefault("uid", 0)
            obj.setdefault("gid", 0)
            self._put_file(b, d, parts[-1], ino, obj)
        for blk in obj.get("blk", []):
            b.delete(keys.pending(blk[0]))
        return {"ino": ino, "etag": obj.get("etag"), "mt": t, "vid": obj.get("vid")}

    def update_object(self, bucket: str, key: str, fields: dict) -> None:
        """Change stored attributes (ACL, metadata) of an existing object without touching its data."""
        self.execute(cmds.UpdateObject(bucket=bucket, key=key, fields=fields))

    def _apply_update_object(self, b, c: cmds.UpdateObject) -> None:
        cur = self.stat(c.bucket, c.key)
        ino = cur.pop("ino")
        if c.key.endswith("/"):
            rec = self.get_inode(ino)
            rec["mk"] = {**rec["mk"], **c.fields}
        else:
            rec = {**cur, **c.fields}
        b.put(keys.inode(ino), self._enc(rec))

    def delete_object(self, bucket: str, key: str, *, version_id: str | None = None, if_match: str | None = None,
                      if_mtime: int | None = None, if_size: int | None = None) -> dict:
        """Delete a key (or one version of it). Returns {"existed", "dm" (a delete marker was made or removed),
        "vid"}. Empty implicit directories above a removed key go too.

        In a versioned bucket a plain delete makes a delete marker the current version. The conditions (ETag,
        last-modified second, size) apply to the targeted version if it exists, a delete marker included (it
        matches only If-Match: *): deleting a missing key succeeds whatever they say, as in S3."""
        return self.execute(cmds.DeleteObject(bucket=bucket, key=key, t=now_ns(), vid=self._new_vid(),
                                              version_id=version_id, if_match=if_match, if_mtime=if_mtime,
                                              if_size=if_size))

    def _apply_delete_object(self, b, c: cmds.DeleteObject) -> dict:
        bucket, key, version_id, t = c.bucket, c.key, c.version_id, c.t
        if_match, if_mtime, if_size = c.if_match, c.if_mtime, c.if_size
        gone = {"existed": False}
        try:
            parent, name, marker = self._resolve(bucket, key)
        except errors.NoSuchKey:
            return gone
        if marker:
            return self._delete_marker_dir(b, bucket, key, parent, if_match, if_mtime, if_size)
        ino = self._lookup(parent, name, False)
        if ino is None:
            return gone
        cur = self.get_inode(ino) or {}
        ver = self.versioning(bucket)
        target, vkey = cur, None
        if version_id is not None and version_id != cur.get("vid", "null"):
            found = self._find_version(ino, version_id)
            if found is None:
                return {"existed": False, "vid": version_id}
            vkey, target = found
        # a delete marker is checked too: it has no ETag (only If-Match: * holds), size 0 and its own time
        self._check_delete_conditions(target, if_match, if_mtime, if_size)
        if vkey is not None:  # a noncurrent version
            self.free_blocks(b, target.get("blk", []), t)
            b.delete(vkey)
            return {"existed": True, "dm": bool(target.get("dm")), "vid": version_id}
        if self._detach(b, parent, name, ino, cur, t):  # one name of a hard-linked file: the inode stays
            self.add_usage(b, self.bucket_ino(bucket), *_minus(_visible(cur)))
            if version_id is None and ver is not None:
                dm = self._delete_marker(cur, ver, t, c.vid)
                self._put_file(b, parent, name, self._next(b, b"ino"), dm)
                return {"existed": True, "dm": True, "vid": dm["vid"]}
            self._prune(b, bucket, key, {keys.entry(parent, name, False)}, marker_removed=False)
            vid = {"vid": cur.get("vid", "null")} if version_id is not None or "vid" in cur else {}
            return {"existed": True, "dm": bool(cur.get("dm")), **vid}
        if version_id is None and ver is not None:  # versioned: a delete marker becomes current
            self._retire(b, ino, cur, ver, t)
            dm = self._delete_marker(cur, ver, t, c.vid)
            self._put_file(b, parent, name, ino, dm)
            self.add_usage(b, self.bucket_ino(bucket), *_minus(_visible(cur)))
            return {"existed": True, "dm": True, "vid": dm["vid"]}
        # the current version goes: the newest noncurrent one (if any) becomes current
        self.free_blocks(b, cur.get("blk", []), t)
        older = self._versions(ino)
        back = _visible(older[0][1]) if older else (0, 0)
        self.add_usage(b, self.bucket_ino(bucket), *(x - y for x, y in zip(back, _visible(cur))))
        if older:
            b.delete(older[0][0])
            self._put_file(b, parent, name, ino, older[0][1])
        else:
            b.delete(keys.entry(parent, name, False))
            b.delete(keys.inode(ino))
            self._prune(b, bucket, key, {keys.entry(parent, name, False)}, marker_removed=False)
        res = {"existed": True, "dm": bool(cur.get("dm"))}
        if version_id is not None or "vid" in cur:
            res["vid"] = cur.get("vid", "null")
        return res

    @staticmethod
    def _delete_marker(cur: dict, ver: str, t: int, vid: str) -> dict:
        return {"t": "f", "dm": True, "vid": vid if ver == "Enabled" else "null", "mt": t, "ct": t,
                "mode": cur.get("mode", S_IFREG | 0o644), "size": 0}

    def _detach(self, b, parent: int, name: str, ino: int, rec: dict, t: int) -> bool:
        """An S3 write or delete of one name of a file with other names (hard links made through the mount) is
        about that key only: the name leaves the inode, which keeps its content, versions and blocks for the other
        names (its link count drops). In a versioned bucket the key's history starts anew, with the new object or
        a delete marker: the old content is still current under the other names. False, and nothing written, if
        `name` is the file's only name."""
        ln = [x for x in rec.get("ln", []) if x != [parent, name]]
        if not ln or len(ln) == len(rec.get("ln", [])):
            return False
        b.delete(keys.entry(parent, name, False))
        b.put(keys.inode(ino), self._enc({**{k: v for k, v in rec.items() if k != "ino"}, "ln": ln, "ct": t}))
        return True

    @staticmethod
    def _check_delete_conditions(cur: dict, if_match, if_mtime, if_size) -> None:
        if if_match is not None:
            MetaStore.check_conditions(cur, if_match, None)
        if (if_mtime is not None and cur.get("mt", 0) // 1_000_000_000 != int(if_mtime)) or \
                (if_size is not None and cur.get("size", 0) != int(if_size)):
            raise errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold")

    def _delete_marker_dir(self, b, bucket, key, ino, if_match, if_mtime, if_size) -> dict:
        rec = self.get_inode(ino)
        if rec is None or "mk" not in rec:
            return {"existed": False}
        self._check_delete_conditions(rec["mk"], if_match, if_mtime, if_size)
        del rec["mk"]
        b.put(keys.inode(ino), self._enc(rec))
        self._prune(b, bucket, key, set(), marker_removed=True)
        return {"existed": True}

    def list_versions(self, bucket: str, prefix: str = "", delimiter: str = "", key_marker: str = "",
                      vid_marker: str = "", max_keys: int = 1000) -> dict:
        """All versions in S3 order (keys ascending, each key's versions newest first). Items are
        ["v", key, vid, is_latest, size, etag, mtime_ns, owner, storage_class, is_delete_marker] or ["p", prefix]."""
        root = self.bucket_ino(bucket)
        page = _Page(max_keys, key_marker)

        def versions_of(key: str, ino: int) -> list:
            cur = self.get_inode(ino) or {}
            out = [(cur, True)] + [(r, False) for _, r in self._versions(ino)]
            return [["v", key, r.get("vid", "null"), latest, r.get("size", 0), r.get("etag", ""), r.get("mt", 0),
                     r.get("owner", ""), r.get("sc", "STANDARD"), bool(r.get("dm"))] for r, latest in out]

        start = []
        if key_marker and vid_marker and key_marker.startswith(prefix):
            try:
                parent, name, marker = self._resolve(bucket, key_marker)
                ino = None if marker else self._lookup(parent, name, False)
            except errors.NoSuchKey:
                ino = None
            if ino is not None:
                vs = versions_of(key_marker, ino)
                idx = next((i for i, v in enumerate(vs) if v[2] == vid_marker), None)
                start = vs[idx + 1:] if idx is not None else []

        def walk():
            yield from (("v", v) for v in start)
            for kind, key, ino in self._walk(root, "", prefix, key_marker, prune=delimiter == "/"):
                yield kind, (key, ino[0] if kind == "f" else ino)

        for kind, val in walk():
            entry = self._common_prefix(kind, val[0], prefix, delimiter) if kind != "v" else None
            if entry is not None:
                if not page.add_prefix(entry):
                    break
                continue
            if kind == "m":
                size, etag, mt, owner, sc, _ = self._marker_summary(val[1])
                vs = [["v", val[0], "null", True, size, etag, mt, owner, sc, False]]
            elif kind == "v":
                vs = [val]
            else:
                vs = versions_of(*val)
            if not all(page.add(v) for v in vs):
                break
        return page.result()

    def _prune(self, b, bucket: str, key: str, removed: set[bytes], marker_removed: bool) -> None:
        """Remove implicit directories on the key's path that the batch leaves empty (deepest first)."""
        parts = split_key(key)[:-1]
        chain = [(None, self.bucket_ino(bucket), "")]
        for p in parts:
            chain.append((chain[-1][1], self._lookup(chain[-1][1], p, True), p))
        for i in range(len(chain) - 1, 0, -1):
            parent, ino, name = chain[i]
            rec = self.get_inode(ino) or {}
            if "mk" in rec and not (marker_removed and i == len(chain) - 1):
                return
            p = keys.entries(ino)
            left = [k for k in self.kv.scan_keys(p, prefix_end(p)) if k not in removed]
            if left:
                return
            b.delete(keys.entry(parent, name, True))
            b.delete(keys.inode(ino))
            removed.add(keys.entry(parent, name, True))

    def free_blocks(self, b, blocks: list, t: int) -> None:
        """Blocks the namespace let go of at time `t` (a deleted or overwritten object, a dropped version or part):
        their copies are deleted once `free_grace_s` is over (release_freed), so that a read that started before,
        and holds the block list already, still finds them; at once without a grace."""
        if self.free_grace_s <= 0:
            for blk in blocks:
                for n in blk[3]:
                    b.put(keys.garbage(n, blk[0]), b"")
            return
        for blk in blocks:
            for n in blk[3]:
                b.put(keys.freed(t, n, blk[0]), b"")

    # ---------------------------------------------------------------- listing
    def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", after: str = "",
                     max_keys: int = 1000) -> dict:
        """Keys and common prefixes in S3 order. Returns {"items": [...], "truncated": bool}; each item is
        ["k", key, size, etag, mtime_ns, owner, storage_class] or ["p", common_prefix]."""
        root = self.bucket_ino(bucket)
        page = _Page(max_keys, after)
        for kind, key, ino in self._walk(root, "", prefix, after, prune=delimiter == "/"):
            entry = self._common_prefix(kind, key, prefix, delimiter)
            if entry is not None:
                if not page.add_prefix(entry):
                    break
                continue
            if kind == "m":
                summary = self._marker_summary(ino)
            else:
                summary = self._dec(ino[1][8:])
                if summary[5]:
                    continue  # the key's current version is a delete marker: not listed
            if not page.add(["k", key, *summary[:5]]):
                break
        return page.result()

    @staticmethod
    def _common_prefix(kind: str, key: str, prefix: str, delimiter: str) -> str | None:
        """The CommonPrefix a walked item rolls up into, or None if it is listed itself."""
        if kind == "p":
            return key
        if delimiter:
            i = key.find(delimiter, len(prefix))
            if i >= 0:
                return key[: i + len(delimiter)]
        return None

    def _marker_summary(self, ino: int) -> list:
        rec = (self.get_inode(ino) or {}).get("mk", {})
        return [rec.get("size", 0), rec.get("etag", ""), rec.get("mt", 0), rec.get("owner", ""),
                rec.get("sc", "STANDARD"), False]

    def _walk(self, ino: int, base: str, prefix: str, after: str, prune: bool) -> Iterator[tuple[str, str, int]]:
        """Depth-first walk of directory `ino`, whose keys all start with `base`: yields ("f" | "m" | "p", key, ino) for
        keys that start with `prefix` and sort after `after`, in S3 order. "m" is a directory marker, "p" a
        subdirectory rolled up whole (prune=True, delimiter "/")."""
        rest = prefix[len(base):] if len(prefix) > len(base) else ""
        if after and after > base and not after.startswith(base):
            return  # every key under base sorts before `after`
        if not rest and base and base > after:
            rec = self.get_inode(ino)
            if rec is not None and "mk" in rec:
                yield "m", base, ino
        if "/" in rest:
            first = rest.split("/", 1)[0]
            child = self._lookup(ino, first, True)
            if child is not None:
                yield from self._walk(child, base + first + "/", prefix, after, prune)
            return
        lo = rest
        if after.startswith(base):
            a_first = after[len(base):].split("/", 1)[0]
            if a_first > lo:
                lo = a_first
        ep = keys.entries(ino)
        end = prefix_end(ep + rest.encode())
        for k, v in self.kv.scan(ep + lo.encode(), end):
            name = k[9:].decode()
            child = int.from_bytes(v[:8], "big")
            if name.endswith("/"):
                cp = base + name
                if after >= cp and not after.startswith(cp):
                    continue
                if prune:
                    if cp > after:
                        yield "p", cp, child
                    continue
                yield from self._walk(child, cp, prefix, after, prune)
            else:
                key = base + name
                if key > after:
                    yield "f", key, (child, v)

    # ---------------------------------------------------------------- blocks
    def allocate(self, count: int, choose) -> list[tuple[int, list[int]]]:
        """Reserve `count` block ids, place each with `choose(block_id, i) -> nodes`, and record them as pending.
        The placement is chosen here, before the command: the ids it gets are the counter's next ones."""
        first = self._peek(b"blk")
        nodes = [list(choose(first + i, i)) for i in range(count)]
        self.execute(cmds.Allocate(first=first, nodes=nodes, t=now_ns()))
        return [(first + i, n) for i, n in enumerate(nodes)]

    def _apply_allocate(self, b, c: cmds.Allocate) -> None:
        first = self._next(b, b"blk", len(c.nodes))
        if first != c.first:
            raise errors.Conflict(f"block ids from {c.first} were placed, the next free one is {first}")
        for i, nodes in enumerate(c.nodes):
            b.put(keys.pending(first + i), self._enc({"t": c.t, "n": nodes}))

    def abandon(self, block_ids: list[int]) -> None:
        """Blocks allocated for an upload that failed: delete them from their nodes now."""
        self.execute(cmds.Abandon(block_ids=[int(x) for x in block_ids]))

    def _apply_abandon(self, b, c: cmds.Abandon) -> None:
        for bid in c.block_ids:
            raw = self.kv.get(keys.pending(bid))
            if raw is None:
                continue
            for n in self._dec(raw)["n"]:
                b.put(keys.garbage(n, bid), b"")
            b.delete(keys.pending(bid))

    def _expired(self, cutoff: int) -> list[int]:
        return [int.from_bytes(k, "big") for k, v in
                ((k[1:], v) for k, v in self.kv.scan(keys.PENDING, prefix_end(keys.PENDING))) if self._dec(v)["t"] < cutoff]

    def expire_pending(self, now: int | None = None) -> int:
        """Move allocations older than the grace period (uploads cut off mid-way) to garbage."""
        cutoff = (now or now_ns()) - int(self.pending_grace_s * 1e9)
        if not self._expired(cutoff):
            return 0  # the common case, every few seconds: no command
        return self.execute(cmds.ExpirePending(cutoff=cutoff))

    def _apply_expire_pending(self, b, c: cmds.ExpirePending) -> int:
        expired = self._expired(c.cutoff)
        self._apply_abandon(b, cmds.Abandon(block_ids=expired))
        return len(expired)

    def _due_freed(self, cutoff: int, limit: int) -> list[bytes]:
        due = []
        for k in self.kv.scan_keys(keys.FREED, keys.freed(max(cutoff, 0), 0, 0)):
            if len(due) >= limit:
                break
            due.append(k)
        return due

    def release_freed(self, now: int | None = None, limit: int = 10_000) -> int:
        """Turn the freed copies whose grace is over into garbage (delete orders); returns how many."""
        cutoff = (now or now_ns()) - int(self.free_grace_s * 1e9)
        if not self._due_freed(cutoff, 1):
            return 0  # the common case, on every heartbeat: no command
        return self.execute(cmds.ReleaseFreed(cutoff=cutoff, limit=limit))

    def _apply_release_freed(self, b, c: cmds.ReleaseFreed) -> int:
        due = self._due_freed(c.cutoff, c.limit)
        for k in due:
            b.put(keys.garbage(int.from_bytes(k[9:13], "big"), int.from_bytes(k[13:], "big")), b"")
            b.delete(k)
        return len(due)

    def freed_on(self) -> dict[int, set[int]]:
        """node -> the copies on it that wait out their free grace (not garbage yet, not needed by any file)."""
        out: dict[int, set[int]] = {}
        for k in self.kv.scan_keys(keys.FREED, prefix_end(keys.FREED)):
            out.setdefault(int.from_bytes(k[9:13], "big"), set()).add(int.from_bytes(k[13:], "big"))
        return out

    def freed_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(keys.FREED, prefix_end(keys.FREED)))

    def garbage_for(self, node: int, limit: int = 1000) -> list[int]:
        p = keys.garbage_of(node)
        return [int.from_bytes(k[5:], "big") for k in self.kv.scan_keys(p, prefix_end(p))][:limit]

    def garbage_done(self, node: int, block_ids: list[int]) -> None:
        self.execute(cmds.GarbageDone(node=int(node), block_ids=[int(x) for x in block_ids]))

    def _apply_garbage_done(self, b, c: cmds.GarbageDone) -> None:
        for bid in c.block_ids:
            b.delete(keys.garbage(c.node, bid))

    def garbage_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(b"G", b"H"))

    def pending_count(self) -> int:
        return sum(1 for _ in self.kv.scan_keys(b"P", b"Q"))

    def pending_blocks(self) -> list[int]:
        """Allocated, not yet committed blocks (uploads in flight and the gateways' unused leases)."""
        return [int.from_bytes(k[1:], "big") for k in self.kv.scan_keys(b"P", b"Q")]

    def referenced_blocks(self) -> set[int]:
        """Every block id a committed file, marker or uploaded part refers to (for GC checks)."""
        out = set()
        for _, v in self.kv.scan(b"I", b"J"):
            for blk in self._dec(v).get("blk", []):
                out.add(blk[0])
        for lo, hi in ((b"Q", b"R"), (b"V", b"W")):  # uploaded parts and noncurrent versions
            for _, v in self.kv.scan(lo, hi):
                for blk in self._dec(v).get("blk", []):
                    out.add(blk[0])
        return out

    # Records that hold block lists: inodes (files), uploaded parts and noncurrent versions, in key order.
    _BLOCK_RANGES = ((b"I", b"J"), (b"Q", b"R"), (b"V", b"W"))

    def scan_block_lists(self, after: bytes = b"", limit: int = 10_000) -> tuple[list[tuple[bytes, list]], bytes | None]:
        """Up to `limit` records with blocks that sort after key `after`: ([(record key, its block list)], the key to
        pass as `after` next time, or None when the scan reached the end). For the repair worker's paced sweeps."""
        out: list[tuple[bytes, list]] = []
        for lo, hi in self._BLOCK_RANGES:
            if after >= hi:
                continue
            for k, v in self.kv.scan(max(lo, after + b"\0") if after else lo, hi):
                if len(out) >= limit:
                    return out, out[-1][0]
                blk = self._dec(v).get("blk")
                if blk:
                    out.append((k, blk))
        return out, None

    def find_block(self, block_id: int, hint: bytes | None = None) -> tuple[bytes, list] | None:
        """(key of the record that refers to block `block_id`, its [id, size, crc, nodes] entry), or None if nothing
        does. `hint` is where it was last seen; without it (or if it moved) every block list is scanned."""
        if hint is not None:
            raw = self.kv.get(hint)
            if raw is not None:
                for blk in self._dec(raw).get("blk", []):
                    if blk[0] == block_id:
                        return hint, blk
        for lo, hi in self._BLOCK_RANGES:
            for k, v in self.kv.scan(lo, hi):
                for blk in self._dec(v).get("blk", []):
                    if blk[0] == block_id:
                        return k, blk
        return None

    def replace_replicas(self, changes: list[tuple[int, int, int, bytes | None]]) -> list[bool]:
        """Confirmed re-replications, one batch: for each (block, old node, new node, hint key) the new node takes the
        old one's place in the block's replica set, and the old node's copy becomes garbage (deleted if it comes
        back). A block no file refers to any more (deleted meanwhile) makes the new copy garbage instead. Returns,
        per change, whether a replica set changed."""
        return self.execute(cmds.ReplaceReplicas(changes=[(int(bid), None if old is None else int(old), int(new), hint)
                                                          for bid, old, new, hint in changes]))

    def _apply_replace_replicas(self, b, c: cmds.ReplaceReplicas) -> list[bool]:
        records: dict[bytes, dict] = {}
        done = []
        for bid, old, new, hint in c.changes:
            found = None
            for key in ([hint] if hint is not None else []):
                rec = records.get(key) or (self._dec(raw) if (raw := self.kv.get(key)) is not None else None)
                if rec is not None and any(blk[0] == bid for blk in rec.get("blk", [])):
                    found = key, rec
            if found is None:
                loc = self.find_block(bid)
                if loc is not None:
                    found = loc[0], records.get(loc[0]) or self._dec(self.kv.get(loc[0]))
            if found is None:
                b.put(keys.garbage(new, bid), b"")
                done.append(False)
                continue
            key, rec = found
            records[key] = rec
            changed = False
            for blk in rec["blk"]:
                if blk[0] == bid and old is None and new not in blk[3]:  # a replica added (top-up)
                    blk[3] = [*blk[3], new]
                    changed = True
                elif blk[0] == bid and old in blk[3] and new not in blk[3]:
                    blk[3] = [new if n == old else n for n in blk[3]]
                    b.put(keys.garbage(old, bid), b"")
                    changed = True
                elif blk[0] == bid and new not in blk[3]:
                    b.put(keys.garbage(new, bid), b"")  # someone else replaced `old` first: a surplus copy
            done.append(changed)
        for key, rec in records.items():
            b.put(key, self._enc(rec))
        return done

    def mark_short(self, blocks: list[tuple[int, int]]) -> None:
        """Blocks written with fewer replicas than wanted ([block, wanted]): the repair worker tops them up."""
        self.execute(cmds.MarkShort(blocks=[(int(bid), int(w)) for bid, w in blocks]))

    def _apply_mark_short(self, b, c: cmds.MarkShort) -> None:
        for bid, wanted in c.blocks:
            b.put(keys.short(bid), keys.u32(wanted))

    def short_blocks(self) -> dict[int, int]:
        return {int.from_bytes(k[1:], "big"): int.from_bytes(v, "big")
                for k, v in self.kv.scan(keys.SHORT, prefix_end(keys.SHORT))}

    def drop_short(self, block_ids) -> None:
        self.execute(cmds.DropShort(block_ids=[int(x) for x in block_ids]))

    def _apply_drop_short(self, b, c: cmds.DropShort) -> None:
        for bid in c.block_ids:
            b.delete(keys.short(bid))

    def add_garbage(self, node: int, block_ids) -> None:
        """Copies on `node` that no file needs (found by reconciling its block report): delete them."""
        self.execute(cmds.AddGarbage(node=int(node), block_ids=[int(x) for x in block_ids]))

    def _apply_add_garbage(self, b, c: cmds.AddGarbage) -> None:
        for bid in c.block_ids:
            b.put(keys.garbage(c.node, bid), b"")

    def pending_on(self) -> dict[int, tuple[int, list[int]]]:
        """Allocated, not yet committed blocks: (allocation time in ns, the nodes they were placed on)."""
        return {int.from_bytes(k[1:], "big"): (rec["t"], rec["n"])
                for k, v in self.kv.scan(keys.PENDING, prefix_end(keys.PENDING)) for rec in (self._dec(v),)}

    def drop_stray_copy(self, block_id: int, node: int) -> bool:
        """A copy of `block_id` landed on `node` without a known order (it timed out, or the NameNode restarted):
        unless `node` is one of the block's holders, the copy is garbage. Returns whether it was."""
        return self.execute(cmds.DropStrayCopy(block_id=int(block_id), node=int(node)))

    def _apply_drop_stray_copy(self, b, c: cmds.DropStrayCopy) -> bool:
        loc = self.find_block(c.block_id)
        if loc is not None and c.node in loc[1][3]:
            return False
        b.put(keys.garbage(c.node, c.block_id), b"")
        return True

    # ---------------------------------------------------------------- multipart uploads
    def _uploads(self) -> Iterator[tuple[str, dict]]:
        for k, v in self.kv.scan(keys.UPLOADS, prefix_end(keys.UPLOADS)):
            yield k[1:].decode(), self._dec(v)

    def _upload(self, upload_id: str) -> dict:
        raw = self.kv.get(keys.upload(upload_id))
        if raw is None:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.", upload_id=upload_id)
        return self._dec(raw)

    def create_upload(self, bucket: str, key: str, attrs: dict) -> str:
        return self.execute(cmds.CreateUpload(bucket=bucket, key=key, attrs=attrs, t=now_ns(),
                                              upload_id=uuidlib.uuid4().hex + os.urandom(8).hex()))

    def _apply_create_upload(self, b, c: cmds.CreateUpload) -> str:
        self.bucket_ino(c.bucket)
        split_key(c.key)
        b.put(keys.upload(c.upload_id), self._enc({"b": c.bucket, "k": c.key, "a": c.attrs, "t": c.t}))
        return c.upload_id

    def get_upload(self, bucket: str, key: str, upload_id: str) -> dict:
        up = self._upload(upload_id)
        if up["b"] != bucket or up["k"] != key:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.")
        return up

    def put_part(self, bucket: str, key: str, upload_id: str, number: int, part: dict) -> None:
        self.execute(cmds.PutPart(bucket=bucket, key=key, upload_id=upload_id, number=int(number), part=part,
                                  t=now_ns()))

    def _apply_put_part(self, b, c: cmds.PutPart) -> None:
        self.get_upload(c.bucket, c.key, c.upload_id)
        old = self.kv.get(keys.part(c.upload_id, c.number))
        if old is not None:
            self.free_blocks(b, self._dec(old).get("blk", []), c.t)
        for blk in c.part.get("blk", []):
            b.delete(keys.pending(blk[0]))
        b.put(keys.part(c.upload_id, c.number), self._enc({**c.part, "mt": c.t}))

    def list_parts(self, bucket: str, key: str, upload_id: str) -> tuple[dict, list[dict]]:
        up = self.get_upload(bucket, key, upload_id)
        p = keys.parts(upload_id)
        out = []
        for k, v in self.kv.scan(p, prefix_end(p)):
            rec = self._dec(v)
            rec.pop("blk", None)
            rec["n"] = int.from_bytes(k[-4:], "big")
            out.append(rec)
        return up, out

    def _drop_upload(self, b, upload_id: str, t: int, keep: set[int] = frozenset()) -> None:
        p = keys.parts(upload_id)
        for k, v in self.kv.scan(p, prefix_end(p)):
            if int.from_bytes(k[-4:], "big") not in keep:
                self.free_blocks(b, self._dec(v).get("blk", []), t)
            b.delete(k)
        b.delete(keys.upload(upload_id))

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        self.execute(cmds.AbortUpload(bucket=bucket, key=key, upload_id=upload_id, t=now_ns()))

    def _apply_abort_upload(self, b, c: cmds.AbortUpload) -> None:
        self.get_upload(c.bucket, c.key, c.upload_id)
        self._drop_upload(b, c.upload_id, c.t)

    def complete_upload(self, bucket: str, key: str, upload_id: str, wanted: list[dict], *, min_part_size: int,
                        checksum: dict | None = None, if_match: str | None = None,
                        if_none_match: str | None = None) -> dict:
        """Concatenate the named parts' block lists (no data moves) and commit them as the object, atomically.

        `checksum` is what the client expects of the whole object, {alg: value} and optionally "type"; a mismatch
        commits nothing. Completing an upload again after it became the object answers as the first completion did.
        """
        return self.execute(cmds.CompleteUpload(
            bucket=bucket, key=key, upload_id=upload_id, parts=wanted, min_part_size=int(min_part_size), t=now_ns(),
            vid=self._new_vid(), checksum=checksum, if_match=if_match, if_none_match=if_none_match))

    def _apply_complete_upload(self, b, c: cmds.CompleteUpload) -> dict:
        bucket, key, upload_id, wanted, min_part_size = c.bucket, c.key, c.upload_id, c.parts, c.min_part_size
        checksum = c.checksum
        try:
            up = self.get_upload(bucket, key, upload_id)
        except errors.NoSuchUpload:
            return self._completed_before(bucket, key, upload_id, wanted)
        if not wanted:
            raise errors.InvalidInput("You must specify at least one part", code="MalformedXML")
        stored = {}
        p = keys.parts(upload_id)
        for k, v in self.kv.scan(p, prefix_end(p)):
            stored[int.from_bytes(k[-4:], "big")] = self._dec(v)
        parts, last = [], 0
        for i, w in enumerate(wanted):
            n = int(w["n"])
            if n <= last:
                raise errors.InvalidPartOrder("The list of parts was not in ascending order.")
            last = n
            part = stored.get(n)
            if part is None or _norm_etag(w.get("etag", "")) != _norm_etag(part["etag"]):
                raise errors.InvalidPart("One or more of the specified parts could not be found.", part=n)
            for alg, val in (w.get("cs") or {}).items():
                if part.get("cs", {}).get(alg) not in (None, val):
                    raise errors.InvalidPart(f"The {alg} checksum of part {n} did not match.", part=n)
            if i < len(wanted) - 1 and part["size"] < min_part_size:
                raise errors.EntityTooSmall("Your proposed upload is smaller than the minimum allowed size",
                                            part=n, size=part["size"], min=min_part_size)
            parts.append(part)
        alg = up["a"].get("csa")
        cs = _multipart_checksum(parts, alg, up["a"].get("cst"))
        _check_expected_checksum(cs, checksum or {})
        size = sum(part["size"] for part in parts)
        obj = {k: v for k, v in up["a"].items() if k not in ("csa", "cst")}
        obj.update(size=size, etag=_multipart_etag([part["etag"] for part in parts]), mpu=upload_id,
                   blk=[blk for part in parts for blk in part.get("blk", [])], ps=[part["size"] for part in parts])
        if cs:
            obj["cs"] = cs
            obj["pcs"] = [part["cs"][alg] for part in parts]
        used = {int(w["n"]) for w in wanted}
        res = self._put(b, bucket, key, obj, obj.get("mt") or c.t, c.vid, c.if_match, c.if_none_match)
        self._drop_upload(b, upload_id, c.t, keep=used)
        return {**res, "size": size, "cs": cs}

    def _completed_before(self, bucket: str, key: str, upload_id: str, wanted: list[dict]) -> dict:
        """A retried completion: the object this upload became, if it is still there and the part list is the same."""
        cur = self._stat_or_none(bucket, key)
        try:
            same = cur is not None and cur.get("mpu") == upload_id and \
                cur.get("etag") == _multipart_etag([w.get("etag", "") for w in wanted])
        except ValueError:
            same = False
        if not same:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.", upload_id=upload_id)
        return {"ino": cur["ino"], "etag": cur["etag"], "mt": cur["mt"], "vid": cur.get("vid"), "size": cur["size"],
                "cs": cur.get("cs", {})}

    def list_uploads(self, bucket: str) -> list[dict]:
        self.bucket_ino(bucket)
        out = [{"id": uid, **up} for uid, up in self._uploads() if up["b"] == bucket]
        out.sort(key=lambda u: (u["k"], u["t"]))
        return out

    # ---------------------------------------------------------------- DataNodes
    def node_id_for(self, uuid: str) -> int:
        raw = self.kv.get(keys.node_uuid(uuid))
        if raw is not None:
            return int.from_bytes(raw, "big")
        return self.execute(cmds.AssignNodeId(uuid=uuid))

    def _apply_assign_node_id(self, b, c: cmds.AssignNodeId) -> int:
        raw = self.kv.get(keys.node_uuid(c.uuid))
        if raw is not None:
            return int.from_bytes(raw, "big")
        nid = self._next(b, b"node") - 1  # node ids start at 1
        b.put(keys.node_uuid(c.uuid), keys.u32(nid))
        return nid

    def save_node(self, node_id: int, rec: dict) -> None:
        self.execute(cmds.SaveNode(node_id=int(node_id), rec=rec))

    def _apply_save_node(self, b, c: cmds.SaveNode) -> None:
        b.put(keys.node(c.node_id), self._enc(c.rec))

    # ---------------------------------------------------------------- S3 access keys (access_keys.py)
    def _apply_create_access_key(self, b, c: cmds.CreateAccessKey) -> dict:
        return access_keys.apply_create(self.kv, b, c)

    def _apply_update_access_key(self, b, c: cmds.UpdateAccessKey) -> dict:
        return access_keys.apply_update(self.kv, b, c)

    def _apply_delete_access_key(self, b, c: cmds.DeleteAccessKey) -> None:
        access_keys.apply_delete(self.kv, b, c)

    def load_nodes(self) -> dict[int, dict]:
        return {int.from_bytes(k[1:], "big"): self._dec(v) for k, v in self.kv.scan(keys.NODES, prefix_end(keys.NODES))}

    # ---------------------------------------------------------------- usage and quotas
    # A bucket's usage counts the current, visible version of each key (delete markers, noncurrent versions,
    # directory markers and unfinished multipart parts are not counted); every commit or delete adjusts it in its
    # own write batch, so usage and namespace never disagree.
    def usage(self, bucket_ino: int) -> list[int]:
        """[bytes, objects] of a bucket; counted once by a walk for buckets made before usage was kept."""
        u = self._usage.get(bucket_ino)
        if u is None:
            raw = self.kv.get(keys.usage(bucket_ino))
            u = self._dec(raw) if raw is not None else self._count_usage(bucket_ino)
            self._usage[bucket_ino] = u
        return u

    def _count_usage(self, bucket_ino: int) -> list[int]:
        total = [0, 0]
        for kind, _, val in self._walk(bucket_ino, "", "", "", prune=False):
            if kind == "f":
                size, n = _visible_summary(self._dec(val[1][8:]))
                total[0] += size
                total[1] += n
        return total

    def add_usage(self, b, bucket_ino: int, dbytes: int, dobjects: int) -> None:
        u = self.usage(bucket_ino)
        u = [max(u[0] + dbytes, 0), max(u[1] + dobjects, 0)]
        self._usage[bucket_ino] = u
        b.put(keys.usage(bucket_ino), self._enc(u))

    def _usage_delta(self, bucket: str, key: str, obj: dict) -> tuple[int, int]:
        """What committing `obj` at `key` changes in the bucket's usage; raises QuotaExceeded if that goes over the
        bucket's quota (only growth is refused: an overwrite that shrinks always passes)."""
        if key.endswith("/"):
            return 0, 0
        try:
            parent, name, _ = self._resolve(bucket, key)
            raw = self.kv.get(keys.entry(parent, name, False))
        except errors.NoSuchKey:
            raw = None
        old = _visible_summary(self._dec(raw[8:])) if raw is not None else (0, 0)
        delta = (int(obj.get("size", 0)) - old[0], 1 - old[1])
        info = self.bucket_info(bucket)
        used = self.usage(info["ino"])
        for i, (field, what) in enumerate((("qb", "bytes"), ("qo", "objects"))):
            limit = info.get(field)
            if limit is not None and delta[i] > 0 and used[i] + delta[i] > int(limit):
                raise errors.QuotaExceeded(f"The bucket's quota of {int(limit)} {what} would be exceeded "
                                           f"({used[i]} used, this request adds {delta[i]}).", bucket=bucket)
        return delta

    def bucket_usage(self) -> dict[str, list[int]]:
        p = keys.entries(ROOT_INO)
        return {k[9:-1].decode(): self.usage(int.from_bytes(v, "big"))
                for k, v in self.kv.scan(p, prefix_end(p)) if k.endswith(b"/")}


def _visible(rec: dict) -> tuple[int, int]:
    """(bytes, objects) a current version adds to its bucket's usage: nothing for a delete marker."""
    return (0, 0) if not rec or rec.get("dm") else (int(rec.get("size", 0)), 1)


def _visible_summary(summary: list) -> tuple[int, int]:
    return (0, 0) if summary[5] else (int(summary[0]), 1)


def _minus(pair: tuple[int, int]) -> tuple[int, int]:
    return -pair[0], -pair[1]


def _norm_etag(etag: str) -> str:
    return etag.strip().strip('"')


def _etag_in(etag: str | None, header: str) -> bool:
    if etag is None:
        return False
    want = _norm_etag(etag)
    return any(_norm_etag(e) in (want, "*") for e in header.split(","))


def _multipart_etag(part_etags: list[str]) -> str:
    md5s = b"".join(bytes.fromhex(_norm_etag(e)) for e in part_etags)
    return f'"{hashlib.md5(md5s).hexdigest()}-{len(part_etags)}"'


def _multipart_checksum(parts: list[dict], alg: str | None, ctype: str | None) -> dict:
    """The object's checksum from its parts': {alg: value, "type": COMPOSITE or FULL_OBJECT}; {} if it has none."""
    vals = [p.get("cs", {}).get(alg) for p in parts] if alg else [None]
    if None in vals:
        return {}
    ctype = ctype or checksums.multipart_types(alg)[0]
    if ctype == checksums.FULL_OBJECT:
        return {alg: checksums.combine(alg, [(v, p["size"]) for v, p in zip(vals, parts)]), "type": ctype}
    return {alg: checksums.composite(alg, vals), "type": ctype}


def _check_expected_checksum(cs: dict, expected: dict) -> None:
    """The whole-object checksum (and type) a client sent with its completion must be the one the parts give."""
    want_type = expected.get("type")
    if want_type is not None and cs and want_type != cs["type"]:
        raise errors.InvalidInput(f"The upload was created using the {cs['type']} checksum mode. The complete "
                                  "request must use the same checksum mode.", code="InvalidRequest")
    for alg, val in expected.items():
        if alg == "type":
            continue
        have = cs.get(alg)
        if have is None:
            raise errors.InvalidInput(f"The upload was not created with the {alg.upper()} checksum algorithm.",
                                      code="InvalidRequest")
        if val not in (have, have.split("-")[0]):
            raise errors.InvalidInput(f"The {alg.upper()} you specified did not match the calculated checksum.",
                                      code="BadDigest")
