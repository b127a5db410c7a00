"""The mount's client block cache: file chunks in memory, then on local disk, with an eviction policy.

Policies:
  none  keep what fits, never evict. Every epoch reads every sample once in a new random order, so whatever LRU
        evicts is as likely to be needed next as what it keeps: it only churns. "none" serves the fitting part of
        the dataset from the cache in every epoch and fetches the rest, without wasting the cache on turnover.
  lru   evict the least recently used chunk (for working sets that do fit, or re-read hot files).
  off   no cache: every read goes to the gateway.

A chunk is named by (inode, ETag, index): new content has a new ETag, so a stale chunk is never served.

What the memory tier keeps is what the kernel's page cache can't be trusted with: small files (every sample of a
shuffled epoch) and chunks read at random offsets. A large file read front to back is the page cache's to keep
(the mount keeps it across opens); its chunks go to the disk tier only (put(memory=False)), see reader.py
_track_stream.
"""
from __future__ import annotations

import collections
import hashlib
import os
from pathlib import Path

POLICIES = ("none", "lru", "off")
Key = tuple[int, str, int]


class _Tier:
    """The byte budget and index of one tier; with lru=False nothing is ever evicted."""

    def __init__(self, capacity: int, lru: bool) -> None:
        self.capacity, self.lru, self.used = capacity, lru, 0
        self.index: collections.OrderedDict[Key, int] = collections.OrderedDict()

    def room_for(self, n: int) -> list[Key] | None:
        """Keys to evict so that n more bytes fit, or None when they can't fit under the policy."""
        if n > self.capacity:
            return None
        victims, free = [], self.capacity - self.used
        if free >= n:
            return victims
        if not self.lru:
            return None
        for k, size in self.index.items():
            victims.append(k)
            free += size
            if free >= n:
                return victims
        return None


class BlockCache:
    def __init__(self, policy: str = "none", mem_bytes: int = 256 << 20, disk_bytes: int = 0,
                 disk_dir: Path | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"cache policy must be one of {', '.join(POLICIES)}")
        self.policy = policy
        lru = policy == "lru"
        self._mem = _Tier(mem_bytes if policy != "off" else 0, lru)
        self._data: dict[Key, bytes] = {}
        self._disk = _Tier(disk_bytes if policy != "off" and disk_dir is not None else 0, lru)
        self._dir = disk_dir
        if self._disk.capacity:
            disk_dir.mkdir(parents=True, exist_ok=True)
        self.hits = self.misses = 0

    @property
    def enabled(self) -> bool:
        return self.policy != "off"

    def _path(self, key: Key) -> Path:
        ino, etag, idx = key
        return self._dir / f"{ino}-{hashlib.blake2b(etag.encode(), digest_size=8).hexdigest()}-{idx}"

    def __contains__(self, key: Key) -> bool:
        return key in self._data or key in self._disk.index

    def has_room(self, n: int) -> bool:
        """Would n more bytes be kept without evicting anything? (What a speculative fetch may use.)"""
        return self.enabled and any(t.capacity - t.used >= n for t in (self._mem, self._disk))

    def get(self, key: Key) -> bytes | None:
        data = self._data.get(key)
        if data is not None:
            if self._mem.lru:
                self._mem.index.move_to_end(key)
            self.hits += 1
            return data
        if key in self._disk.index:
            try:
                data = self._path(key).read_bytes()
            except OSError:
                self._forget_disk(key)
            else:
                if self._disk.lru:
                    self._disk.index.move_to_end(key)
                self.hits += 1
                return data
        self.misses += 1
        return None

    def put(self, key: Key, data: bytes, memory: bool = True) -> None:
        """Keep a chunk: in memory, else (or with memory=False, for what the page cache holds) on disk."""
        if not self.enabled or key in self._data or key in self._disk.index:
            return
        victims = self._mem.room_for(len(data)) if memory else None
        if victims is not None:
            for v in victims:
                self._spill(v)
            self._data[key] = data
            self._mem.index[key] = len(data)
            self._mem.used += len(data)
            return
        self._put_disk(key, data)

    def _spill(self, key: Key) -> None:
        """Move a chunk evicted from memory to disk (where the disk tier's policy takes it or not)."""
        data = self._data.pop(key)
        self._mem.used -= self._mem.index.pop(key)
        self._put_disk(key, data)

    def _put_disk(self, key: Key, data: bytes) -> None:
        victims = self._disk.room_for(len(data)) if self._disk.capacity else None
        if victims is None:
            return
        for v in victims:
            self._forget_disk(v)
        try:
            self._path(key).write_bytes(data)
        except OSError:
            return
        self._disk.index[key] = len(data)
        self._disk.used += len(data)

    def _forget_disk(self, key: Key) -> None:
        self._disk.used -= self._disk.index.pop(key, 0)
        try:
            os.unlink(self._path(key))
        except OSError:
            pass

    def drop(self, ino: int) -> None:
        """Forget every chunk of inode `ino` (its content changed through this mount)."""
        for k in [k for k in self._data if k[0] == ino]:
            del self._data[k]
            self._mem.used -= self._mem.index.pop(k)
        for k in [k for k in self._disk.index if k[0] == ino]:
            self._forget_disk(k)
