"""Measures how a DataNode should write blocks into RocksDB, and read them back: CPU per MB and per 1 MiB range.

    python bench/kv_write_path.py [--mb 512] [--sizes 128,1024,4096]
    python bench/kv_write_path.py --files 12000     # ingest and drop cost as the bulk space fills (generations)

Write paths, per block size (each block cut into 256 KiB chunks with a 4-byte CRC32C header, as BlockStore stores them):
    batch    one WriteBatch per block into the default column family (WAL on, unsynced), level compaction: the
             process CPU includes RocksDB's flush and compaction threads, waited for until they go quiet
    ingest   one SST file per block (SstFileWriter, synced) ingested into a column family with automatic
             compactions off (RocksKV's bulk space); nothing runs in the background afterwards
Reads: random 1 MiB ranges (the chunks they touch, each CRC-checked) from the stored data, with RocksDB reading
files by pread or by mmap, and with RocksDB's own block checksum verified or not (the chunk CRC is always checked).
CPU is the process's (all threads) from getrusage; run it on a quiet machine, or compare rows of one run.
"""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import tempfile
import time

import rocksdict
from crc32c import crc32c

CS = 256 << 10
MiB = 1 << 20


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


CHECKSUM = "crc32c"


def options(mmap: bool) -> rocksdict.Options:
    o = rocksdict.Options(raw_mode=True)
    o.create_if_missing(True)
    o.create_missing_column_families(True)
    o.set_compression_type(rocksdict.DBCompressionType.none())
    o.set_write_buffer_size(64 << 20)
    o.set_max_background_jobs(2)
    t = rocksdict.BlockBasedOptions()
    t.set_bloom_filter(10, False)
    t.set_checksum_type(getattr(rocksdict.ChecksumType, CHECKSUM)())
    o.set_block_based_table_factory(t)
    o.set_allow_mmap_reads(mmap)
    return o


def chunk_key(bid: int, i: int) -> bytes:
    return b"b" + bid.to_bytes(8, "big") + i.to_bytes(4, "big")


def chunks(bid: int, data: memoryview):
    for i in range(0, len(data), CS):
        piece = data[i:i + CS]
        yield chunk_key(bid, i // CS), crc32c(piece).to_bytes(4, "big") + piece


def wait_quiet() -> None:
    last = cpu()
    while True:
        time.sleep(1.0)
        now = cpu()
        if now - last < 0.02:
            return
        last = now


def write(path: str, how: str, size: int, n: int):
    bulk_opts = options(False)
    bulk_opts.set_disable_auto_compactions(True)
    db = rocksdict.Rdict(path, options=options(False), column_families={"bulk": bulk_opts})
    cf = db.get_column_family("bulk")
    wo = rocksdict.WriteOptions()
    wo.sync = False
    ing = rocksdict.IngestExternalFileOptions()
    ing.set_move_files(True)
    payloads = [memoryview(os.urandom(size)) for _ in range(4)]
    c = cpu()
    for bid in range(n):
        data = payloads[bid % 4]
        if how == "batch":
            wb = rocksdict.WriteBatch(raw_mode=True)
            for k, v in chunks(bid, data):
                wb.put(k, v)
            db.write(wb, wo)
        else:
            f = f"{path}.{bid}.sst"
            w = rocksdict.SstFileWriter(options=options(False))
            w.open(f)
            for k, v in chunks(bid, data):
                w[k] = v
            w.finish()
            cf.ingest_external_file([f], ing)
    fg = cpu() - c
    if how == "batch":
        db.flush()
        wait_quiet()
    total = cpu() - c
    cf = None
    db.close()
    return fg, total


def read(path: str, how: str, size: int, n: int, mmap: bool, verify: bool, ops: int = 300) -> float:
    bulk_opts = options(mmap)
    bulk_opts.set_disable_auto_compactions(True)
    db = rocksdict.Rdict(path, options=options(mmap), column_families={"bulk": bulk_opts})
    store = db if how == "batch" else db.get_column_family("bulk")
    ro = rocksdict.ReadOptions()
    ro.set_verify_checksums(verify)
    rnd = random.Random(7)
    length = min(MiB, size)
    c = cpu()
    for _ in range(ops):
        bid, off = rnd.randrange(n), rnd.randrange(0, size - length + 1)
        for i in range(off // CS, (off + length - 1) // CS + 1):
            v = memoryview(store.get(chunk_key(bid, i), read_opt=ro))
            assert crc32c(v[4:]) == int.from_bytes(v[:4], "big")
    spent = cpu() - c
    store = None
    db.close()
    return spent / ops


def many_files(total: int, steps: int = 6, size: int = 64 << 10, drops: int = 200) -> None:
    """CPU per ingest as a bulk space fills with `total` one-file blocks, through the DataNode's own RocksBulk: in
    generations of RocksBulk.FILES_PER_GEN files, and in one column family; then per drop (a deleted block's file)."""
    from epochfs.common.kv import RocksBulk, RocksKV
    value = os.urandom(size)
    for label, per_gen in ((f"generations of {RocksBulk.FILES_PER_GEN}", RocksBulk.FILES_PER_GEN),
                           ("one column family", 1 << 62)):
        d = tempfile.mkdtemp(prefix="kvfiles-")
        RocksBulk.FILES_PER_GEN, saved = per_gen, RocksBulk.FILES_PER_GEN
        try:
            kv = RocksKV.open(os.path.join(d, "db"), bulk=True)
            where, row = [], []
            for step in range(steps):
                c = cpu()
                for bid in range(step * total // steps, (step + 1) * total // steps):
                    gen = kv.bulk.target()
                    kv.bulk.ingest([(chunk_key(bid, 0), value)], gen)
                    where.append(gen)
                row.append(f"{(step + 1) * total // steps}: {(cpu() - c) / (total // steps) * 1e3:.2f}")
            c = cpu()
            for bid in random.Random(1).sample(range(total), drops):
                kv.bulk.drop(chunk_key(bid, 0), chunk_key(bid + 1, 0), where[bid])
            drop = (cpu() - c) / drops
            kv.close()
        finally:
            RocksBulk.FILES_PER_GEN = saved
            shutil.rmtree(d, ignore_errors=True)
        print(f"{label:<24} ms CPU per ingest, by files so far: {', '.join(row)}; per drop {drop * 1e3:.2f}",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512)
    ap.add_argument("--sizes", default="128,1024,2048,4096", help="block sizes in KiB")
    ap.add_argument("--files", type=int, help="instead: CPU per ingest and per drop as the bulk space fills with "
                                              "this many one-file blocks (in generations, and in one column family)")
    ap.add_argument("--checksum", default="crc32c", choices=["crc32c", "xxh3"],
                    help="RocksDB's table block checksum (the WAL's is always CRC32C)")
    a = ap.parse_args()
    global CHECKSUM
    CHECKSUM = a.checksum
    if a.files:
        many_files(a.files)
        return
    for kib in (int(x) for x in a.sizes.split(",")):
        size = kib << 10
        n = max(8, (a.mb << 20) // size)
        mb = n * size / 1e6
        for how in ("batch", "ingest"):
            d = tempfile.mkdtemp(prefix="kvpath-")
            try:
                fg, total = write(os.path.join(d, "db"), how, size, n)
                reads = {(m, v): read(os.path.join(d, "db"), how, size, n, m, v) for m in (False, True)
                         for v in (True, False)}
            finally:
                shutil.rmtree(d)
            print(f"{kib:>5} KiB {how:<6} write {total / mb * 1e3:5.2f} ms CPU/MB (foreground {fg / mb * 1e3:5.2f})"
                  f"   {min(size, MiB) >> 10} KiB range: pread {reads[False, True] * 1e3:.3f} ms,"
                  f" pread no-verify {reads[False, False] * 1e3:.3f}, mmap {reads[True, True] * 1e3:.3f},"
                  f" mmap no-verify {reads[True, False] * 1e3:.3f}", flush=True)


if __name__ == "__main__":
    main()
