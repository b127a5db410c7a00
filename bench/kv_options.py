"""Measures RocksDB (rocksdict) options for DataNode block storage: put and get MB/s for 128 KiB and 4 MiB values.

    python bench/kv_options.py [--mb 512]

Each configuration writes --mb of random data (WAL on, unsynced) and reads it back in shuffled order. Put CPU counts
every thread of the process, RocksDB's background flush and compaction included.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile
import time

import rocksdict


def configs():
    def base():
        o = rocksdict.Options(raw_mode=True)
        o.create_if_missing(True)
        o.set_write_buffer_size(64 << 20)
        o.set_max_background_jobs(2)
        return o

    o = base()
    yield "default compression", o
    o = base()
    o.set_compression_type(rocksdict.DBCompressionType.none())
    yield "no compression", o
    o = base()
    o.set_compression_type(rocksdict.DBCompressionType.none())
    o.set_compaction_style(rocksdict.DBCompactionStyle.universal())
    yield "no compression, universal", o
    o = base()
    o.set_compression_type(rocksdict.DBCompressionType.none())
    o.set_enable_blob_files(True)
    o.set_min_blob_size(64 << 10)
    yield "no compression + blob files", o


def run(total_mb: int) -> None:
    wo = rocksdict.WriteOptions()
    wo.sync = False
    for size in (128 << 10, 4 << 20):
        n = max(1, (total_mb << 20) // size)
        payload = [os.urandom(size) for _ in range(min(n, 64))]
        for name, opts in configs():
            d = tempfile.mkdtemp(prefix="kvbench-")
            db = rocksdict.Rdict(d, options=opts)
            t, c = time.perf_counter(), time.process_time()
            for i in range(n):
                db.put(i.to_bytes(8, "big"), payload[i % len(payload)], wo)
            db.flush()
            put_s = time.perf_counter() - t
            put_cpu = time.process_time() - c  # includes RocksDB's flush and compaction threads
            order = list(range(n))
            random.shuffle(order)
            t = time.perf_counter()
            for i in order:
                db.get(i.to_bytes(8, "big"))
            get_s = time.perf_counter() - t
            db.close()
            shutil.rmtree(d)
            mb = n * size / 1e6
            print(f"{size >> 10:>5} KiB  {name:<28} put {mb / put_s:7.0f} MB/s ({put_cpu / mb * 1e3:5.2f} ms CPU/MB)"
                  f"   get {mb / get_s:7.0f} MB/s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512)
    run(ap.parse_args().mb)
