"""Blocks on a DataNode: large ones a file of their own, small ones back to back in pack files, each indexed in RocksDB
(its meta: size, CRC32C, where, each chunk's CRC32C) and checked on every read.

A read that finds this node's copy bad -- a chunk failing its CRC32C, a chunk missing, or the storage engine unable
to read it (RocksDB's `Corruption: block checksum mismatch` in one of its files, an I/O error) -- raises CorruptBlock
or NoSuchBlock, which every reader answers by trying another replica. The gateway reports what it finds to the
NameNode itself; what readers that can't report find (native clients' tokened reads, this node's own replication
pushes and its scrubber) is noted in `bad`, which the heartbeat reports; the NameNode then orders a good holder to
re-push the block (the rewrite here clears the note)."""
from __future__ import annotations

import asyncio
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import orjson

from epochfs.common import errors
from awscrt.checksums import combine_crc32c

from epochfs.common.blocks import all_zeros, crc32c, zeros
from epochfs.common.kv import KV, StorageError, WalSync, prefix_end, takes_direct_io
from epochfs.common.rpc import FileSpan
from epochfs.common.worker import PassStats, Worker

from . import keys

log = logging.getLogger("epochfs.datanode")

# Blocks are stored as 256 KiB chunks, each with its own CRC32C: a ranged read fetches and checks only the chunks it
# touches (a 1 MiB range of a 4 MiB block reads at most 1.25 MiB, not 4), and a bad chunk is found without reading
# the rest. Measured with bench/s3_bench.py: 1 MiB chunks cost 1.5 ms of DataNode CPU per random 1 MiB range.
CHUNK_SIZE = 256 << 10
# Blocks at least this large go to a file of their own (FILED; before, to the bulk key space as one ingested SST file
# each: no WAL, memtable, flush or compaction copies); smaller ones through a write batch, whose fixed cost is lower.
# The threshold was measured for the ingest (a file costs less, but every one waits for an fsync in the one writer
# thread and adds an inode): bench/kv_write_path.py, CPU per
# MB written, ingest / batch (its flushes and compactions included): 18.6 / 3.0 ms at 128 KiB, 3.3 / 4.4 at 1 MiB,
# 1.7 / 3.0 at 2 MiB, 1.4 / 3.9 at 4 MiB (more for batch as the LSM grows). Not 1 MiB: every ingest also waits for
# an fsync (~5-10 ms here), in the one ingest thread (put_async), and adds a file.
BULK_MIN = 2 << 20
# The smallest read sent from its file unread (read_unread): s3_bench.py's GET 128K measured 0.17-0.19 ms of DataNode
# CPU per GET sent so against 0.21-0.24 read and checked; below 64 KiB a sendfile's gain is a few us (not measured).
UNREAD_MIN = 64 << 10
TOMBSTONE_S = 600.0
PURGE_FILES = 1000  # files deleted per purge step at most (an unlink each)
BULK = b"\x01"  # layout byte after size and CRC in a meta whose chunks are in the bulk key space, then the
# generation (common/kv.RocksBulk) if not 0; a `pending` marker's value is the generation of the chunks it drops
SPACED = b"\x02"  # layout byte of a meta whose chunks are in the chunks key space (kv.chunks, common/kv.RocksSpace);
# a meta without a layout byte has them in the main key space (every small block before the chunks space)
SEQUENCED = b"\x03"  # layout byte of a meta whose chunks are in the chunks key space under the copy's arrival number
# (the 8 bytes after it; keys.seq_chunks), not its block id: a DataNode takes its own primaries and the replicas the
# other primaries push, block ids of three streams that interleave, so with block-id keys every flushed file overlapped
# the last ones and compaction rewrote them (`epochfs cp` of 10,000 files of 110 KiB: 825 MiB compacted per DataNode,
# 2.3-2.8 s of CPU); arrival numbers only grow, each flushed file lies past the others and compaction moves it
FILED = b"\x04"  # layout byte of a meta whose data is a plain file of its own (`_file_path`): then its arrival number
# (8 bytes) and the CRC32C of each chunk (4 bytes each); a file a put wrote or a delete left is named by a
# keys.doomed_file marker until its meta names it or `purge` deletes it.
# Why files and not an ingested SST (BULK, the layout before): `python bench/block_file_write.py` (256 blocks of 4 MiB,
# one thread), CPU per GiB written: SST 0.70-0.79 s user + 0.99-1.62 sys (three copies of the data on the way, XXH3,
# the MANIFEST edit; page faults of fresh buffers, fsyncs), 290-370 MB/s; files 0.15-0.20 + 0.34-0.44, 740-930 MB/s.
# RocksDB keeps what it is good at: the index (metas), small blocks, the replication queue.
PACKED = b"\x05"  # layout byte of a meta whose data lies in a pack file (`Packs`): then the pack's number (8 bytes),
# the offset there (8) and the CRC32C of each chunk (4 bytes each).
# Why packs and not RocksDB's chunks space (SEQUENCED, the layout before) for small blocks: there every byte went
# through the WAL (a CRC32C in software: the wheel has no SSE4.2 build, 21% of a DataNode's CPU under `epochfs cp`), the
# memtable and a flush; a pack takes it in one pwrite, with one fdatasync per group of batches
# (`python bench/small_block_write.py`).
IN_CHUNKS = -1  # where a SPACED or SEQUENCED block's chunks are (`_where`: None for the main key space, a bulk
# generation >= 0)
IN_FILE = -2  # (`_where`) a FILED block's data is its own file
IN_PACK = -3  # (`_where`) a PACKED block's data is in a pack file
ZEROED = b"\x06"  # layout byte of a meta of a large block whose bytes are all zeros: nothing else is stored, a read
# makes them. A file truncated longer through the mount, or written past its end, uploads its hole as blocks of zeros
# (the layout has no holes); `truncate -s 256M` in a mount stored 768 MiB on the DataNodes, and fsstress, which
# copies ranges to offsets scaled by st_blksize, filled this machine's disk (44 GB in 107 s). Ceph's BlueStore skips
# zero writes the same way (bluestore_zero_block_detection). Only large blocks (files): a small one costs a pack
# write, not a file and an fsync.
IN_ZERO = -4  # (`_where`) a ZEROED block: no data anywhere
PACK_BYTES = 256 << 20  # a pack takes blocks until this size, then the next one is started
PACK_SPARSE = 0.5  # a full pack whose stored copies fill less than this share of it is compacted: its copies are
# written again into the current pack, and the emptied pack deleted
# a compaction step runs on the event loop: it reads metas and copies, ~10 ms each at most
COMPACT_SCAN = 5_000  # metas read per compaction step (the index is scanned for the sparse pack's blocks)
COMPACT_BYTES = 8 << 20  # bytes rewritten per compaction step at most
INLINE_WRITE = 256 << 10  # a pack write of fewer bytes is made from the event loop through the page cache, a larger
# one in the ingest thread past it (O_DIRECT): a thread hop and a wait for the disk cost more than a few KiB's copy
DIRECT_ALIGN = 4096  # a write past the page cache (O_DIRECT) starts at a multiple of this and is as long as one
PACK_ALIGN = DIRECT_ALIGN  # so a pack written past the page cache puts every block at a multiple of it
FILE_DIRS = 256  # files spread over this many folders (by arrival number): no folder grows past a few thousand


def _in_bulk(meta: bytes | None) -> bool:
    return meta is not None and meta[12:13] == BULK


def _where(meta: bytes) -> int | None:
    """Where a stored block's chunks are: None (the main key space), IN_CHUNKS, IN_FILE, IN_PACK, IN_ZERO (nowhere),
    or its bulk generation."""
    layout = meta[12:13]
    return _meta_gen(meta) if layout == BULK else IN_CHUNKS if layout in (SPACED, SEQUENCED) else \
        IN_FILE if layout == FILED else IN_PACK if layout == PACKED else IN_ZERO if layout == ZEROED else None


def _held(meta: bytes | None) -> int:
    """The bytes a stored copy holds on this node (`used`): its size, nothing for a ZEROED block or no copy."""
    return 0 if meta is None or meta[12:13] == ZEROED else int.from_bytes(meta[:8], "big")


def chunk_prefix(block_id: int, meta: bytes) -> bytes:
    """The prefix of a stored block's chunk keys (in the key space `_where` names; a FILED block's: its arrival
    number, which names its file; a PACKED block's: its pack and offset)."""
    if meta[12:13] == PACKED:
        return meta[13:29]
    return keys.seq_chunks(int.from_bytes(meta[13:21], "big")) if meta[12:13] in (SEQUENCED, FILED) else \
        keys.chunks_of(block_id)


def _loc(block_id: int, meta: bytes) -> tuple[int | None, bytes]:
    """Where a stored block's chunks are: (key space, key prefix)."""
    return _where(meta), chunk_prefix(block_id, meta)


def _gen(raw: bytes | None) -> int:
    """The bulk generation a meta (after its 13 bytes) or a pending marker (all of it) names; 0 if none."""
    return int.from_bytes(raw, "big") if raw else 0


def _gen_bytes(gen: int) -> bytes:
    return gen.to_bytes(4, "big") if gen else b""


def _meta_gen(meta: bytes) -> int:
    return _gen(meta[13:17])


class BlockStore:
    def __init__(self, kv: KV, chunk_size: int = CHUNK_SIZE, bulk_min: int = BULK_MIN, *,
                 files: Path | None = None) -> None:
        """`files`: the folder of the large blocks' files (FILED) and of the packs of small ones (PACKED, in its
        `packs` folder); without it (stores in memory, tests) every block goes through the write batch. Blocks a
        store wrote before in the bulk key space (BULK) or the chunks space (SEQUENCED, SPACED) are read and purged."""
        self.kv = kv
        self.bulk = kv.bulk
        self.chunks = kv.chunks
        self.chunk_size = chunk_size
        self.bulk_min = bulk_min
        self.used = 0
        self.count = 0
        self._tombstones: dict[int, float] = {}
        self.bad: set[int] = set()  # blocks whose copy here failed a read nobody reports, for the heartbeat to
        # why the storage engine refused the last write ("": it takes writes), for the heartbeat: the NameNode
        # places no new copies here while it is set (reads go on), until a write succeeds again or a restart
        self.write_error = ""
        # put_async: the bulk blocks whose file is being written, and the one thread that writes them (in arrival
        # order: a second thread would only share the same disk and two cores)
        self._storing: dict[int, asyncio.Future] = {}
        self._ingester = ThreadPoolExecutor(1, thread_name_prefix="ingest")
        # The replication queue, mirrored in memory: RocksDB keeps it durable, but every job completes by a delete,
        # and scanning the range through those tombstones cost each idle DataNode ~8 ms of CPU per second.
        self._jobs: dict[tuple[int, int], dict] = {
            (int.from_bytes(k[1:5], "big"), int.from_bytes(k[5:], "big")): orjson.loads(v)
            for k, v in self._scan_past_damage(keys.REPL, prefix_end(keys.REPL))}
        top = 0
        live: dict[int, int] = {}  # pack -> bytes of the copies stored in it
        for _, v in self._scan_past_damage(keys.METAS, prefix_end(keys.METAS)):
            self.used += _held(v)
            self.count += 1
            if v[12:13] in (SEQUENCED, FILED):
                top = max(top, int.from_bytes(v[13:21], "big"))
            elif v[12:13] == PACKED:
                pack = int.from_bytes(v[13:21], "big")
                live[pack] = live.get(pack, 0) + int.from_bytes(v[:8], "big")
        for k, _ in self._scan_past_damage(keys.DOOMED_FILES, prefix_end(keys.DOOMED_FILES)):
            top = max(top, int.from_bytes(k[1:], "big"))  # a file not deleted yet keeps its number
        # the next arrival number: past every stored copy's (a deleted copy's chunks went with its meta, in one batch)
        self._seq = top + 1
        self.files = files
        self.packs: Packs | None = None
        # large blocks' files and packs written past the page cache where the file system takes it (write_file,
        # Packs.write), through one buffer (both are written by the ingest thread)
        self._direct: DirectWriter | None = None
        if files is not None:
            for i in range(FILE_DIRS):
                (files / f"{i:02x}").mkdir(parents=True, exist_ok=True)
            if takes_direct_io(files):
                self._direct = DirectWriter(4 << 20)
            self.packs = Packs(files / "packs", live, self._direct)
            _fsync_dir(files)
            _fsync_dir(files.parent)
        # `await store.synced()` after a put: the block is on disk (group commit): the packs written, then the WAL
        self.synced = WalSync(_Durable(kv, self.packs))
        self._compacting: int | None = None  # the pack being compacted
        self._compact_from = 0  # the block id its index scan goes on from

    def close(self) -> None:
        """Close the packs' files (the store's KV is its owner's to close)."""
        if self.packs is not None:
            self.packs.close()
        self._ingester.shutdown()
        if self._direct is not None:
            self._direct.close()

    def _meta(self, block_id: int) -> tuple[int, int, int | None, bytes, bytes]:
        """(size, crc, where its chunks are: see `_where`, their key prefix, the meta) of a stored block."""
        try:
            raw = self.kv.get(keys.meta(block_id))
        except StorageError as e:
            raise self._damaged(block_id, e) from None
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is not stored here")
        return (int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:12], "big"), _where(raw),
                chunk_prefix(block_id, raw), raw)

    def put(self, block_id: int, data, crc: int, secondaries: list[tuple[int, str]] = (), *,
            jobs_due_in: float = 0.0) -> None:
        """Store a block and its replication jobs in one atomic batch; raises CorruptBlock if `crc` doesn't match.
        On return the block survives a kill of the process; `await self.synced()` then makes it survive a power
        loss too (its WAL fsynced; a large block's file and its folder are fsynced by write_file).

        A block of at least `bulk_min` bytes is first written to a file of its own under a `doomed_file` marker; the
        batch with its meta removes the marker, so a crash in between leaves a file for `purge` to delete.
        `jobs_due_in` delays the jobs: the caller pushes the block from memory right away and the queued jobs are
        the durable fallback if that push fails or the process dies."""
        mv = memoryview(data)
        if self.packs is not None and not self._large(len(mv)):
            _raise_first(self.put_many([(block_id, mv, crc, secondaries)], jobs_due_in=jobs_due_in), block_id)
            return
        zero = self._large(len(mv)) and all_zeros(mv)
        crcs, old, seq = self._begin(block_id, mv, crc, zero)
        if seq is not None:
            self._write_large(block_id, mv, seq)
        self._finish(block_id, mv, crc, crcs, old, seq, secondaries, jobs_due_in, zero)

    async def put_async(self, block_id: int, data, crc: int, secondaries: list[tuple[int, str]] = (), *,
                        jobs_due_in: float = 0.0) -> None:
        """`put`, with a large block's file written and fsynced in a worker thread (the GIL is let go meanwhile), so
        that the event loop receives, sends and serves reads meanwhile: inline, the ~4 MiB file's page-cache copy and
        fsyncs held a DataNode's loop ~27 ms per block under a `dd` through the mount (measured with the SST files).

        The rest runs on the loop, as in `put`. Until the batch is written: another put of the same block waits for
        this one; `purge` leaves its file alone; a delete of it wins (as a delete after the put would): the batch
        is not written and `purge` deletes the file."""
        mv = memoryview(data)
        if not self._large(len(mv)):
            _raise_first(await self._store_small([(block_id, mv, crc, secondaries)], jobs_due_in=jobs_due_in),
                         block_id)
            return
        loop = asyncio.get_running_loop()
        while (busy := self._storing.get(block_id)) is not None:
            await asyncio.wait([busy])
        done = self._storing[block_id] = loop.create_future()
        ingest = None
        try:
            since = time.monotonic()
            zero = all_zeros(mv)
            crcs, old, seq = self._begin(block_id, mv, crc, zero)
            if not zero:
                ingest = loop.run_in_executor(self._ingester, self._write_large, block_id, mv, seq)
                await asyncio.shield(ingest)
                if self._tombstones.get(block_id, 0.0) >= since:
                    return  # deleted meanwhile: its file goes with the pending marker (purge)
            self._finish(block_id, mv, crc, crcs, old, seq, secondaries, jobs_due_in, zero)
        finally:
            if ingest is None or ingest.done():
                self._stored(block_id, done)
            else:  # the caller was cancelled while the file is written: purge leaves it alone until it is
                ingest.add_done_callback(lambda _: self._stored(block_id, done))

    def _stored(self, block_id: int, done: asyncio.Future) -> None:
        del self._storing[block_id]
        done.set_result(None)

    def _large(self, n: int) -> bool:
        """Does a block of `n` bytes go to a file of its own, not through the write batch?"""
        return n >= self.bulk_min and self.files is not None

    def _begin(self, block_id: int, mv: memoryview, crc: int,
               zero: bool = False) -> tuple[list[int], bytes | None, int | None]:
        """A put's first step: the chunks' CRC32Cs (CorruptBlock if they don't make `crc`), the meta of the copy it
        replaces, and for a large block (not `zero`: ZEROED, no file) the copy number of its file, under a marker
        that has `purge` delete the file unless the put's batch removes the marker."""
        crcs = self._chunk_crcs(block_id, mv, crc)
        try:
            old = self.kv.get(keys.meta(block_id))
        except StorageError:  # the copy being replaced is unreadable: written over as if absent
            old = None
        if zero or not self._large(len(mv)):
            return crcs, old, None
        self._seq += 1
        seq = self._seq - 1
        self.kv.put(keys.doomed_file(seq), block_id.to_bytes(8, "big"))
        return crcs, old, seq

    def _write_large(self, block_id: int, mv: memoryview, seq: int) -> None:
        """Write a large block's file, durably (run in the ingest thread by put_async)."""
        path = self._file_path(block_id, seq)
        try:
            write_file(path, mv, self._direct)
        except OSError as e:
            raise StorageError(f"writing block {block_id}'s file {path}: {e}") from None

    def _file_path(self, block_id: int, seq: int) -> Path:
        return block_file(self.files, block_id, seq)

    def _finish(self, block_id: int, mv: memoryview, crc: int, crcs: list[int], old: bytes | None, seq: int | None,
                secondaries, jobs_due_in: float, zero: bool = False) -> None:
        """A put's last step: the batch with the block's meta (and its chunks, unless they went to file number `seq`
        or the block is all `zero`s), the replication jobs, the counts."""
        n = len(mv)
        if seq is not None:
            meta = n.to_bytes(8, "big") + crc.to_bytes(4, "big") + FILED + seq.to_bytes(8, "big") + \
                b"".join(c.to_bytes(4, "big") for c in crcs)
        elif zero:
            meta = n.to_bytes(8, "big") + crc.to_bytes(4, "big") + ZEROED
        else:
            meta = self._small_meta(n, crc)
        with self.kv.batch() as b:
            b.put(keys.meta(block_id), meta)
            if seq is not None:
                b.delete(keys.doomed_file(seq))
            elif not zero:
                self._put_chunks(b, self._chunk_items(chunk_prefix(block_id, meta), mv, crcs))
            freed = self._forget_chunks(b, block_id, old) \
                if old is not None and _loc(block_id, old) != _loc(block_id, meta) else None  # a copy stored elsewhere
            now = time.time()
            jobs = {(target, block_id): {"a": addr, "n": 0, "due": now + jobs_due_in, "t": now}
                    for target, addr in secondaries}
            for (target, _), job in jobs.items():
                b.put(keys.repl(target, block_id), orjson.dumps(job))
        self._jobs.update(jobs)
        self._freed([freed])
        self.bad.discard(block_id)  # a good copy now
        self.used += _held(meta) - _held(old)
        self.count += old is None

    def _chunk_crcs(self, block_id: int, mv: memoryview, crc: int) -> list[int]:
        """The CRC32C of each chunk of a block; raises CorruptBlock if the data doesn't match `crc`."""
        n, cs = len(mv), self.chunk_size
        chunk_crcs = [crc32c(mv[i:i + cs]) for i in range(0, n, cs)]
        whole = 0
        for i, c in enumerate(chunk_crcs):
            whole = combine_crc32c(whole, c, min(cs, n - i * cs)) if i else c
        if whole != crc or (n == 0 and crc != 0):
            raise errors.CorruptBlock(f"block {block_id}: data does not match its crc32c")
        return chunk_crcs

    def _chunk_items(self, prefix: bytes, mv: memoryview, crcs: list[int]) -> list[tuple[bytes, bytes]]:
        """The (key, value) chunks of a block to store under key `prefix`, each its CRC32C and its bytes."""
        cs = self.chunk_size
        return [(prefix + i.to_bytes(4, "big"), c.to_bytes(4, "big") + mv[i * cs:(i + 1) * cs])
                for i, c in enumerate(crcs)]

    def _small_meta(self, n: int, crc: int) -> bytes:
        """The meta of a new small block copy: in the chunks key space under the next arrival number where the
        store has that space, else in the main key space."""
        meta = n.to_bytes(8, "big") + crc.to_bytes(4, "big")
        if self.chunks is None:
            return meta
        self._seq += 1
        return meta + SEQUENCED + (self._seq - 1).to_bytes(8, "big")

    def put_many(self, blocks: list[tuple[int, memoryview, int, list[tuple[int, str]]]], *,
                 jobs_due_in: float = 0.0) -> dict[int, str]:
        """Store many small blocks, each (id, data, crc, secondaries), with their replication jobs in one atomic
        write batch: their data first in the current pack, fdatasynced here (a store without packs: the chunks
        through the batch). Returns the error class of each block (by index) not stored: its data doesn't match its
        CRC. `store_many` (`_store_small`) is the same with the pack's fdatasync left to `synced`, shared with
        concurrent writers."""
        errs, small = self._checked_blocks(blocks)
        region = self._pack_write(small)
        try:
            if region is not None:
                self.packs.flush()
            self._commit(small, region, jobs_due_in)
        finally:
            self._pack_done(region)
        return errs

    def _checked_blocks(self, blocks) -> tuple[dict[int, str], list[tuple[int, memoryview, int, list[int], list]]]:
        """(the error class of each block by index whose data doesn't match its CRC, the others as (id, data, crc,
        chunk CRCs, secondaries))."""
        errs: dict[int, str] = {}
        small = []
        for i, (bid, data, crc, secondaries) in enumerate(blocks):
            mv = memoryview(data)
            try:
                small.append((bid, mv, crc, self._chunk_crcs(bid, mv, crc), secondaries))
            except errors.CorruptBlock as e:
                errs[i] = type(e).__name__
        return errs, small

    def _pack_write(self, small) -> tuple[int, list[int]] | None:
        """Write the blocks' data back to back at the end of the current pack: (the pack, each block's offset);
        None where the store keeps no packs. Until `_pack_done`, the pack is not deleted."""
        if self.packs is None or not small:
            return None
        region = self._pack_reserve(small)
        try:
            self.packs.write(region[0], region[1][0], [mv for _, mv, _, _, _ in small])
        except BaseException:
            self._pack_done(region)
            raise
        return region

    def _pack_reserve(self, small) -> tuple[int, list[int]]:
        """A place at the end of the current pack for the blocks' data back to back: (the pack, each block's
        offset)."""
        pack, off = self.packs.reserve(sum(len(mv) for _, mv, _, _, _ in small))
        offsets = []
        for _, mv, _, _, _ in small:
            offsets.append(off)
            off += len(mv)
        return pack, offsets

    def _pack_done(self, region: tuple[int, list[int]] | None) -> None:
        if region is not None:
            self.packs.inflight[region[0]] -= 1

    def _commit(self, small, region: tuple[int, list[int]] | None, jobs_due_in: float, *, since: float | None = None,
                expect: dict[int, bytes] | None = None) -> None:
        """The batch of a small-block write: each block's meta (naming its place in `region`, else its chunks go
        into the batch), its replication jobs, the copy it replaces forgotten; then the counts. Skipped: a block
        deleted after `since` (a delete that came while its data was written wins, as one after the write would),
        and one whose meta is no longer `expect[id]` (compaction: the block was deleted or written again)."""
        now = time.time()
        jobs, freed, stored = {}, [], []
        with self.kv.batch() as b:
            for j, (bid, mv, crc, crcs, secondaries) in enumerate(small):
                if since is not None and self._tombstones.get(bid, -1.0) >= since:
                    continue
                try:
                    old = self.kv.get(keys.meta(bid))
                except StorageError:  # the copy being replaced is unreadable: written over as if absent
                    old = None
                if expect is not None and old != expect[bid]:
                    continue
                if region is not None:
                    meta = len(mv).to_bytes(8, "big") + crc.to_bytes(4, "big") + PACKED + \
                        region[0].to_bytes(8, "big") + region[1][j].to_bytes(8, "big") + \
                        b"".join(c.to_bytes(4, "big") for c in crcs)
                    b.put(keys.meta(bid), meta)
                else:
                    meta = self._small_meta(len(mv), crc)
                    b.put(keys.meta(bid), meta)
                    self._put_chunks(b, self._chunk_items(chunk_prefix(bid, meta), mv, crcs))
                if old is not None and _loc(bid, old) != _loc(bid, meta):
                    freed.append(self._forget_chunks(b, bid, old))
                for target, addr in secondaries:
                    job = jobs[(target, bid)] = {"a": addr, "n": 0, "due": now + jobs_due_in, "t": now}
                    b.put(keys.repl(target, bid), orjson.dumps(job))
                stored.append((bid, len(mv), old))
        self._jobs.update(jobs)
        self._freed(freed)
        if region is not None:
            self.packs.live[region[0]] += sum(n for _, n, _ in stored)
        for bid, n, old in stored:
            self.bad.discard(bid)  # a good copy now
            self.used += n - _held(old)
            self.count += old is None

    def _freed(self, freed: list[tuple[int, int] | None]) -> None:
        """Count the pack bytes that forgotten copies (`_forget_chunks`' answers) no longer hold, once their batch
        is written."""
        for f in freed:
            if f is not None:
                self.packs.live[f[0]] -= f[1]

    async def _store_small(self, blocks, *, jobs_due_in: float = 0.0,
                           expect: dict[int, bytes] | None = None) -> dict[int, str]:
        """`put_many` with the pack written in the ingest thread and the batch written once it is done; the pack's
        fdatasync comes with the WAL's, in `synced` (shared with the writes made meanwhile). Until then the meta may
        name data that a power cut loses: the copy is not acknowledged yet, and a read would find its CRC32C wrong.
        A compaction (`expect`) syncs the pack before its batch: the copy it moves is acknowledged."""
        if self.packs is None:
            return self.put_many(blocks, jobs_due_in=jobs_due_in)
        since = time.monotonic()
        errs, small = self._checked_blocks(blocks)
        if not small:
            return errs
        if sum(len(mv) for _, mv, _, _, _ in small) < INLINE_WRITE:
            region = self._pack_write(small)
            write = asyncio.get_running_loop().create_future()
            write.set_result(None)
        else:
            region = self._pack_reserve(small)
            write = asyncio.get_running_loop().run_in_executor(
                self._ingester, self.packs.write, region[0], region[1][0], [mv for _, mv, _, _, _ in small])
        try:
            await asyncio.shield(write)
            if expect is not None:
                await self.synced()
            self._commit(small, region, jobs_due_in, since=since, expect=expect)
        finally:
            if write.done():
                self._pack_done(region)
            else:  # the caller was cancelled while the thread writes: the pack stays until it is done
                write.add_done_callback(lambda _: self._pack_done(region))
        return errs

    async def store(self, block_id: int, data, crc: int, secondaries: list[tuple[int, str]] = (), *,
                    jobs_due_in: float = 0.0) -> None:
        """`put_async`, noting in `write_error` whether the storage engine takes writes. One it refuses (RocksDB after
        a background error: a corrupt file met by a compaction, a full or failing disk) raises Unavailable, so that
        the writer goes to another node and a primary's push is retried later."""
        with self._engine_write():
            await self.put_async(block_id, data, crc, secondaries, jobs_due_in=jobs_due_in)

    async def store_many(self, blocks: list[tuple[int, memoryview, int, list[tuple[int, str]]]], *,
                         jobs_due_in: float = 0.0) -> dict[int, str]:
        """The small blocks in one pack write and one batch (`_store_small`) and `put_async` for each large one,
        noting in `write_error` whether the storage engine takes writes (as `store`); the error class of each
        block (by index) not stored."""
        bulk = [i for i, (_, data, _, _) in enumerate(blocks) if self._large(len(data))]
        is_bulk = set(bulk)
        small = [i for i in range(len(blocks)) if i not in is_bulk]
        errs: dict[int, str] = {}
        with self._engine_write():
            for i in bulk:
                bid, data, crc, secondaries = blocks[i]
                try:
                    await self.put_async(bid, data, crc, secondaries, jobs_due_in=jobs_due_in)
                except errors.CorruptBlock as e:
                    errs[i] = type(e).__name__
            if small:
                errs.update({small[j]: e for j, e in (await self._store_small(
                    [blocks[i] for i in small], jobs_due_in=jobs_due_in)).items()})
        return errs

    @contextmanager
    def _engine_write(self):
        """A write to the storage engine: a refusal sets `write_error` and raises Unavailable; a success clears it."""
        try:
            yield
        except StorageError as e:
            if not self.write_error:
                log.error("the store refuses writes: %s", e)
            self.write_error = str(e)[:500] or type(e).__name__
            raise errors.Unavailable(f"this DataNode's store refuses writes: {e}") from None
        self.write_error = ""

    def probe_writes(self) -> str:
        """Whether the store takes writes again after it refused one (`write_error`): a file written and synced where
        blocks are, and a key put, deleted and synced in the engine. "" when they went through (a full disk given
        room again: the NameNode then places copies here again), else the part that refused: "files", or "engine"
        (RocksDB, which after a failed WAL write refuses every write until it is opened again: a restart, see
        Heartbeat.probe). Blocking (it waits for the disk): run in a thread."""
        part = "files"
        try:
            if self.files is not None:
                probe = self.files / ".probe"
                write_file(probe, bytes(DIRECT_ALIGN))
                probe.unlink()
            part = "engine"
            self.kv.put(keys.PROBE, b"")
            self.kv.delete(keys.PROBE)
            self.kv.flush()
        except (OSError, StorageError) as e:
            log.debug("the store still refuses writes (%s): %s", part, e)
            return part
        return ""

    def _put_chunks(self, b, chunks) -> None:
        if self.chunks is None:
            for k, v in chunks:
                b.put(k, v)
        else:
            for k, v in chunks:
                b.put(k, v, column_family=self.chunks.handle)

    def _forget_chunks(self, b, block_id: int, meta: bytes) -> tuple[int, int] | None:
        """In batch `b`: delete a stored block's chunks, or for a bulk or FILED block mark them for `purge` (the block
        is gone for readers at once; its file goes with the Purger's next step). A PACKED copy needs nothing in the
        batch: returned is (its pack, its size), for `_freed` once the batch is written."""
        where, prefix = _loc(block_id, meta)
        if where == IN_ZERO:
            return None
        if where == IN_PACK:
            return int.from_bytes(meta[13:21], "big"), int.from_bytes(meta[:8], "big")
        if where == IN_FILE:
            b.put(keys.doomed_file(int.from_bytes(meta[13:21], "big")), block_id.to_bytes(8, "big"))
            return
        if where is not None and where >= 0:
            b.put(keys.pending(block_id), _gen_bytes(where))
            return
        space = {} if where is None else {"column_family": self.chunks.handle}
        for i in range(max(1, -(-int.from_bytes(meta[:8], "big") // self.chunk_size))):
            b.delete(prefix + i.to_bytes(4, "big"), **space)

    def _space(self, where: int | None):
        """(get, scan) of the key space a block's chunks are in (`where`: see `_where`)."""
        if where is None:
            return self.kv.get, self.kv.scan
        if where == IN_CHUNKS:
            return self.chunks.get, self.chunks.scan
        return partial(self.bulk.get, gen=where), partial(self.bulk.scan, gen=where)

    def _chunk(self, block_id: int, index: int, where: int | None, prefix: bytes) -> memoryview:
        raw = self._space(where)[0](prefix + index.to_bytes(4, "big"))
        if raw is None:
            raise errors.NoSuchBlock(f"block {block_id} is missing chunk {index}")
        return _checked(block_id, index, raw)

    def _chunks(self, block_id: int, first: int, stop: int, where: int | None, prefix: bytes) -> Iterator[memoryview]:
        """Chunks first..stop-1 of a block, each CRC-checked. Several are read in one ordered scan: one index lookup
        and one iterator instead of a lookup per chunk, 125 instead of 180 us for the five 256 KiB chunks of a 1 MiB
        range (bench/s3_bench.py's RANGE 1M) in the bulk space; a single chunk is a point read."""
        if stop - first == 1:
            yield self._chunk(block_id, first, where, prefix)
            return
        expect = first
        start, end = prefix + first.to_bytes(4, "big"), prefix + stop.to_bytes(4, "big")
        for k, raw in self._space(where)[1](start, end):
            if int.from_bytes(k[len(prefix):], "big") != expect:
                break
            yield _checked(block_id, expect, raw)
            expect += 1
        if expect != stop:
            raise errors.NoSuchBlock(f"block {block_id} is missing chunk {expect}")

    def read(self, block_id: int, offset: int = 0, length: int = -1) -> list[memoryview]:
        """Bytes [offset, offset+length) of a block as a list of buffers (no copy), every chunk read CRC-checked.
        A bad copy raises CorruptBlock (or NoSuchBlock for a missing chunk)."""
        return self._read(block_id, self._meta(block_id), offset, length)

    def _read(self, block_id: int, found: tuple, offset: int, length: int) -> list[memoryview]:
        """`read`, given the block's `_meta`."""
        size, _, where, prefix, raw = found
        end = size if length < 0 else min(size, offset + length)
        if offset >= end:
            return []
        if where == IN_ZERO:
            return [zeros(end - offset)]
        if where in (IN_FILE, IN_PACK):
            return self._read_checked(block_id, raw, *self._place_in_file(block_id, where, raw), offset, end)
        cs = self.chunk_size
        out = []
        first = offset // cs
        try:
            for i, data in enumerate(self._chunks(block_id, first, (end - 1) // cs + 1, where, prefix), first):
                lo, hi = max(offset - i * cs, 0), min(end - i * cs, len(data))
                out.append(data[lo:hi] if (lo, hi) != (0, len(data)) else data)
        except StorageError as e:
            raise self._damaged(block_id, e) from None
        return out

    def read_unread(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[list, list[int] | None]:
        """`read`, except that a piece of a block in a file or a pack from a chunk boundary to another or to the
        block's end, of UNREAD_MIN bytes or more, comes back unread, as a FileSpan for the RPC server's sendfile,
        with the CRC32C of each of its chunks for the reader to check: ([span], crcs). Anything else: (read's
        buffers, None)."""
        found = self._meta(block_id)
        size, _, where, _, raw = found
        end = size if length < 0 else min(size, offset + length)
        cs = self.chunk_size
        if where not in (IN_FILE, IN_PACK) or end - offset < UNREAD_MIN or offset % cs or (end % cs and end != size):
            return self._read(block_id, found, offset, length), None
        fd, base, crcs = self._open_chunks(block_id, where, raw, offset // cs, (end - 1) // cs + 1, end)
        return [FileSpan(fd, base + offset, end - offset)], crcs

    def open_local(self, block_id: int, offset: int = 0, length: int = -1) -> tuple[int | None, int, int, int,
                                                                                         list[int]] | None:
        """Where bytes [offset, offset+length) of a block lie, for a reader on this machine that reads them itself
        (datanode/localread.py): (an open descriptor of the file holding them, where the chunks they touch start in
        it, the block offset of that first chunk, how many bytes those chunks are, each one's CRC32C). A ZEROED
        block: (None, 0, offset, n, []) (no file: the reader makes the zeros). None for a block whose chunks are in
        RocksDB (read it over RPC). NoSuchBlock / CorruptBlock as `read`. The descriptor is the caller's to close."""
        size, _, where, _, raw = self._meta(block_id)
        end = size if length < 0 else min(size, offset + length)
        if offset >= end:
            return None, 0, offset, 0, []
        if where == IN_ZERO:
            return None, 0, offset, end - offset, []
        if where not in (IN_FILE, IN_PACK):
            return None
        cs = self.chunk_size
        first, stop = offset // cs, (end - 1) // cs + 1
        lo, hi = first * cs, min(size, stop * cs)
        fd, base, crcs = self._open_chunks(block_id, where, raw, first, stop, hi)
        return fd, base + lo, lo, hi - lo, crcs

    def _open_chunks(self, block_id: int, where: int, meta: bytes, first: int, stop: int,
                     end: int) -> tuple[int, int, list[int]]:
        """(an open descriptor of a FILED or PACKED block's file, where the block starts in it, the CRC32Cs of
        chunks [first, stop)), the file checked to hold the block's bytes up to `end` (else CorruptBlock)."""
        path, base, crcs_at = self._place_in_file(block_id, where, meta)
        fd = self._open_file(block_id, path)
        try:
            if os.fstat(fd).st_size < base + end:
                raise errors.CorruptBlock(f"block {block_id}: its file {path.name} is short")
        except BaseException:
            os.close(fd)
            raise
        return fd, base, [int.from_bytes(meta[crcs_at + 4 * i:crcs_at + 4 + 4 * i], "big") for i in range(first, stop)]

    def _place_in_file(self, block_id: int, where: int, meta: bytes) -> tuple[Path, int, int]:
        """(its file, where its data starts in the file, where its chunks' CRC32Cs start in `meta`) of a FILED
        block (a file of its own) or a PACKED one."""
        if where == IN_FILE:
            return self._file_path(block_id, int.from_bytes(meta[13:21], "big")), 0, 21
        return self.packs.path(int.from_bytes(meta[13:21], "big")), int.from_bytes(meta[21:29], "big"), 29

    def _open_file(self, block_id: int, path: Path) -> int:
        """A descriptor of the file holding a block's bytes, for reading: NoSuchBlock if it is missing, a bad copy
        (CorruptBlock) if it can't be opened."""
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise errors.NoSuchBlock(f"block {block_id}: its file {path.name} is missing") from None
        except OSError as e:
            raise self._damaged(block_id, StorageError(str(e))) from None

    def _read_checked(self, block_id: int, meta: bytes, path: Path, base: int, crcs_at: int, offset: int,
                      end: int) -> list[memoryview]:
        """Bytes [offset, end) of a block whose data starts at `base` in file `path` (a FILED or PACKED block): the
        chunks they touch, read by one pread, each checked against its CRC32C (in `meta` from byte `crcs_at` on).
        pread, not a mapping: a disk's read error is then an OSError (a bad copy, read from another replica), not a
        SIGBUS that kills the node. A file's pages were dropped behind at write, so a read right after the write
        comes from the disk: ~1 GB/s here (bench/block_file_write.py), no slower than the SST layout's reads from
        the disk; that layout's blocks stayed in memory (RocksDB keeps them mapped: 512 of 512 MiB resident after a
        PUT, untouched by drop_caches), which is why `s3_bench.py`'s GET stream right after its MPU PUT measured
        1,067-1,375 MB/s then and 744-965 when files came (before reads of whole chunks went out with sendfile), and
        why its writes took fresh pages."""
        cs, size = self.chunk_size, int.from_bytes(meta[:8], "big")
        first, stop = offset // cs, (end - 1) // cs + 1
        lo, hi = first * cs, min(size, stop * cs)
        fd = self._open_file(block_id, path)
        try:
            data = memoryview(os.pread(fd, hi - lo, base + lo))
        except OSError as e:
            raise self._damaged(block_id, StorageError(str(e))) from None
        finally:
            os.close(fd)
        if len(data) != hi - lo:
            raise errors.CorruptBlock(f"block {block_id}: its file {path.name} is short")
        out = []
        for i in range(first, stop):
            chunk = data[(i - first) * cs:min((i - first + 1) * cs, hi - lo)]
            if crc32c(chunk) != int.from_bytes(meta[crcs_at + 4 * i:crcs_at + 4 + 4 * i], "big"):
                raise errors.CorruptBlock(f"block {block_id} chunk {i} failed its crc32c check")
            a, z = max(offset - i * cs, 0), min(end - i * cs, len(chunk))
            out.append(chunk[a:z] if (a, z) != (0, len(chunk)) else chunk)
        return out

    @staticmethod
    def _damaged(block_id: int, e: StorageError) -> errors.CorruptBlock:
        log.error("block %s: the storage engine cannot read this node's copy: %s", block_id, e)
        return errors.CorruptBlock(f"block {block_id}: unreadable here ({e})")

    def blocks_from(self, block_id: int) -> Iterator[int]:
        """Ids of the blocks stored here from `block_id` on, in order, read from the block index (the metas)."""
        for k, _ in self._scan_past_damage(keys.meta(block_id), prefix_end(keys.METAS)):
            yield int.from_bytes(k[1:], "big")

    def _scan_past_damage(self, start: bytes, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """kv.scan, except that where the store is damaged the rest is listed without RocksDB's checksums (they
        stop an iterator at a corrupt block as if the range ended there): a damaged index must not hide, or keep
        the node from starting with, everything stored after it. Reading such an entry by key still fails."""
        try:
            for k, v in self.kv.scan(start, end):
                yield k, v
                start = k + b"\0"
        except StorageError as e:
            log.error("damaged store after key %s: listing past it unchecked: %s", start.hex(), e)
            yield from self.kv.scan(start, end, verify=False)

    def read_raw(self, block_id: int) -> tuple[int, list[memoryview]]:
        """(crc of the block, its chunks) after checking each chunk; for replication."""
        crc = self._meta(block_id)[1]
        return crc, self.read(block_id)

    def size(self, block_id: int) -> int:
        """The size of a stored block (0 if it is not stored or its index entry is unreadable)."""
        try:
            return self._meta(block_id)[0]
        except (errors.NoSuchBlock, errors.CorruptBlock):
            return 0

    def zeroed(self, block_id: int) -> bool:
        """Is the block stored here as its meta alone (ZEROED: its bytes are zeros, nothing on disk to check)?"""
        try:
            return self._meta(block_id)[2] == IN_ZERO
        except (errors.NoSuchBlock, errors.CorruptBlock):
            return False

    def has(self, block_id: int) -> bool:
        try:
            return self.kv.get(keys.meta(block_id)) is not None
        except StorageError:
            return True  # its index entry is there, unreadable: a bad copy

    def recently_deleted(self, block_id: int) -> bool:
        """Was the block deleted here in the last TOMBSTONE_S seconds? A replica push that was already in flight
        when the NameNode ordered the delete must not bring it back as an orphan."""
        t = self._tombstones.get(block_id)
        return t is not None and time.monotonic() - t < TOMBSTONE_S

    def delete(self, block_ids: list[int]) -> None:
        now = time.monotonic()
        if len(self._tombstones) > 100_000:
            self._tombstones = {b: t for b, t in self._tombstones.items() if now - t < TOMBSTONE_S}
        for bid in block_ids:
            self._tombstones[bid] = now
        freed = gone = 0
        packed = []
        with self.kv.batch() as b:  # the counts change once the batch is written (a store may refuse it)
            for bid in block_ids:
                raw = self.kv.get(keys.meta(bid))
                if raw is None:
                    continue
                freed += _held(raw)
                gone += 1
                b.delete(keys.meta(bid))
                packed.append(self._forget_chunks(b, bid, raw))
        self._freed(packed)
        self.used -= freed
        self.count -= gone
        # drop replication jobs for deleted blocks
        gone = set(block_ids)
        dropped = [tb for tb in self._jobs if tb[1] in gone]
        if dropped:
            with self.kv.batch() as b:
                for target, bid in dropped:
                    b.delete(keys.repl(target, bid))
                    del self._jobs[(target, bid)]

    def purge(self, limit: int | None = None) -> int:
        """Delete the files of deleted or replaced FILED copies (and of puts a crash kept from their batch), up to
        PURGE_FILES at a time, then drop the bulk chunks of up to `limit` `pending` blocks in the generation their
        marker names, unless the block's meta says its copy is there (deleted, rewritten elsewhere, or a put that a
        crash kept from its batch), one block at a time (see common/kv.RocksBulk.drop); returns how many."""
        done = self._purge_files()
        if limit is not None and done >= limit:
            return done
        for k, v in self.kv.scan(keys.PENDING, prefix_end(keys.PENDING)):
            bid, gen = int.from_bytes(k[1:], "big"), _gen(v)
            if bid in self._storing:  # its file is being written (put_async): not a crash's leftover
                continue
            meta = self.kv.get(keys.meta(bid)) if self.bulk is not None else None
            if self.bulk is not None and not (_in_bulk(meta) and _meta_gen(meta) == gen):
                start = keys.chunks_of(bid)
                self.bulk.drop(start, prefix_end(start), gen)
            self.kv.delete(k)
            done += 1
            if done == limit:
                break
        return done

    def _purge_files(self) -> int:
        done = 0
        for k, v in self.kv.scan(keys.DOOMED_FILES, prefix_end(keys.DOOMED_FILES)):
            seq, bid = int.from_bytes(k[1:], "big"), int.from_bytes(v, "big")
            if bid in self._storing:  # a put of the block is under way: its file may be written, its batch not yet
                continue
            meta = self.kv.get(keys.meta(bid))
            if not (meta is not None and meta[12:13] == FILED and int.from_bytes(meta[13:21], "big") == seq):
                try:
                    self._file_path(bid, seq).unlink(missing_ok=True)
                except OSError as e:
                    log.error("block %s: cannot delete its file: %s", bid, e)
                    continue
            self.kv.delete(k)
            done += 1
            if done >= PURGE_FILES:
                break
        return done

    def sweep_files(self, folder: int) -> int:
        """Delete the files in folder number `folder` (of FILE_DIRS) of the files folder that nothing names: neither
        a meta (FILED, that copy number) nor a marker. A power cut leaves one when it came after a put's file was
        synced and before the WAL holding its marker was (the marker is written first, not synced: the put is not
        acknowledged yet, so losing it is right, but the file stayed, a leak only this finds). A file of this process
        is named from before its first byte to after its unlink (marker, then meta or marker again), so only what
        an earlier run left is deleted. Returns how many."""
        done = 0
        try:
            names = os.listdir(self.files / f"{folder:02x}")
        except FileNotFoundError:
            return 0
        for name in names:
            bid, dot, seq = name.partition(".")
            if not (dot and bid.isdigit() and seq.isdigit()):
                continue  # not a block file: left alone
            bid, seq = int(bid), int(seq)
            if bid in self._storing or self.kv.get(keys.doomed_file(seq)) is not None:
                continue
            meta = self.kv.get(keys.meta(bid))
            if meta is not None and meta[12:13] == FILED and int.from_bytes(meta[13:21], "big") == seq:
                continue
            try:
                self._file_path(bid, seq).unlink(missing_ok=True)
            except OSError as e:
                log.error("block %s: cannot delete its unnamed file %s: %s", bid, name, e)
                continue
            log.warning("block %s: deleted file %s, which nothing names (left by a power cut)", bid, name)
            done += 1
        return done

    async def compact_packs(self) -> int:
        """One step of compacting a sparse pack (one whose stored copies fill less than PACK_SPARSE of it: the rest
        is deleted or replaced copies, or a crash's unfinished writes): the block index is read from where the last
        step stopped, up to COMPACT_SCAN metas, and every copy found in that pack is written again into the current
        one (its data read and checked first; a bad copy is left there, for the scrubber and repair), up to
        COMPACT_BYTES. A copy deleted or written again meanwhile keeps its newer state. Once the index was read to its
        end, the pack holds nothing more and `purge` deletes it. Returns the copies moved."""
        if self.packs is None:
            return 0
        if self._compacting is None or self._compacting not in self.packs.live:
            self._compacting, self._compact_from = self.packs.sparse(), 0
            if self._compacting is None:
                return 0
        pack, todo, expect, size, last = self._compacting, [], {}, 0, None
        for n, (k, v) in enumerate(self.kv.scan(keys.meta(self._compact_from), prefix_end(keys.METAS))):
            last = int.from_bytes(k[1:], "big")
            if n >= COMPACT_SCAN or size >= COMPACT_BYTES:
                break
            if v[12:13] == PACKED and int.from_bytes(v[13:21], "big") == pack:
                try:
                    data = b"".join(self.read(last))
                except (errors.NoSuchBlock, errors.CorruptBlock) as e:
                    log.warning("compacting pack %s: block %s left there: %s", pack, last, e)
                    continue
                todo.append((last, data, int.from_bytes(v[8:12], "big"), []))
                expect[last] = v
                size += len(data)
            last = None
        if last is None:  # the index read to its end
            self.packs.compacted.add(pack)
            self._compacting = None
        else:
            self._compact_from = last
        if todo:
            with self._engine_write():
                await self._store_small(todo, expect=expect)
                await self.synced()  # the moved copies' metas durable before their old pack can go
        return len(todo)

    def block_ids(self) -> list[int]:
        return [int.from_bytes(k[1:], "big") for k in self.kv.scan_keys(keys.METAS, prefix_end(keys.METAS))]

    # replication jobs
    def due_replications(self, limit: int, now: float | None = None) -> list[tuple[int, int, dict]]:
        now = time.time() if now is None else now
        out = []
        for (target, bid), job in self._jobs.items():
            if job["due"] <= now:
                out.append((target, bid, job))
                if len(out) >= limit:
                    break
        return out

    def complete(self, target: int, block_id: int) -> None:
        self.kv.delete(keys.repl(target, block_id))
        self._jobs.pop((target, block_id), None)

    def complete_many(self, block_id: int, targets: list[int]) -> None:
        with self.kv.batch() as b:
            for t in targets:
                b.delete(keys.repl(t, block_id))
                self._jobs.pop((t, block_id), None)

    def backoff(self, target: int, block_id: int, job: dict) -> None:
        n = job["n"] + 1
        job = {**job, "n": n, "due": time.time() + min(60.0, 0.5 * 2 ** min(n, 7))}
        self.kv.put(keys.repl(target, block_id), orjson.dumps(job))
        self._jobs[(target, block_id)] = job

    def queued_jobs(self) -> set[tuple[int, int]]:
        """(target, block) of every queued replication job."""
        return set(self._jobs)

    def replication_lag(self) -> dict:
        """Queued replication jobs and the age of the oldest in seconds (reported with every heartbeat)."""
        oldest = min((j.get("t", j["due"]) for j in self._jobs.values()), default=None)
        return {"queued": len(self._jobs), "oldest_s": 0.0 if oldest is None else round(max(time.time() - oldest, 0.0), 3)}


def _checked(block_id: int, index: int, raw: bytes) -> memoryview:
    """A stored chunk's data after checking it against the CRC32C stored before it."""
    mv = memoryview(raw)
    if crc32c(mv[4:]) != int.from_bytes(mv[:4], "big"):
        raise errors.CorruptBlock(f"block {block_id} chunk {index} failed its crc32c check")
    return mv[4:]


def block_file(files: Path, block_id: int, seq: int) -> Path:
    """The file of copy number `seq` of a block (FILED) in the folder `files`."""
    return files / f"{seq % FILE_DIRS:02x}" / f"{block_id}.{seq}"


def write_file(path: Path, data, direct: DirectWriter | None = None) -> None:
    """Write a new block file durably: its bytes fdatasynced, then its folder fsynced (a file fsynced but not its
    folder can vanish in a power cut). Given `direct`, past the page cache (O_DIRECT, the tail padded to DIRECT_ALIGN
    and cut off again): the copy into fresh page-cache pages was the largest item of a DataNode's CPU under
    streamed writes (19% of its samples, perf, fsspec writes of 64 MiB files), and a file written through the page
    cache was dropped from it behind anyway. Measured, 128 files of 4 MiB from one thread, this VM: 0.14-0.17 ms of
    the process's CPU per MiB against 0.30-0.38, 0.18-0.23 of the machine's (writeback included) against 0.31-0.47,
    at 1,717-1,775 MiB/s against 1,408-1,736. Without it (tmpfs), through the page cache, its pages dropped behind as
    RocksDB's SST writer did: pages freed at once are the next block's, and on this VM a fresh page-cache page costs
    ~6x a recycled one (a 1 GiB write 2.0 s of sys time against 0.35)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    fd = os.open(path, flags | os.O_DIRECT if direct is not None else flags, 0o600)
    try:
        if direct is not None:
            n = len(data)
            if direct.pwrite(fd, 0, [data]) != n:
                os.ftruncate(fd, n)  # the padding off again (fdatasync below makes the size durable with the data)
        else:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        os.fdatasync(fd)
        if direct is None:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    _fsync_dir(path.parent)


class DirectWriter:
    """Writes past the page cache (O_DIRECT) through one reused buffer: a mapping, so page-aligned as O_DIRECT
    needs (received payloads are not), and reused, so its pages are never fresh ones. Thread-safe (one write at a
    time)."""

    def __init__(self, size: int) -> None:
        self._buf = mmap.mmap(-1, -(-size // DIRECT_ALIGN) * DIRECT_ALIGN)
        self._lock = threading.Lock()

    def pwrite(self, fd: int, offset: int, bufs: list) -> int:
        """Write `bufs` back to back at `offset` (a multiple of DIRECT_ALIGN) of `fd` (opened with O_DIRECT), in
        pieces of the buffer's size, zeros after them to the next multiple of DIRECT_ALIGN; the bytes written."""
        with self._lock:
            out = memoryview(self._buf)
            at = done = 0
            try:
                for b in bufs:
                    b = memoryview(b).cast("B")
                    pos = 0
                    while pos < len(b):
                        k = min(len(out) - at, len(b) - pos)
                        out[at:at + k] = b[pos:pos + k]
                        at, pos = at + k, pos + k
                        if at == len(out):
                            done += _pwrite_whole(fd, out, offset + done)
                            at = 0
                if at:
                    padded = -(-at // DIRECT_ALIGN) * DIRECT_ALIGN
                    out[at:padded] = bytes(padded - at)
                    done += _pwrite_whole(fd, out[:padded], offset + done)
            finally:
                out.release()
            return done

    def close(self) -> None:
        with self._lock:
            self._buf.close()


def _pwrite_whole(fd: int, view: memoryview, offset: int) -> int:
    if os.pwrite(fd, view, offset) != len(view):  # (a short O_DIRECT write can't go on from where it stopped)
        raise OSError("short write")
    return len(view)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Purger(Worker):
    """Deletes the files of deleted blocks and emptied packs and drops deleted bulk blocks in the background, one
    bulk block per step (a flush and a compaction of that block's range, ~10 ms), and compacts sparse packs a step
    at a time, so that deleting thousands of blocks never stalls the node's RPCs and heartbeats. After each start it
    also sweeps the block files' folders once, one a step, for files nothing names (BlockStore.sweep_files)."""

    def __init__(self, store: BlockStore, interval_s: float = 1.0) -> None:
        self.store, self.interval_s = store, interval_s
        self._swept = 0 if store.files is not None else FILE_DIRS  # folders of block files swept since the start

    async def run_once(self) -> PassStats:
        done = self.store.purge(limit=1)
        if self._swept < FILE_DIRS:  # once per start, a folder a step: what a power cut left (sweep_files)
            done += self.store.sweep_files(self._swept)
            self._swept += 1
        packs = self.store.packs
        if packs is not None:
            if empty := packs.reclaimable():
                await self.store.synced()  # the deletes that emptied them durable first: a power cut brings none back
                done += packs.reclaim(empty)
            packs.close_full()
        return PassStats(ok=done + await self.store.compact_packs())


class Packs:
    """Pack files of a DataNode's small blocks (PACKED): `<folder>/<number>`, each written only at its end, the
    blocks of a write back to back in one pwrite; `flush` fdatasyncs what was written (called by `BlockStore.synced`,
    the group commit: one sync for the writes of many batches, before the WAL's). A block's meta names its pack and offset. A pack is deleted once no stored copy
    is in it (`reclaim`); `sparse` names one worth compacting. How many bytes of stored copies each pack holds
    (`live`) is counted from the metas when the store opens and kept up to date by the store's batches; the packs a
    restart finds are never written again (a new one is started), and those holding no copy (a crash's unfinished
    writes) are deleted then.

    Written ourselves: the log-structured volume of Haystack, SeaweedFS and 3FS's chunk engine, on no library
    Python has; RocksDB's own blob files (BlobDB) made reads several times slower (bench/kv_options.py)."""

    def __init__(self, folder: Path, live: dict[int, int], direct: DirectWriter | None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        # written past the page cache through `direct`, given where the file system takes it: the page-cache copy
        # into fresh pages was 26% of a DataNode's CPU under `epochfs cp` (perf), this VM's dearest copy; reads fill
        # the page cache as usual
        self._writer = direct
        self.direct = direct is not None
        self.live = live
        self.inflight: dict[int, int] = {}  # pack -> writes made to it whose batch is not written yet
        self.sizes: dict[int, int] = {}  # pack -> its length
        for p in folder.iterdir():
            if p.name.isdigit():
                if int(p.name) in live:
                    self.sizes[int(p.name)] = p.stat().st_size
                else:
                    p.unlink()
        for pack in live:
            self.sizes.setdefault(pack, 0)  # a meta names it and its file is gone: reads say NoSuchBlock
        self.active = max(self.sizes, default=0) + 1
        self.live[self.active], self.sizes[self.active] = 0, 0
        self._fds: dict[int, int] = {}  # pack -> open for writing (and syncing)
        self._direct_fds: dict[int, int] = {}  # pack -> open for writing with O_DIRECT
        self._dirty: set[int] = set()  # packs written since the last flush
        self._syncing: set[int] = set()  # packs the flush under way syncs
        self.compacted: set[int] = set()  # packs compacted once (what is left in one is a bad copy: repair's)
        self._new = False  # a pack file created since the last flush (its folder to fsync)
        _fsync_dir(folder)

    def path(self, pack: int) -> Path:
        return self.folder / str(pack)

    def reserve(self, n: int) -> tuple[int, int]:
        """A place for `n` bytes: (pack, offset) at the end of the current pack, or of a new one once it is full."""
        if self.sizes[self.active] and self.sizes[self.active] + n > PACK_BYTES:
            self.active += 1
            self.live[self.active], self.sizes[self.active] = 0, 0
        pack, off = self.active, self.sizes[self.active]
        self.sizes[pack] += -(-n // PACK_ALIGN) * PACK_ALIGN if self.direct else n
        self.inflight[pack] = self.inflight.get(pack, 0) + 1
        return pack, off

    def write(self, pack: int, offset: int, bufs: list[memoryview]) -> None:
        """Write `bufs` back to back at `offset` of `pack` (a place `reserve` gave): past the page cache if they
        make INLINE_WRITE bytes or more (the caller writes in a worker thread: the call waits for the disk), else
        through it (a write of a few KiB from the event loop; their places never share a page with a direct write's,
        as `reserve` aligns every place)."""
        try:
            fd = self._fds.get(pack)
            if fd is None:
                fd = self._fds[pack] = os.open(self.path(pack), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
                self._new = True
            if self.direct and sum(len(b) for b in bufs) >= INLINE_WRITE:
                direct = self._direct_fds.get(pack)
                if direct is None:
                    direct = self._direct_fds[pack] = os.open(self.path(pack), os.O_WRONLY | os.O_CLOEXEC | os.O_DIRECT)
                self._writer.pwrite(direct, offset, bufs)
                bufs = []
            while bufs:
                n = os.pwritev(fd, bufs[:1024], offset)  # IOV_MAX
                offset += n
                while bufs and n >= len(bufs[0]):
                    n -= len(bufs[0])
                    bufs = bufs[1:]
                if bufs and n:
                    bufs = [bufs[0][n:], *bufs[1:]]
            self._dirty.add(pack)
        except OSError as e:
            raise StorageError(f"writing to pack {pack}: {e}") from None

    def flush(self) -> None:
        """fdatasync every pack written since the last call, and the folder if a pack was created (in a worker
        thread by WalSync: a write the event loop makes meanwhile goes to the next call)."""
        dirty, self._dirty = self._dirty, set()
        new, self._new = self._new, False
        self._syncing = dirty  # `reclaim` keeps their files open meanwhile
        try:
            for pack in dirty:
                os.fdatasync(self._fds[pack])
            if new:
                _fsync_dir(self.folder)
        finally:
            self._syncing = set()

    def reclaimable(self) -> list[int]:
        """The packs that hold no stored copy and take no more writes."""
        return [p for p, n in self.live.items() if n <= 0 and p != self.active and not self.inflight.get(p)]

    def reclaim(self, packs: list[int]) -> int:
        """Delete those of `packs` that are still `reclaimable` (once the store's WAL is synced past the batches
        that emptied them), and not being synced; returns how many."""
        done = 0
        for pack in set(packs) & set(self.reclaimable()) - self._dirty - self._syncing:
            for fd in (self._fds.pop(pack, None), self._direct_fds.pop(pack, None)):
                if fd is not None:
                    os.close(fd)
            try:
                self.path(pack).unlink(missing_ok=True)
            except OSError as e:
                log.error("pack %s: cannot delete it: %s", pack, e)
                continue
            del self.live[pack], self.sizes[pack]
            self.inflight.pop(pack, None)
            self.compacted.discard(pack)
            done += 1
        return done

    def close_full(self) -> None:
        """Close the files of the full packs whose writes are synced: no more writes come to them (reads open their
        own), and a DataNode that wrote terabytes would otherwise hold a file open per 256 MiB."""
        for pack in [p for p in self._fds if p != self.active and not self.inflight.get(p) and p not in self._dirty
                     and p not in self._syncing]:
            os.close(self._fds.pop(pack))
            if pack in self._direct_fds:
                os.close(self._direct_fds.pop(pack))

    def sparse(self) -> int | None:
        """The full pack whose stored copies fill the least of it, if less than PACK_SPARSE."""
        full = [(self.live[p] / self.sizes[p], p) for p in self.live
                if p != self.active and not self.inflight.get(p) and self.sizes.get(p) and p not in self.compacted
                and self.live[p] < PACK_SPARSE * self.sizes[p]]
        return min(full)[1] if full else None

    def close(self) -> None:
        for fd in [*self._fds.values(), *self._direct_fds.values()]:
            os.close(fd)
        self._fds.clear()
        self._direct_fds.clear()


class _Durable:
    """What `BlockStore.synced` makes durable, in this order: the packs written (their data), then the WAL (the metas
    that name it)."""

    def __init__(self, kv: KV, packs: Packs | None) -> None:
        self._kv, self._packs = kv, packs

    def flush(self) -> None:
        if self._packs is not None:
            self._packs.flush()
        self._kv.flush()


def _raise_first(errs: dict[int, str], block_id: int) -> None:
    """Raise the error `put_many` answered for a single block (its data doesn't match its CRC)."""
    if errs:
        raise errors.CorruptBlock(f"block {block_id}: data does not match its crc32c")
