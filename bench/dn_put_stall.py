#!/usr/bin/env python3
"""How long a DataNode's event loop stands still while it stores one large block, and why.

    python bench/dn_put_stall.py [--blocks 48] [--mib 4] [--rounds 3]

A block of 2 MiB or more is stored as its own SST file (rocksdict's SstFileWriter; `finish` fsyncs it), ingested
into the bulk column family (a link, fsyncs of the file, the folder and the MANIFEST), then its meta goes in a write
batch whose WAL the group commit fsyncs in a worker thread (datanode/blockstore.py, common/kv.py). rocksdict holds
the GIL through each of its calls except `flush_wal`, so the process does nothing else -- its event loop serves no
other RPC, a primary pushes no replica -- until the file is written, synced and ingested. On a multipart upload every
DataNode stores every block (three replicas on three nodes), so the time one block holds a DataNode's GIL bounds the
cluster's write rate at about (block size / that time), whatever the CPU left.

Rows (the same store layout; alternated `rounds` times in one run, each on a fresh store):
    put        BlockStore.put + the WAL group commit, as the `put` handler does today
    steps      the same steps by hand, timed one by one (write: the CRC check, the marker, open and the chunks;
               finish; ingest with the meta batch)
    presync    the same steps by hand, except that the file's data is fsynced by os.fsync in a worker thread (GIL
               free) before `finish`, whose own fsync then finds little left to write (a measurement of what such
               a change would give; not a path the DataNode has)
    group4     files of 4 blocks written, then ingested in one call (the fixed ingest cost shared by 4)
    memflush   the chunks put into the bulk column family's memtable without the WAL (GIL held: a copy), then in a
               worker thread a flush of that family (an L0 file, fsynced with the MANIFEST) and a manual compaction
               of the block's range, which moves the file to the bottom level without rewriting it -- rocksdict
               releases the GIL in `flush` and `compact_range`; then the meta batch as in put (the default family
               flushed every 64 blocks: each bulk flush starts a WAL file, kept until then)
    walput     the block through a write batch with the WAL (bulk_min above the block size), fsynced by the group
               commit; its memtable flushes and compactions waited for at the end of the row and counted
    put4, memflush4   put and memflush with 4 blocks at a time (asyncio.gather), as concurrent handlers run them
               (GIL-held: the late wake-ups only)
Columns, per block: wall ms, GIL-held ms (and its split for the ways done by hand) (time inside rocksdict calls other than flush_wal; checked by a thread that
counts its own wake-ups), CPU ms (process, all threads; kernel: the part in the kernel), and the ceiling 1 block /
GIL-held ms in MB/s. The store runs with a DataNode's malloc settings (common/service.keep_buffers_on_heap).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rocksdict  # noqa: E402

from epochfs.common.blocks import crc32c  # noqa: E402
from epochfs.common.kv import RocksKV, prefix_end  # noqa: E402
from epochfs.common.service import keep_buffers_on_heap  # noqa: E402
from epochfs.datanode import keys  # noqa: E402
from epochfs.datanode.blockstore import BULK, BlockStore  # noqa: E402

MiB = 1 << 20
NOWAL = rocksdict.WriteOptions()
NOWAL.disable_wal = True
MOVE = rocksdict.CompactOptions()  # an L0 file that overlaps nothing: moved to the bottom level, not rewritten
MOVE.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.skip())
MOVE.set_exclusive_manual_compaction(False)


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sys_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


class Ticker:
    """A thread that sleeps 0.5 ms at a time and adds up the wake-ups that came over 2 ms late: time another thread
    held the GIL (or the machine gave it no CPU)."""

    def __init__(self) -> None:
        self.late = 0.0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop:
            time.sleep(0.0005)
            now = time.perf_counter()
            if now - last > 0.002:
                self.late += now - last
            last = now

    def stop(self) -> float:
        self._stop = True
        self._t.join()
        return self.late


async def run(way: str, store: BlockStore, kv: RocksKV, blocks: list) -> tuple[float, dict]:
    """Store the blocks one after the other; returns the seconds spent in GIL-holding rocksdict calls, and for the
    ways done by hand those seconds split into write (the CRC check, the marker, open and the chunks), finish, ingest + meta."""
    held = 0.0
    split = {"write": 0.0, "finish": 0.0, "ingest": 0.0}
    bulk = kv.bulk
    pending: list = []
    lock = threading.Lock()  # memflush: one block per flushed file, so that every file moves down unrewritten
    flushes = [0]

    def flush_and_move(bid):
        with lock:
            bulk._cf.flush()
            start = keys.chunks_of(bid)
            bulk._cf.compact_range(start, prefix_end(start), MOVE)
            flushes[0] += 1
            if flushes[0] % 64 == 0:
                kv._db.flush()

    async def memflush(bid, data, crc):
        nonlocal held
        t = time.perf_counter()
        chunks = store._checked_chunks(bid, memoryview(data), crc)
        kv.put(keys.pending(bid), b"")
        held += time.perf_counter() - t
        await asyncio.to_thread(lock.acquire)  # the memtable holds one block at a time
        try:
            t = time.perf_counter()
            for k, v in chunks:
                bulk._cf.put(k, v, NOWAL)
            held += time.perf_counter() - t
            split["write"] += time.perf_counter() - t
        finally:
            lock.release()
        await asyncio.to_thread(flush_and_move, bid)
        t = time.perf_counter()
        with kv.batch() as b:
            b.put(keys.meta(bid), len(data).to_bytes(8, "big") + crc.to_bytes(4, "big") + BULK)
            b.delete(keys.pending(bid))
        held += time.perf_counter() - t
        split["ingest"] += time.perf_counter() - t
        await store.synced()

    if way in ("put4", "memflush4"):
        async def one(bid, data, crc):
            if way == "put4":
                store.put(bid, data, crc)
                await store.synced()
            else:
                await memflush(bid, data, crc)
        for i in range(0, len(blocks), 4):
            await asyncio.gather(*(one(*b) for b in blocks[i:i + 4]))
        return 0.0, split
    for bid, data, crc in blocks:
        if way == "memflush":
            await memflush(bid, data, crc)
            continue
        if way in ("put", "walput"):
            t = time.perf_counter()
            store.put(bid, data, crc)
            held += time.perf_counter() - t
            await store.synced()
            continue
        t = time.perf_counter()
        chunks = store._checked_chunks(bid, memoryview(data), crc)
        kv.put(keys.pending(bid), b"")
        bulk._seq += 1
        path = str(bulk._tmp / f"{os.getpid()}-{bulk._seq}.sst")
        w = rocksdict.SstFileWriter(options=bulk._writer_opts)
        w.open(path)
        for k, v in chunks:
            w[k] = v
        held += time.perf_counter() - t
        split["write"] += time.perf_counter() - t
        if way == "presync":
            def fsync(p=path):
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            await asyncio.to_thread(fsync)
        t = time.perf_counter()
        w.finish()
        held += time.perf_counter() - t
        split["finish"] += time.perf_counter() - t
        pending.append((bid, len(data), crc, path))
        if way == "group4" and len(pending) < 4:
            continue
        t = time.perf_counter()
        bulk._cf.ingest_external_file([p for *_, p in pending], bulk._ingest)
        with kv.batch() as b:
            for pbid, n, pcrc, _ in pending:
                b.put(keys.meta(pbid), n.to_bytes(8, "big") + pcrc.to_bytes(4, "big") + BULK)
                b.delete(keys.pending(pbid))
        held += time.perf_counter() - t
        split["ingest"] += time.perf_counter() - t
        for *_, p in pending:
            if os.path.exists(p):
                os.unlink(p)
        pending = []
        await store.synced()
    return held, split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", type=int, default=48)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ways", default="put,memflush,walput,put4,memflush4",
                    help="of put,steps,presync,group4,memflush,walput,put4,memflush4")
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp folder)")
    a = ap.parse_args()
    keep_buffers_on_heap()  # a DataNode's malloc settings
    payloads = [os.urandom(a.mib * MiB) for _ in range(4)]
    crcs = [crc32c(p) for p in payloads]
    print(f"# dn_put_stall: {a.blocks} blocks of {a.mib} MiB per row, load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'round':>5} {'way':<9} {'wall ms':>8} {'GIL ms':>7} {'late ms':>8} {'cpu ms':>7} {'kernel':>7} "
          f"{'ceiling MB/s':>12}")
    sums: dict[str, list[float]] = {}
    base = 1
    for rnd in range(1, a.rounds + 1):
        for way in a.ways.split(","):
            d = tempfile.mkdtemp(prefix="dn-stall-", dir=a.dir)
            kv = RocksKV.open(os.path.join(d, "db"), bulk=True)
            try:
                store = BlockStore(kv, bulk_min=1 << 40) if way == "walput" else BlockStore(kv)
                blocks = [(base + i, payloads[i % 4], crcs[i % 4]) for i in range(a.blocks)]
                base += a.blocks
                ticker = Ticker()
                c0, s0, t0 = cpu(), sys_cpu(), time.perf_counter()
                held, split = asyncio.run(run(way, store, kv, blocks))
                if way == "walput":  # its memtable flushes and compactions: part of its cost
                    kv._db.flush()
                    while (kv._db.property_int_value("rocksdb.num-running-compactions")
                           or kv._db.property_int_value("rocksdb.compaction-pending")):
                        time.sleep(0.01)
                wall, used, used_sys = time.perf_counter() - t0, cpu() - c0, sys_cpu() - s0
                late = ticker.stop()
                n = a.blocks
                per = held / n or late / n  # the concurrent rows: the late wake-ups only
                sums.setdefault(way, []).append(per)
                print(f"{rnd:>5} {way:<9} {wall / n * 1e3:8.1f} {per * 1e3:7.1f} {late / n * 1e3:8.1f} "
                      f"{used / n * 1e3:7.1f} {used_sys / n * 1e3:7.1f} {a.mib * MiB / per / 1e6:12.0f}"
                      + ("" if way in ("put", "walput", "put4", "memflush4") else
                         "   " + ", ".join(f"{k} {v / n * 1e3:.1f}" for k, v in split.items())),
                      flush=True)
            finally:
                kv.close()
                shutil.rmtree(d, ignore_errors=True)
                shutil.rmtree(os.path.join(d, "db.ingest"), ignore_errors=True)
    for way, v in sums.items():
        v = sorted(v)
        print(f"# {way}: median GIL-held {v[len(v) // 2] * 1e3:.1f} ms per block "
              f"(ratio to put {v[len(v) // 2] / sorted(sums['put'])[len(sums['put']) // 2]:.2f})"
              if "put" in sums else f"# {way}: median {v[len(v) // 2] * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
