"""What every subject of the NameNode's state builds on: the KV store, counters, inodes and directory entries."""
from __future__ import annotations

from epochfs.common.kv import KV, prefix_end

from .. import keys
from .records import dec_record, enc_record


class StoreBase:
    """The subjects share one store (and MetaStore.execute, through which each applies its commands)."""
    kv: KV
    _counters: dict[bytes, int]

    def execute(self, cmd):
        raise NotImplementedError  # see MetaStore

    _enc = staticmethod(enc_record)
    _dec = staticmethod(dec_record)

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
