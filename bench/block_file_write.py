#!/usr/bin/env python3
"""How a DataNode stores a large block: as an SST file ingested into RocksDB's bulk key space (the layout up to
2026-11-27) against a plain file of its own (datanode/blockstore.py FILED, write_file: write, fdatasync, the folder
fsynced, drop-behind): files through BlockStore.put, the path every DataNode write takes; SST files as
BlockStore.put wrote them before (the chunks ingested, then the meta). Both read back through BlockStore.read.

Each way stores N blocks of 4 MiB from one thread, then reads them all back twice: at once (from the page cache, as
far as the way left the blocks there) and after the page cache is dropped (`echo 1 > /proc/sys/vm/drop_caches`,
needs root; skipped otherwise; the SST way's blocks stay in memory even then: RocksDB keeps its files mapped, and
mapped pages are not dropped). Reported: wall time and MB/s, the process's user and sys CPU per GiB (getrusage),
and read MB/s. The ways alternate (--rounds) with a pause between, as the machine's speed drifts.

    python bench/block_file_write.py [--blocks 256] [--rounds 2]

Measured 2026-11-27 (2 cores, ext4 on virtio, a VM whose freed pages go back to the host, so a fresh page-cache page
costs ~6x a recycled one): see the README's DataNode paragraph.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from epochfs.common.blocks import crc32c
from epochfs.common.kv import RocksKV
from epochfs.datanode import keys
from epochfs.datanode.blockstore import BULK, CHUNK_SIZE, BlockStore

BLOCK = 4 << 20


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def drop_caches() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
        return True
    except OSError:
        return False


def _read_all(s: BlockStore, n: int) -> float:
    t = time.perf_counter()
    for i in range(n):
        assert sum(len(b) for b in s.read(i + 1)) == BLOCK
    return n * BLOCK / (time.perf_counter() - t) / 1e6


def _put_sst(kv: RocksKV, block_id: int, data: bytes, crc: int) -> None:
    """A block stored as BlockStore did before block files: its chunks (each behind its CRC32C) as one SST file
    ingested into the bulk key space, then its meta (layout BULK). BlockStore reads such blocks still."""
    gen = kv.bulk.target()
    kv.put(keys.pending(block_id), gen.to_bytes(4, "big") if gen else b"")
    kv.bulk.ingest([(keys.chunk(block_id, i), crc32c(data[o:o + CHUNK_SIZE]).to_bytes(4, "big") +
                     data[o:o + CHUNK_SIZE]) for i, o in enumerate(range(0, len(data), CHUNK_SIZE))], gen)
    with kv.batch() as b:
        b.put(keys.meta(block_id), len(data).to_bytes(8, "big") + crc.to_bytes(4, "big") + BULK +
              (gen.to_bytes(4, "big") if gen else b""))
        b.delete(keys.pending(block_id))


def one(way: str, n: int, data: bytes, crc: int) -> str:
    root = Path(tempfile.mkdtemp(prefix="epochfs-blockwrite-"))
    kv = RocksKV.open(root / "blocks", bulk=True)
    try:
        s = BlockStore(kv, files=root / "files" if way == "file" else None)
        u0, s0 = _cpu()
        t = time.perf_counter()
        for i in range(n):
            if way == "file":
                s.put(i + 1, data, crc)
            else:
                _put_sst(kv, i + 1, data, crc)
        dt = time.perf_counter() - t
        u1, s1 = _cpu()
        warm = _read_all(s, n)
        cold = f"{_read_all(s, n):9.0f}" if drop_caches() else f"{'-':>9s}"
        gib = n * BLOCK / (1 << 30)
        return (f"{way:5s} {dt:7.2f} {n * BLOCK / dt / 1e6:7.0f} {(u1 - u0) / gib:11.2f} {(s1 - s0) / gib:10.2f} "
                f"{warm:11.0f} {cold}")
    finally:
        kv.close()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(str(root / "blocks") + ".ingest", ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    data = os.urandom(BLOCK)
    crc = crc32c(data)
    print(f"{'way':5s} {'wall s':>7s} {'MB/s':>7s} {'user s/GiB':>11s} {'sys s/GiB':>10s} {'read MB/s':>11s} "
          f"{'cold MB/s':>9s}")
    for _ in range(a.rounds):
        for way in ("sst", "file"):
            print(one(way, a.blocks, data, crc), flush=True)
            time.sleep(3)


if __name__ == "__main__":
    main()
