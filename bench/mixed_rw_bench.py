#!/usr/bin/env python3
"""Reads while a checkpoint is written: the latency of small S3 GETs alone, then while `dd` writes a large file
through `epochfs mount` (a training job's loader reading samples while its checkpoint is saved), in one run.

    python bench/mixed_rw_bench.py                 # 100 objects of 100 KiB, dd of 1 GiB
    python bench/mixed_rw_bench.py --count 128     # dd of 512 MiB

One reader sends GETs of random objects one after the other (common/client.py's S3Client: its lean HTTP/1.1
transport, so that the client is not what is measured) for --idle-s seconds with nothing else running, then for
as long as the dd runs. Printed: GETs served, p50/p90/p99/max latency of each phase, and the dd's MB/s. Starts its
own cluster (`epochfs up`) and mount (needs root and /dev/fuse) and tears both down.

Measured (2 cores; alternating with the tree before the DataNodes wrote bulk blocks in a worker thread, two runs
each): during the dd, GETs served 386 / 400 against 258 / 239, p50 18.5 / 17.6 ms against 23.9 / 31.7, p99 79.6 /
67.1 against 97.0 / 153.0; the dd 123 / 129 MB/s against 139 / 108 (alone: p50 1.5 / 1.5 against 1.1 / 1.7).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_bench import mount, random_source, settle, start_cluster, teardown  # noqa: E402

from epochfs.common.client import S3Client  # noqa: E402


async def reads(c: S3Client, n: int, until) -> list[float]:
    out = []
    while not until():
        t0 = time.monotonic()
        await c.get("bench", f"o{random.randrange(n)}")
        out.append(time.monotonic() - t0)
    return out


def row(name: str, xs: list[float]) -> str:
    xs = sorted(xs)

    def q(p: float) -> float:
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1e3
    return f"{name:<12}{len(xs):>8}{q(0.5):>9.1f}{q(0.9):>9.1f}{q(0.99):>9.1f}{xs[-1] * 1e3:>9.1f}"


async def run(env: dict, mp: Path, a) -> None:
    c = S3Client(env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    try:
        end = time.monotonic() + a.idle_s
        idle = await reads(c, a.objects, lambda: time.monotonic() > end)
        src = random_source(a.count * 4)  # (not zeros: the DataNodes store a block of zeros as its size)
        try:
            t0 = time.monotonic()
            dd = subprocess.Popen(["dd", f"if={src}", f"of={mp / 'big'}", "bs=4M", f"count={a.count}", "conv=fsync"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            busy = await reads(c, a.objects, lambda: dd.poll() is not None)
            took = time.monotonic() - t0
        finally:
            src.unlink()
        if dd.returncode:
            raise RuntimeError(f"dd failed ({dd.returncode})")
    finally:
        await c.close()
    print(f"\n{a.objects} objects of {a.size >> 10} KiB; dd of {a.count * 4} MiB: {a.count * 4 * 1.048576 / took:.0f}"
          f" MB/s; {os.cpu_count()} cores\n")
    print(f"{'GETs':<12}{'served':>8}{'p50 ms':>9}{'p90':>9}{'p99':>9}{'max':>9}")
    print(row("alone", idle))
    print(row("during dd", busy))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--objects", type=int, default=100)
    ap.add_argument("--size", type=int, default=100 << 10)
    ap.add_argument("--count", type=int, default=256, help="4 MiB blocks dd writes")
    ap.add_argument("--idle-s", type=float, default=3.0)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="mixed-rw-"))
    cluster, env = start_cluster(tmp)
    mnt = None
    failed = True
    try:
        async def fill():
            c = S3Client(env["AWS_ENDPOINT_URL"], env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
            try:
                await c.create_bucket("bench")
                body = os.urandom(a.size)
                for i in range(a.objects):
                    await c.put("bench", f"o{i}", body)
            finally:
                await c.close()
        asyncio.run(fill())
        settle(cluster.pid)
        mnt = mount(env, "bench", tmp / "mnt", [], tmp / "mount.log")
        asyncio.run(run(env, tmp / "mnt", a))
        failed = False
    finally:
        teardown(tmp, cluster, [mnt], failed)


if __name__ == "__main__":
    main()
