"""Ordered key-value stores: RocksKV (rocksdict, raw bytes mode) and MemoryKV for unit tests.

Both offer the same small interface: get/put/delete, an atomic write batch, and ordered range scans.
Keys and values are bytes; integers inside keys are big-endian so that scans come back sorted.
"""
from __future__ import annotations

import bisect
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

import rocksdict


class Batch(Protocol):
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...


class KV(Protocol):
    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def batch(self): ...
    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None) -> Iterator[tuple[bytes, bytes]]: ...
    def scan_keys(self, start: bytes, end: bytes | None = None) -> Iterator[bytes]: ...
    def close(self) -> None: ...


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no upper bound)."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None


class RocksKV:
    """RocksDB through rocksdict in raw mode.

    Options chosen by measurement on this machine (bench/kv_options.py): no compression (block data is incompressible
    and compression cost CPU on every put), no blob files (blob files made 4 MiB reads several times slower), level
    compaction (universal cost more CPU per MB written), bloom filters for the point lookups,
    a 64 MiB write buffer, and the WAL written but not fsynced per batch: it survives kill -9 of the process, and an
    fsync per put would cap small writes at disk-flush rate.
    """

    def __init__(self, db: rocksdict.Rdict) -> None:
        self._db = db
        self._wo = rocksdict.WriteOptions()
        self._wo.sync = False

    @classmethod
    def open(cls, path: Path | str, *, write_buffer_mb: int = 64) -> "RocksKV":
        Path(path).mkdir(parents=True, exist_ok=True)
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        opts.set_write_buffer_size(write_buffer_mb << 20)
        opts.set_max_background_jobs(2)
        opts.increase_parallelism(2)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # point lookups of absent keys (new block ids, missing names) skip files
        opts.set_block_based_table_factory(table)
        return cls(rocksdict.Rdict(str(path), options=opts))

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value, self._wo)

    def delete(self, key: bytes) -> None:
        self._db.delete(key, self._wo)

    @contextmanager
    def batch(self):
        wb = rocksdict.WriteBatch(raw_mode=True)
        yield wb
        if len(wb):
            self._db.write(wb, self._wo)

    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None):
        it = self._db.iter()
        it.seek(start)
        n = 0
        while it.valid():
            k = it.key()
            if end is not None and k >= end:
                return
            yield k, it.value()
            n += 1
            if limit is not None and n >= limit:
                return
            it.next()

    def scan_keys(self, start: bytes, end: bytes | None = None):
        it = self._db.iter()
        it.seek(start)
        while it.valid():
            k = it.key()
            if end is not None and k >= end:
                return
            yield k
            it.next()

    def flush(self) -> None:
        self._db.flush_wal(True)

    def close(self) -> None:
        self._db.close()


class _MemBatch:
    def __init__(self) -> None:
        self.ops: list[tuple[bytes, bytes | None]] = []

    def put(self, key: bytes, value: bytes) -> None:
        self.ops.append((bytes(key), bytes(value)))

    def delete(self, key: bytes) -> None:
        self.ops.append((bytes(key), None))


class MemoryKV:
    """A sorted in-memory KV with the RocksKV interface, for unit tests."""

    def __init__(self) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        if key not in self._data:
            bisect.insort(self._keys, key)
        self._data[key] = bytes(value)

    def delete(self, key: bytes) -> None:
        if self._data.pop(key, None) is not None:
            del self._keys[bisect.bisect_left(self._keys, key)]

    @contextmanager
    def batch(self):
        b = _MemBatch()
        yield b
        for k, v in b.ops:
            if v is None:
                self.delete(k)
            else:
                self.put(k, v)

    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None):
        i = bisect.bisect_left(self._keys, start)
        n = 0
        while i < len(self._keys):
            k = self._keys[i]
            if end is not None and k >= end:
                return
            yield k, self._data[k]
            n += 1
            if limit is not None and n >= limit:
                return
            # re-find position: the store may change between yields
            i = bisect.bisect_right(self._keys, k)

    def scan_keys(self, start: bytes, end: bytes | None = None):
        for k, _ in self.scan(start, end):
            yield k

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
