"""Buckets, objects and listing: the POSIX tree of inodes and directory entries as S3 sees it."""
from __future__ import annotations

from typing import Iterator

import msgspec

from epochfs.common import errors
from epochfs.common.blocks import block_id
from epochfs.common.kv import prefix_end
from epochfs.common.paths import split_key

from .. import commands as cmds, keys
from ..keys import ROOT_INO
from .base import StoreBase
from .records import S_IFDIR, S_IFREG, etag_in, minus, now_ns, visible


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



class Namespace(StoreBase):
    """Buckets (top-level directories), objects (files and directory markers), conditional writes, deletes and
    listings."""

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
        rec = {"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0, "mt": t, "ct": t, "pa": ROOT_INO,
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
        if c.fields.get("ver") == "Suspended" and rec.get("bkt", {}).get("olk"):
            raise errors.InvalidBucketState("An Object Lock configuration is present on this bucket, so the "
                                            "versioning state cannot be changed.")
        rec["bkt"] = {**rec.get("bkt", {}), **c.fields}
        b.put(keys.inode(ino), self._enc(rec))
        return {"name": c.bucket, **rec["bkt"]}

    def set_bucket_tags(self, bucket: str, tags: dict[str, str] | None) -> dict:
        return self.execute(cmds.SetBucketTags(bucket=bucket, tags=tags))

    def _apply_set_bucket_tags(self, b, c: cmds.SetBucketTags) -> dict:
        return self._set_bucket_field(b, c.bucket, "tg", c.tags)

    def set_bucket_lifecycle(self, bucket: str, rules: list | None) -> dict:
        return self.execute(cmds.SetBucketLifecycle(bucket=bucket, rules=rules))

    def _apply_set_bucket_lifecycle(self, b, c: cmds.SetBucketLifecycle) -> dict:
        return self._set_bucket_field(b, c.bucket, "lc", None if c.rules is None else msgspec.to_builtins(c.rules))

    def _set_bucket_field(self, b, bucket: str, name: str, value) -> dict:
        ino = self.bucket_ino(bucket)
        rec = self.get_inode(ino)
        bkt = {k: v for k, v in rec.get("bkt", {}).items() if k != name}
        if value is not None:
            bkt[name] = value
        rec["bkt"] = bkt
        b.put(keys.inode(ino), self._enc(rec))
        return {"name": bucket, **bkt}

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

    def _stat_or_none(self, bucket: str, key: str) -> dict | None:
        try:
            return self.stat(bucket, key)
        except errors.NoSuchKey:
            return None

    @staticmethod
    def check_conditions(cur: dict | None, if_match: str | None, if_none_match: str | None) -> None:
        if if_none_match is not None:
            if cur is not None and (if_none_match.strip() == "*" or etag_in(cur.get("etag"), if_none_match)):
                raise errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold",
                                                condition="If-None-Match")
        if if_match is not None:
            if cur is None:
                raise errors.NoSuchKey("The specified key does not exist.")
            if not (if_match.strip() == "*" or etag_in(cur.get("etag"), if_match)):
                raise errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold",
                                                condition="If-Match")

    def put_object(self, bucket: str, key: str, obj: dict, *, if_match: str | None = None,
                   if_none_match: str | None = None, fresh: bool = False) -> dict:
        """Commit an object: `obj` holds size, etag, blocks ("blk") and headers. Atomic replace of any old version.
        `fresh` (every commit over RPC): only pending blocks are taken (`not_fresh`); the same commit sent again
        after its answer was lost answers as the first did (`_fresh_or_replayed`) instead of replacing the object
        by itself, which would free the very blocks it names."""
        return self.execute(cmds.PutObject(bucket=bucket, key=key, obj=obj, t=obj.get("mt") or now_ns(),
                                           vid=self._new_vid(), if_match=if_match, if_none_match=if_none_match,
                                           fresh=fresh))

    def _apply_put_object(self, b, c: cmds.PutObject) -> dict:
        if c.fresh:
            replayed = self._fresh_or_replayed(c.bucket, c.key, c.obj.get("blk", []))
            if replayed is not None:
                return replayed
        return self._put(b, c.bucket, c.key, c.obj, c.t, c.vid, c.if_match, c.if_none_match)

    def _fresh_or_replayed(self, bucket: str, key: str, blk: list, taken: set[int] = frozenset()) -> dict | None:
        """None if a fresh commit of `blk` to the key may go ahead; the result of the commit that stored the key's
        current version if that one named the same blocks (this is it again: nothing to write). Else InvalidInput."""
        bad = self.not_fresh(blk, taken)
        if bad is None:
            return None
        try:
            cur = self.stat(bucket, key)
        except errors.DomainError:
            cur = None
        if not taken.intersection(block_id(x) for x in blk) and self.same_blocks(cur, blk):
            return {"ino": cur["ino"], "etag": cur.get("etag"), "mt": cur["mt"], "vid": cur.get("vid")}
        raise errors.InvalidInput(f"block {bad} was not allocated for this write, or is committed already")

    def put_objects(self, bucket: str, items: list[tuple[str, dict, str | None, str | None]], *,
                    fresh: bool = False) -> list:
        """Commit many objects of one bucket (key, obj, if_match, if_none_match) in one command and one write batch;
        each item's result ({"ino", "etag", "mt", "vid"}) or the DomainError that refused it (nothing of it
        written). Directory markers (keys ending in "/") are not batch items. `fresh`: an item whose blocks are not
        all pending (allocated, not committed yet) is refused."""
        return self.execute(cmds.PutObjects(bucket=bucket, t=now_ns(), fresh=fresh, items=[
            cmds.PutItem(key=k, obj=obj, vid=self._new_vid(), if_match=im, if_none_match=inm)
            for k, obj, im, inm in items]))

    def _apply_put_objects(self, b, c: cmds.PutObjects) -> list:
        """Each item's writes are staged apart and join the command's batch only if the item passes every check, so
        a refused item leaves nothing (and the in-memory usage and counters as they were); directories an earlier
        item created are found through `made`, since the batch is not readable before it is written."""
        out: list = []
        made: dict[tuple[int, str], int] = {}
        taken: set[int] = set()  # fresh: blocks an earlier item of this batch committed (the batch is not readable)
        if len({it.key for it in c.items}) != len(c.items):
            raise errors.InvalidInput("A batch names a key twice.")
        for it in c.items:
            staged = _Staged()
            mine = dict(made)
            usage = {k: list(v) for k, v in self._usage.items()}
            counters = dict(self._counters)
            try:
                if it.key.endswith("/"):
                    raise errors.InvalidInput("A directory marker can't be a batch item.")
                res = self._fresh_or_replayed(c.bucket, it.key, it.obj.get("blk", []), taken) if c.fresh else None
                if res is not None:  # this item was committed before (the batch sent again): as it was
                    out.append(res)
                    continue
                res = self._put(staged, c.bucket, it.key, it.obj, c.t, it.vid, it.if_match, it.if_none_match, mine)
            except errors.DomainError as e:
                self._usage.clear()
                self._usage.update(usage)
                self._counters.clear()
                self._counters.update(counters)
                out.append(e)
                continue
            staged.into(b)
            made = mine
            if c.fresh:
                taken.update(block_id(x) for x in it.obj.get("blk", []))
            out.append(res)
        return out

    def _put(self, b, bucket: str, key: str, obj: dict, t: int, vid: str, if_match: str | None,
             if_none_match: str | None, made: dict | None = None) -> dict:
        """made: (directory ino, name) -> ino of the directories created earlier in the same batch (PutObjects)."""
        parts = split_key(key)
        cur = self._stat_or_none(bucket, key) if (if_match is not None or if_none_match is not None) else None
        self.check_conditions(cur, if_match, if_none_match)
        obj = {**obj, "t": "f", "mt": t, "ct": t}
        self.lock_on_commit(bucket, obj, t)  # object lock: refused without it, the bucket's default retention
        delta = self._usage_delta(bucket, key, obj)
        d = self.bucket_ino(bucket)
        self.add_usage(b, d, *delta)
        created: dict[int, dict] = {}  # directories this batch creates (not readable from the KV yet)
        for p in parts[:-1]:
            nxt = made.get((d, p)) if made else None
            if nxt is None:
                nxt = self._lookup(d, p, True)
            if nxt is None:
                nxt = self._next(b, b"ino")
                created[nxt] = {"t": "d", "mode": S_IFDIR | 0o755, "uid": 0, "gid": 0, "mt": t, "ct": t,
                                "pa": d}
                b.put(keys.inode(nxt), self._enc(created[nxt]))
                b.put(keys.entry(d, p, True), keys.u64(nxt))
                if made is not None:
                    made[(d, p)] = nxt
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
            b.delete(keys.pending(block_id(blk)))
        return {"ino": ino, "etag": obj.get("etag"), "mt": t, "vid": obj.get("vid")}

    def update_object(self, bucket: str, key: str, fields: dict, version_id: str | None = None) -> None:
        """Change stored attributes (ACL, metadata) of an existing object (its current version, or `version_id`)
        without touching its data."""
        self.execute(cmds.UpdateObject(bucket=bucket, key=key, fields=fields, version_id=version_id))

    def _apply_update_object(self, b, c: cmds.UpdateObject) -> None:
        if c.version_id is not None:
            where, rec, target = self._version_record(c.bucket, c.key, c.version_id)
            target.update(c.fields)
            b.put(where, self._enc(rec))
            return
        cur = self.stat(c.bucket, c.key)
        ino = cur.pop("ino")
        if c.key.endswith("/"):
            rec = self.get_inode(ino)
            rec["mk"] = {**rec["mk"], **c.fields}
        else:
            rec = {**cur, **c.fields}
        b.put(keys.inode(ino), self._enc(rec))

    def set_object_tags(self, bucket: str, key: str, tags: dict[str, str], version_id: str | None = None) -> dict:
        """Replace the tags of the key's current version (or of `version_id`): {"vid": its version id}."""
        return self.execute(cmds.SetObjectTags(bucket=bucket, key=key, tags=tags, version_id=version_id))

    def _version_record(self, bucket: str, key: str, version_id: str | None) -> tuple[bytes, dict, dict]:
        """Where the key's current version (or `version_id`) is stored, the record there, and the part of it that
        is the object's (a directory marker's lives inside its directory's inode)."""
        parent, name, marker = self._resolve(bucket, key)
        if marker:  # a directory marker ("a/b/"): its attributes live on the directory's inode
            rec = self.get_inode(parent)
            if rec is None or "mk" not in rec or version_id not in (None, "null"):
                raise errors.NoSuchKey("The specified key does not exist.", key=key)
            return keys.inode(parent), rec, rec["mk"]
        ino = self.stat(bucket, key, version_id)["ino"]  # NoSuchKey, NoSuchVersion, a delete marker...
        rec = self.get_inode(ino)
        where = keys.inode(ino)
        if version_id is not None and rec.get("vid", "null") != version_id:
            where, rec = self._find_version(ino, version_id)
        return where, rec, rec

    def _apply_set_object_tags(self, b, c: cmds.SetObjectTags) -> dict:
        where, rec, target = self._version_record(c.bucket, c.key, c.version_id)
        if c.tags:
            target["tg"] = c.tags
        else:
            target.pop("tg", None)
        b.put(where, self._enc(rec))
        return {"vid": target.get("vid")}

    def delete_object(self, bucket: str, key: str, *, version_id: str | None = None, if_match: str | None = None,
                      if_mtime: int | None = None, if_size: int | None = None, bypass: bool = False) -> dict:
        """Delete a key (or one version of it). Returns {"existed", "dm" (a delete marker was made or removed),
        "vid"}. Empty implicit directories above a removed key go too.

        In a versioned bucket a plain delete makes a delete marker the current version. The conditions (ETag,
        last-modified second, size) apply to the targeted version if it exists, a delete marker included (it
        matches only If-Match: *): deleting a missing key succeeds whatever they say, as in S3."""
        return self.execute(cmds.DeleteObject(bucket=bucket, key=key, t=now_ns(), vid=self._new_vid(),
                                              version_id=version_id, if_match=if_match, if_mtime=if_mtime,
                                              if_size=if_size, bypass=bypass))

    def _apply_delete_object(self, b, c: cmds.DeleteObject) -> dict:
        bucket, key, version_id, t = c.bucket, c.key, c.version_id, c.t
        if_match, if_mtime, if_size = c.if_match, c.if_mtime, c.if_size
        try:
            parent, name, marker = self._resolve(bucket, key)
        except errors.NoSuchKey:
            return self._delete_missing(b, c)
        if marker:
            return self._delete_marker_dir(b, bucket, key, parent, if_match, if_mtime, if_size)
        ino = self._lookup(parent, name, False)
        if ino is None:
            return self._delete_missing(b, c)
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
        if version_id is not None or ver != "Enabled":  # the version itself would go: object lock decides
            self.check_unlocked(target, t, c.bypass)
        if vkey is not None:  # a noncurrent version
            self.free_blocks(b, target.get("blk", []), t)
            b.delete(vkey)
            return {"existed": True, "dm": bool(target.get("dm")), "vid": version_id}
        if self._detach(b, parent, name, ino, cur, t):  # one name of a hard-linked file: the inode stays
            self.add_usage(b, self.bucket_ino(bucket), *minus(visible(cur)))
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
            self.add_usage(b, self.bucket_ino(bucket), *minus(visible(cur)))
            return {"existed": True, "dm": True, "vid": dm["vid"]}
        # the current version goes: the newest noncurrent one (if any) becomes current
        self.free_blocks(b, cur.get("blk", []), t)
        older = self._versions(ino)
        back = visible(older[0][1]) if older else (0, 0)
        self.add_usage(b, self.bucket_ino(bucket), *(x - y for x, y in zip(back, visible(cur))))
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
    def _delete_missing(self, b, c: cmds.DeleteObject) -> dict:
        """A DELETE of a key that has no version: nothing, except in a versioned bucket, where (as in S3) a delete
        marker becomes the key's current version all the same."""
        ver = self.versioning(c.bucket)
        if ver is None or c.version_id is not None or c.key.endswith("/"):
            return {"existed": False}
        res = self._put(b, c.bucket, c.key, {"dm": True, "size": 0}, c.t, c.vid, None, None)
        return {"existed": False, "dm": True, "vid": res["vid"]}

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
            Namespace.check_conditions(cur, if_match, None)
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


class _Staged:
    """A write batch's puts and deletes held back until `into(batch)` (one item of PutObjects)."""
    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append((key, value))

    def delete(self, key: bytes) -> None:
        self.ops.append((key, None))

    def into(self, b) -> None:
        for k, v in self.ops:
            if v is None:
                b.delete(k)
            else:
                b.put(k, v)
