"""Object versions: noncurrent versions of a file, delete markers and their listing."""
from __future__ import annotations

import os

from epochfs.common import errors
from epochfs.common.kv import prefix_end

from .. import keys
from .base import StoreBase
from .namespace import _Page
from .records import S_IFREG


class Versions(StoreBase):
    """A file inode holds its current version; older ones are V records, newest first."""

    def versioning(self, bucket: str) -> str | None:
        """None (never enabled), "Enabled" or "Suspended"."""
        return (self.get_inode(self.bucket_ino(bucket)) or {}).get("bkt", {}).get("ver")

    def key_versions(self, bucket: str, key: str) -> list[dict]:
        """A key's versions as stored (tags and all), the current one first, then the noncurrent ones newest first;
        [] if it has none. A directory marker ("a/b/") is one version, "null"."""
        try:
            parent, name, marker = self._resolve(bucket, key)
        except errors.NoSuchKey:
            return []
        if marker:
            rec = self.get_inode(parent) or {}
            return [{**rec["mk"], "vid": "null"}] if "mk" in rec else []
        ino = self._lookup(parent, name, False)
        cur = self.get_inode(ino) if ino is not None else None
        if cur is None or cur.get("t") != "f":
            return []
        return [cur] + [r for _, r in self._versions(ino)]

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

    @staticmethod
    def _delete_marker(cur: dict, ver: str, t: int, vid: str) -> dict:
        return {"t": "f", "dm": True, "vid": vid if ver == "Enabled" else "null", "mt": t, "ct": t,
                "mode": cur.get("mode", S_IFREG | 0o644), "size": 0}

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
