"""Ordered key-value stores: RocksKV (rocksdict, raw bytes mode) and MemoryKV for unit tests.

Both offer the same small interface: get/put/delete, an atomic write batch, and ordered range scans.
Keys and values are bytes; integers inside keys are big-endian so that scans come back sorted.
Opened with `bulk=True`, a store also has a second, separate key space for bulk data (`kv.bulk`), written a whole
sorted file at a time (see RocksBulk).
"""
from __future__ import annotations

import asyncio
import bisect
import itertools
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

import rocksdict

# the room a store that refused a write waits for before it is opened again: the open writes a new WAL and MANIFEST
REOPEN_FREE_BYTES = 16 << 20


class StorageError(Exception):
    """The storage engine failed: a RocksDB `Corruption` (a block checksum mismatch in one of its files), an I/O
    error, or a write refused after such a background error. Raised by reads (get, scan) and writes (put, delete,
    batch) in place of rocksdict's plain Exception, so that callers can tell a damaged store from a bug."""


def _engine_error(e: Exception) -> Exception:
    """rocksdict reports RocksDB's errors as plain Exception; anything more specific (TypeError...) is ours."""
    return StorageError(str(e)) if type(e) is Exception else e


def _iterate(it, start: bytes, end: bytes | None, limit: int | None, values: bool):
    """Keys (or (key, value) pairs) of a rocksdict iterator from `start`; RocksDB stops an iterator at a corrupt
    block as if the range ended there, so its status is checked at the end and a failure raises StorageError."""
    n = 0
    try:
        it.seek(start)
        while it.valid():
            k = it.key()
            if end is not None and k >= end:
                return
            yield (k, it.value()) if values else k
            n += 1
            if limit is not None and n >= limit:
                return
            it.next()
        it.status()
    except Exception as e:
        raise _engine_error(e) from None


class Batch(Protocol):
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...


class Bulk(Protocol):
    """Bulk key spaces, numbered by generation (see RocksBulk): `target()` is the one the next ingest goes to."""
    def target(self) -> int: ...
    def ingest(self, items, gen: int = 0) -> None: ...
    def get(self, key: bytes, gen: int = 0) -> bytes | None: ...
    def scan(self, start: bytes, end: bytes | None = None, gen: int = 0) -> Iterator[tuple[bytes, bytes]]: ...
    def drop(self, start: bytes, end: bytes, gen: int = 0) -> None: ...


class Space(Protocol):
    """A second key space written in the main one's batches (RocksSpace)."""
    handle: object  # b.put(key, value, column_family=handle) in a batch of the main key space

    def get(self, key: bytes) -> bytes | None: ...
    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]: ...


class KV(Protocol):
    bulk: Bulk | None
    chunks: Space | None

    def get(self, key: bytes) -> bytes | None: ...
    def put(self, key: bytes, value: bytes) -> None: ...
    def delete(self, key: bytes) -> None: ...
    def batch(self): ...
    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None, *,
             verify: bool = True) -> Iterator[tuple[bytes, bytes]]: ...
    def scan_keys(self, start: bytes, end: bytes | None = None) -> Iterator[bytes]: ...
    def flush(self) -> None: ...
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


MAX_WAL_MB = 256  # the WAL a store with the bulk and chunks spaces keeps at most (a flush of the family that holds the
# oldest file goes first)


def takes_direct_io(folder: Path) -> bool:
    """Whether files in `folder` open with O_DIRECT (not every file system takes it: tmpfs before Linux 6.6, some
    FUSE file systems); RocksDB would fail its first flush there."""
    probe = folder / ".direct-io-probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    os.close(fd)
    probe.unlink(missing_ok=True)
    return True


class RocksKV:
    """RocksDB through rocksdict in raw mode.

    Options chosen by measurement on this machine (bench/kv_options.py): no compression (block data is incompressible
    and compression cost CPU on every put), no blob files (blob files made 4 MiB reads several times slower), level
    compaction (universal cost more CPU per MB written), bloom filters for the point lookups, XXH3 block checksums,
    a 64 MiB write buffer, a DataNode's flushes and compactions past the page cache (`open(bulk=True)`), and the WAL
    written but not fsynced per batch: that survives kill -9 of the process, and an
    fsync per put would cap small writes at disk-flush rate (and hold the event loop for the fsync of a write made
    on it). What must survive a power loss is made durable by `WalSync` (group commit) after its write.
    """

    def __init__(self, db: rocksdict.Rdict, bulk: RocksBulk | None = None) -> None:
        self._db = db
        self.path = ""  # (open)
        # the engine's error that made it refuse a write ("": none since it was opened); RocksDB refuses every write
        # after one failed on an I/O error, even once the disk has room again, until the store is opened again
        self.refused = ""
        self._closing = threading.Lock()  # reopen() against what worker threads call (flush, checkpoint)
        self.chunks: RocksSpace | None = None
        self._wo = rocksdict.WriteOptions()
        self._wo.sync = False
        self._unverified = rocksdict.ReadOptions()
        self._unverified.set_verify_checksums(False)
        self.bulk = bulk

    @staticmethod
    def _options() -> rocksdict.Options:
        opts = rocksdict.Options(raw_mode=True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # point lookups of absent keys (new block ids, missing names) skip files
        # XXH3 for the table blocks: the wheel's CRC32C is the portable table-driven one, no SSE4.2 (bench/kv_write_path.py
        # --checksum: 4 MiB ingests 1.29-1.33 ms of CPU per MB against 1.92-2.03, 128 KiB batches 2.7-2.8 against 3.45,
        # a verified 1 MiB read 0.31 ms against 1.2). Each file names its checksum: stores written with CRC32C still open.
        table.set_checksum_type(rocksdict.ChecksumType.xxh3())
        opts.set_block_based_table_factory(table)
        return opts

    @classmethod
    def open(cls, path: Path | str, *, write_buffer_mb: int = 64, bulk: bool = False,
             statistics: bool = False) -> "RocksKV":
        """Open (or create) the store at `path`; `bulk=True` adds the bulk key space (a column family) and reads
        files through mmap: a 256 KiB value then costs one copy instead of a pread into a buffer plus a copy
        (bench/kv_write_path.py). `statistics=True` has RocksDB count its work (`statistics()`; costs some CPU)."""
        Path(path).mkdir(parents=True, exist_ok=True)
        opts = cls._options()
        if statistics:
            opts.enable_statistics()
        opts.create_if_missing(True)
        opts.set_write_buffer_size(write_buffer_mb << 20)
        opts.set_max_background_jobs(2)
        opts.increase_parallelism(2)
        if not bulk:
            kv = cls(rocksdict.Rdict(str(path), options=opts))
            kv._opened_with, kv.path = opts, str(path)
            return kv
        opts.create_missing_column_families(True)
        # the WAL is shared by the column families and a file is deleted once every one flushed past it; the metas'
        # family takes little and flushed only when RocksDB's default bound (4 x all write buffers) forced it, so a
        # DataNode kept ~1 GiB of WAL (every small block of the last ~1 GiB written) to replay at a restart
        opts.set_max_total_wal_size(MAX_WAL_MB << 20)
        opts.set_allow_mmap_reads(True)
        opts.set_advise_random_on_open(False)  # MADV_RANDOM made the first mmap read of an ingested file 3x dearer
        opts.set_max_open_files(RocksBulk.MAX_OPEN_FILES)
        # flushes and compactions write their tables past the page cache: while small blocks lived here their bytes
        # went into fresh page-cache pages twice or more (flush, then each compaction), and fresh pages are this
        # machine's dearest copy (bench/small_block_write.py); now the metas and jobs. Reads fill the page cache.
        opts.set_use_direct_io_for_flush_and_compaction(takes_direct_io(Path(path)))
        bulk_opts = RocksBulk.options(cls._options())
        names = [RocksBulk.CF] + [n for n in (rocksdict.Rdict.list_cf(str(path)) if (Path(path) / "CURRENT").exists()
                                              else []) if n.startswith(RocksBulk.CF + ".")]
        chunk_opts = cls._options()
        chunk_opts.set_write_buffer_size(write_buffer_mb << 20)
        db = rocksdict.Rdict(str(path), options=opts,
                             column_families={**{n: bulk_opts for n in names}, RocksSpace.CHUNKS: chunk_opts})
        kv = cls(db, RocksBulk(db, Path(str(path) + ".ingest"), cls._options(), bulk_opts, names))
        kv.chunks = RocksSpace(db, RocksSpace.CHUNKS)
        kv._opened_with, kv.path = opts, str(path)
        return kv

    def statistics(self) -> dict[str, int]:
        """RocksDB's tickers ("rocksdb.wal.synced": WAL syncs, ...) when opened with statistics=True, else {}."""
        out = {}
        for line in (self._opened_with.get_statistics() or "").splitlines():
            name, sep, rest = line.partition(" COUNT : ")
            if sep and " " not in rest.strip():
                out[name] = int(rest)
        return out

    def get(self, key: bytes) -> bytes | None:
        try:
            return self._db.get(key)
        except Exception as e:
            raise _engine_error(e) from None

    def _refusal(self, e: Exception) -> Exception:
        err = _engine_error(e)
        if isinstance(err, StorageError):
            self.refused = str(err) or "StorageError"
        return err

    def put(self, key: bytes, value: bytes) -> None:
        try:
            self._db.put(key, value, self._wo)
        except Exception as e:
            raise self._refusal(e) from None

    def delete(self, key: bytes) -> None:
        try:
            self._db.delete(key, self._wo)
        except Exception as e:
            raise self._refusal(e) from None

    @contextmanager
    def batch(self):
        wb = rocksdict.WriteBatch(raw_mode=True)
        yield wb
        if len(wb):
            try:
                self._db.write(wb, self._wo)
            except Exception as e:  # RocksDB refuses writes after a background error (a compaction met corruption)
                raise self._refusal(e) from None

    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None, *, verify: bool = True):
        """(key, value) pairs in [start, end) in key order; raises StorageError where the store is damaged.
        `verify=False` reads past a damaged block instead, without checking RocksDB's block checksums (to list
        what lies beyond it)."""
        yield from _iterate(self._db.iter() if verify else self._db.iter(self._unverified), start, end, limit, True)

    def scan_keys(self, start: bytes, end: bytes | None = None):
        yield from _iterate(self._db.iter(), start, end, None, False)

    def flush(self) -> None:
        """Write the WAL out and fsync it: every write made before the call is durable when it returns (rocksdict
        lets go of the GIL meanwhile, so other threads run)."""
        with self._closing:
            try:
                self._db.flush_wal(True)
            except Exception as e:
                raise self._refusal(e) from None

    @property
    def reopenable(self) -> bool:
        """It refused a write for an I/O error (a full disk...), which opening it again may cure; not for a
        `Corruption` (opening a damaged store may fail, and then it would not even serve reads any more)."""
        return self.refused.startswith("IO error")

    @property
    def ready_to_reopen(self) -> bool:
        """`reopenable`, and its disk has room again (REOPEN_FREE_BYTES): an open now should take writes."""
        return self.reopenable and shutil.disk_usage(self.path).free >= REOPEN_FREE_BYTES

    def reopen(self) -> None:
        """Close the store and open it again, for one that refused a write (`refused`): RocksDB then refuses every
        write, a full disk given room again included, until it is opened again, which recovers what its WAL holds
        (a write that failed is not there: its caller was told). Only a store without the bulk and chunks spaces
        (the NameNode's). Called from the thread that reads and writes (the event loop): no read runs meanwhile;
        if the open fails (no room yet), every call fails until a later reopen succeeds."""
        if self.bulk is not None or self.chunks is not None:
            raise ValueError("reopen: a store with the bulk or chunks space")
        with self._closing:
            try:
                self._db.close()
            except Exception:  # noqa: BLE001 -- it closes all the same ("Writer has previous error")
                pass
            try:
                self._db = rocksdict.Rdict(self.path, options=self._opened_with)
            except Exception as e:
                raise _engine_error(e) from None
        self.refused = ""

    def flush_memtables(self) -> None:
        """Write what the memtables hold (the main key space's and the chunks space's) to table files."""
        self._db.flush()
        if self.chunks is not None:
            self.chunks.flush()

    def checkpoint(self, path: Path | str) -> None:
        """A consistent copy of the store at `path` (a new folder): RocksDB hard-links its table files and copies
        the rest (a NameNode's peer rebuilds from it, namenode/ha/)."""
        with self._closing:
            rocksdict.Checkpoint(self._db).create_checkpoint(str(path))

    def close(self) -> None:
        if self.bulk is not None:
            self.bulk.close()
        if self.chunks is not None:
            self.chunks.close()
        try:
            self._db.close()
        except Exception:
            if not self.refused:  # (one that refused a write says so again: "Writer has previous error")
                raise


class RocksSpace:
    """A second key space of a RocksKV (a column family), written in the same atomic batches as the main one:
    `b.put(key, value, column_family=space.handle)` (and `b.delete`). DataNodes keep their small blocks' chunks in
    one (`CHUNKS`), under keys that only grow (each copy's arrival number, datanode/blockstore.SEQUENCED), so each
    flush writes a key range past the ones before and compaction only moves files; mixed with the metas and
    replication jobs in the default column family, every flushed file overlapped the whole store and compaction
    rewrote it. 20,000 blocks of 110 KiB in batches of 16 with their metas and jobs
    (2.1 GB): 0 bytes compacted against 3.6-4.0 GB, 0.24-0.26 ms of CPU per block against 0.38-0.45."""

    CHUNKS = "chunks"

    def __init__(self, db: rocksdict.Rdict, name: str) -> None:
        self._cf = db.get_column_family(name)
        self.handle = db.get_column_family_handle(name)

    def get(self, key: bytes) -> bytes | None:
        try:
            return self._cf.get(key)
        except Exception as e:
            raise _engine_error(e) from None

    def scan(self, start: bytes, end: bytes | None = None):
        yield from _iterate(self._cf.iter(), start, end, None, True)

    def flush(self) -> None:
        self._cf.flush()

    def close(self) -> None:
        self._cf = self.handle = None  # references to the column family hold the store open


class WalSync:
    """Group commit for a KV's unsynced writes: `await wal_sync()` returns once every write made before the call is
    on disk (the WAL fsynced by `kv.flush()` in a worker thread). Callers that arrive while a sync is under way share
    the next one, so N concurrent writers cost about two fsyncs, not N, and the event loop never waits for the disk.
    """

    def __init__(self, kv: KV) -> None:
        self._kv = kv
        self._next: asyncio.Future | None = None  # the sync the callers arriving now wait for
        self._runner: asyncio.Task | None = None
        self.syncs = 0  # fsyncs done; callers served / syncs = the group size

    async def __call__(self) -> None:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        fut = self._next
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())
        await asyncio.shield(fut)  # a caller that gives up does not cancel the others' sync

    async def _run(self) -> None:
        try:
            while self._next is not None:
                fut, self._next = self._next, None  # writes made before this point are covered by the sync below
                try:
                    await asyncio.to_thread(self._kv.flush)
                except Exception as e:  # noqa: BLE001 -- every waiter gets it
                    fut.set_exception(StorageError(f"WAL sync failed: {e}"))
                    fut.exception()  # waiters that gave up need not see it
                else:
                    fut.set_result(None)
                self.syncs += 1
        finally:
            self._runner = None


class RocksBulk:
    """The bulk key space of a RocksKV: column families filled only by ingesting whole SST files.

    Why: a 4 MiB block written through a write batch is copied into the WAL (whose CRC32C is RocksDB's portable,
    table-driven one in the rocksdict wheel), the memtable, a flushed L0 file and then every compaction level;
    measured 4.4 ms of CPU per MB written, ~60% of a replica's cost. Written as its own SST file (SstFileWriter,
    synced) and ingested (hard-linked, one MANIFEST edit), the same block costs 1.4 ms/MB and is never rewritten:
    its key range overlaps no other file, so it lands in the bottom level and stays there, one file per `ingest`.

    Generations: every ingest (and every drop's flush) builds a new version of its column family's file list, which
    costs RocksDB time in proportion to the files already there (`python bench/kv_write_path.py --files 12000`, 64
    KiB blocks: in one column family 1.75 ms of CPU per ingest over the first 2,000 files, 6.3 ms at 12,000, 11.6 ms
    per drop; 12,000 blocks of 4 MiB are only 48 GiB, so a full DataNode's writes would crawl). So the space is split
    in generations of FILES_PER_GEN files: generation 0 is the column family "bulk" (all a store from before
    generations has), generation g > 0 is "bulk.g", and ingests go to the newest until it holds FILES_PER_GEN files
    (`target()` opens the next one): 0.96-1.14 ms per ingest from the first file to the 12,000th, 2.5 ms per drop. A
    reader finds a block's generation in its meta.

    Automatic compactions are off here, so nothing ever merges those files. `drop(start, end, gen)` removes one
    ingested range: a range tombstone, a flush of that column family (its memtable only ever holds that tombstone) and
    a manual compaction of exactly that range, which deletes the file. Dropping one range at a time keeps each
    tombstone file as narrow as the data it deletes, so no live file is ever rewritten.
    """

    CF = "bulk"
    FILES_PER_GEN = 1000
    MAX_OPEN_FILES = 512  # one file per ingested block: keep the open table readers (fds, mmaps) bounded

    def __init__(self, db: rocksdict.Rdict, tmp: Path, writer_opts: rocksdict.Options, cf_opts: rocksdict.Options,
                 names: list[str]) -> None:
        self._db = db
        self._writer_opts = writer_opts
        self._cf_opts = cf_opts
        self._gens: dict[int, tuple[rocksdict.Rdict, object]] = {}
        for name in names:
            self._gens[self._gen_of(name)] = (db.get_column_family(name), db.get_column_family_handle(name))
        self._newest = max(self._gens)
        self._files = self._count(self._newest)
        self._wo = rocksdict.WriteOptions()
        self._wo.sync = False
        self._ro = rocksdict.ReadOptions()
        self._ro.set_verify_checksums(False)  # bulk values are block chunks with their own CRC32C, checked on every read
        self._ingest = rocksdict.IngestExternalFileOptions()
        self._ingest.set_move_files(True)
        shutil.rmtree(tmp, ignore_errors=True)  # files of an ingest that a crash interrupted
        tmp.mkdir(parents=True)
        self._tmp = tmp
        self._names = itertools.count(1)

    @classmethod
    def _gen_of(cls, name: str) -> int:
        return 0 if name == cls.CF else int(name[len(cls.CF) + 1:])

    @classmethod
    def _name(cls, gen: int) -> str:
        return cls.CF if gen == 0 else f"{cls.CF}.{gen}"

    def _count(self, gen: int) -> int:
        cf = self._gens[gen][0]
        return sum(cf.property_int_value(f"rocksdb.num-files-at-level{i}") or 0 for i in range(7))

    @staticmethod
    def options(opts: rocksdict.Options) -> rocksdict.Options:
        opts.set_disable_auto_compactions(True)
        opts.set_write_buffer_size(1 << 20)  # its memtable only ever holds a drop's range tombstone
        return opts

    def target(self) -> int:
        """The generation the next ingest goes to: the newest, or a new one once that one is full."""
        if self._files >= self.FILES_PER_GEN:
            gen = self._newest + 1
            try:
                cf = self._db.create_column_family(self._name(gen), self._cf_opts)
            except Exception as e:
                raise _engine_error(e) from None
            self._gens[gen] = (cf, self._db.get_column_family_handle(self._name(gen)))
            self._newest, self._files = gen, 0
        return self._newest

    def _cf(self, gen: int) -> rocksdict.Rdict:
        try:
            return self._gens[gen][0]
        except KeyError:
            raise StorageError(f"bulk generation {gen} is not in this store") from None

    def ingest(self, items, gen: int = 0) -> None:
        """Durably store `items`, (key, value) pairs in ascending key order, as one file of generation `gen`."""
        cf = self._cf(gen)
        path = str(self._tmp / f"{os.getpid()}-{next(self._names)}.sst")  # (next() of a count: one name per call,
        # whichever thread calls: a DataNode ingests in its worker thread, datanode/blockstore.py put_async)
        w = rocksdict.SstFileWriter(options=self._writer_opts)
        try:
            w.open(path)
            for k, v in items:
                w[k] = v
            w.finish()  # fsyncs the file
            cf.ingest_external_file([path], self._ingest)  # links it in, fsyncs it and the MANIFEST
        except Exception as e:
            raise _engine_error(e) from None
        finally:
            if os.path.exists(path):
                os.unlink(path)
        if gen == self._newest:
            self._files += 1  # (from a worker thread too: a count off by one against a drop's recount only moves
            # where the next generation starts, FILES_PER_GEN is no hard bound)

    def get(self, key: bytes, gen: int = 0) -> bytes | None:
        cf = self._cf(gen)
        try:
            return cf.get(key, read_opt=self._ro)
        except Exception as e:
            raise _engine_error(e) from None

    def scan(self, start: bytes, end: bytes | None = None, gen: int = 0):
        yield from _iterate(self._cf(gen).iter(self._ro), start, end, None, True)

    def drop(self, start: bytes, end: bytes, gen: int = 0) -> None:
        """Delete every key in [start, end) of generation `gen` and reclaim its space at once."""
        cf = self._cf(gen)
        wb = rocksdict.WriteBatch(raw_mode=True)
        wb.delete_range(start, end, column_family=self._gens[gen][1])
        self._db.write(wb, self._wo)
        cf.flush()
        cf.compact_range(start, end)
        if gen == self._newest:
            self._files = self._count(gen)

    def close(self) -> None:
        self._gens = {}


class MemoryBulk:
    """The bulk key space of a MemoryKV, in generations of `files_per_gen` ingests (as RocksBulk's)."""

    def __init__(self, files_per_gen: int = RocksBulk.FILES_PER_GEN) -> None:
        self.files_per_gen = files_per_gen
        self.gens: dict[int, MemoryKV] = {0: MemoryKV()}
        self._files = 0

    def target(self) -> int:
        if self._files >= self.files_per_gen:
            self.gens[len(self.gens)] = MemoryKV()
            self._files = 0
        return len(self.gens) - 1

    def ingest(self, items, gen: int = 0) -> None:
        with self.gens[gen].batch() as b:
            for k, v in items:
                b.put(k, v)
        if gen == len(self.gens) - 1:
            self._files += 1

    def get(self, key: bytes, gen: int = 0) -> bytes | None:
        return self.gens[gen].get(key)

    def scan(self, start: bytes, end: bytes | None = None, gen: int = 0):
        return self.gens[gen].scan(start, end)

    def drop(self, start: bytes, end: bytes, gen: int = 0) -> None:
        for k in list(self.gens[gen].scan_keys(start, end)):
            self.gens[gen].delete(k)


class _MemBatch:
    def __init__(self) -> None:
        self.ops: list[tuple[MemoryKV | None, bytes, bytes | None]] = []  # (space: None for the main one, key, value)

    def put(self, key: bytes, value: bytes, column_family: MemoryKV | None = None) -> None:
        self.ops.append((column_family, bytes(key), bytes(value)))

    def delete(self, key: bytes, column_family: MemoryKV | None = None) -> None:
        self.ops.append((column_family, bytes(key), None))


class MemoryKV:
    """A sorted in-memory KV with the RocksKV interface, for unit tests."""

    refused = ""  # (it never refuses a write)
    reopenable = ready_to_reopen = False

    def __init__(self, *, bulk: bool = False) -> None:
        self._keys: list[bytes] = []
        self._data: dict[bytes, bytes] = {}
        self.bulk = MemoryBulk() if bulk else None
        self.chunks = MemoryKV() if bulk else None  # RocksKV's chunks space: a MemoryKV is its own batch handle
        self.handle = self

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
        for space, k, v in b.ops:
            space = space or self
            if v is None:
                space.delete(k)
            else:
                space.put(k, v)

    def scan(self, start: bytes, end: bytes | None = None, limit: int | None = None, *, verify: bool = True):
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
