#!/usr/bin/env python3
"""How a DataNode writes small blocks (under 2 MiB: samples, small files), three ways:

    rocksdb      their chunks through RocksDB's write batch into its chunks space (SEQUENCED, up to 2026-11-27),
                 flushes and compactions through the page cache, as then
    packs/cache  packs (PACKED, datanode/blockstore.py Packs) written through the page cache (where the file system
                 takes no O_DIRECT)
    packs        packs written past the page cache (O_DIRECT): what a DataNode does now

Each way opens a DataNode store (RocksKV with the chunks space, BlockStore: with its files folder for the packs) and
stores --gib of blocks of --kib KiB through BlockStore.put_many, 16 blocks per batch (a pack write and its
fdatasync) and a WAL sync after each (as a DataNode does for a batch ingest), then flushes the memtables and waits
until the process's CPU stops rising (compactions done).
Reported: the write rate, the process's user and sys CPU per GiB (getrusage: every thread, RocksDB's background
flushes and compactions included), then random reads of 3,000 blocks right after (from the page cache as far as the
way left them there) and after the page cache is dropped (`echo 1 > /proc/sys/vm/drop_caches`, needs root; skipped
otherwise; the store closed and opened again, as RocksDB maps its files), with CPU per read. The ways alternate (--rounds), as the machine's speed drifts.

    python bench/small_block_write.py [--gib 1] [--kib 110] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from block_file_write import drop_caches  # noqa: E402

from epochfs.common import kv as kvmod
from epochfs.common.blocks import crc32c
from epochfs.datanode import blockstore
from epochfs.datanode.blockstore import BlockStore

BATCH = 16
READS = 3000


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _reads(s: BlockStore, ids: list[int], size: int) -> str:
    t, c = time.perf_counter(), _cpu()
    for i in ids:
        assert sum(len(b) for b in s.read(i)) == size
    wall, cpu = time.perf_counter() - t, _cpu() - c
    return f"{len(ids) / wall:8.0f}/s {cpu / len(ids) * 1e3:6.3f}"


def one(way: str, gib: float, size: int) -> str:
    root = Path(tempfile.mkdtemp(prefix="small-block-", dir=os.environ.get("BENCH_DIR")))
    real = kvmod.takes_direct_io
    if way in ("rocksdb", "packs/cache"):
        kvmod.takes_direct_io = blockstore.takes_direct_io = lambda folder: False
    files = None if way == "rocksdb" else root / "blocks.files"
    try:
        kv = kvmod.RocksKV.open(root / "db", bulk=True)
        s = BlockStore(kv, files=files)
        pool = os.urandom(size + 65536)
        n = int(gib * (1 << 30)) // size // BATCH * BATCH
        t, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        for first in range(1, n + 1, BATCH):
            batch = []
            for bid in range(first, first + BATCH):
                data = pool[(bid * 4099) % 65536:][:size]
                batch.append((bid, memoryview(data), crc32c(data), []))
            assert not s.put_many(batch)
            kv.flush()
        wall = time.perf_counter() - t
        kv.flush_memtables()
        last = _cpu()
        while True:  # the compactions the writes left
            time.sleep(0.5)
            now = _cpu()
            if now - last < 0.01:
                break
            last = now
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        g = n * size / (1 << 30)
        ids = random.Random(7).sample(range(1, n + 1), min(READS, n))
        warm = _reads(s, ids, size)
        kv.close()  # RocksDB maps its files, and mapped pages are not dropped
        cold = f"{'-':>16s}"
        if drop_caches():
            kv = kvmod.RocksKV.open(root / "db", bulk=True)
            cold = _reads(BlockStore(kv, files=files), ids, size)
            kv.close()
        return (f"{way:12s} {n / wall:8.0f} {n * size / wall / 1e6:7.0f} {(c1.ru_utime - c0.ru_utime) / g:6.2f} "
                f"{(c1.ru_stime - c0.ru_stime) / g:6.2f}   {warm}   {cold}")
    finally:
        kvmod.takes_direct_io = blockstore.takes_direct_io = real
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--kib", type=int, default=110)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(f"{a.gib:g} GiB of {a.kib} KiB blocks, {BATCH} per batch, a WAL sync after each; CPU in s per GiB, "
          f"reads of {READS} random blocks (ms CPU per read)")
    print(f"{'way':12s} {'puts/s':>8s} {'MB/s':>7s} {'user':>6s} {'sys':>6s}   {'read at once':>16s}   "
          f"{'read cold':>16s}")
    for _ in range(a.rounds):
        for way in ("rocksdb", "packs/cache", "packs"):
            print(one(way, a.gib, a.kib << 10), flush=True)
            time.sleep(5)


if __name__ == "__main__":
    main()
