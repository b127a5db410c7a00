#!/usr/bin/env python3
"""etcd's database stays bounded however many commands the HA NameNodes log (issue 16): the log is truncated below
what every member applied and etcd compacted (namenode/ha/etcd_journal.py), so its size levels off.

An HA trio (3 etcd members, 3 NameNodes, bench/nn_ha_bench.py's Target) takes `--commands` cheap commands: PutObject
of a 0-byte object over a ring of `--keys` keys (the NameNodes' own stores stay small; etcd sees one log entry per
command, grouped), `--concurrency` in flight through one NameNodeClient. Every `--every` seconds: commands so far,
rate, etcd's dbSize and dbSizeInUse (etcdctl endpoint status, the largest member) and the log's first/last seq.

    python bench/etcd_size_bench.py [--commands 1000000] [--concurrency 64] [--every 15] [--max-seconds 0]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nn_ha_bench import OBJ, SECRET, Target  # noqa: E402

from epochfs.common import messages as m  # noqa: E402
from epochfs.common.clients import NameNodeClient  # noqa: E402
from epochfs.common.rpc import RpcClient  # noqa: E402


def etcd_sizes(endpoints: str) -> tuple[int, int]:
    """(dbSize, dbSizeInUse) in bytes, the largest over the members."""
    out = subprocess.run(["etcdctl", "--endpoints", endpoints, "endpoint", "status", "-w", "json"],
                         capture_output=True, text=True, check=True, timeout=10,
                         env={**os.environ, "ETCDCTL_API": "3"}).stdout
    st = json.loads(out)
    return (max(e["Status"]["dbSize"] for e in st), max(e["Status"].get("dbSizeInUse", 0) for e in st))


async def run(t: Target, commands: int, conc: int, keys: int, every: float, max_s: float) -> None:
    rpc, _ = await t.active()
    client = NameNodeClient(RpcClient("127.0.0.1", rpc, SECRET, max_idle=conc * 2))
    await client.bucket_create("size", owner="bench")
    done = 0
    nxt = iter(range(commands))
    t0 = time.monotonic()
    stop = False

    async def lane():
        nonlocal done
        for i in nxt:
            if stop:
                return
            await client.put_object("size", f"k{i % keys:06d}", OBJ)
            done += 1

    async def sample():
        last_n, last_t = 0, t0
        print(f"{'s':>6} {'commands':>9} {'cmd/s':>6} {'dbSize MiB':>10} {'inUse MiB':>9} {'log first':>9} "
              f"{'log end':>9}", flush=True)
        while True:
            st, _ = await client.rpc.request(m.HaStatus())
            size, in_use = etcd_sizes(t.etcd_endpoints)
            now = time.monotonic()
            print(f"{now - t0:6.0f} {done:9d} {(done - last_n) / max(now - last_t, 1e-9):6.0f} {size / 2**20:10.1f} "
                  f"{in_use / 2**20:9.1f} {st.log_first:9d} {st.log_end:9d}", flush=True)
            last_n, last_t = done, now
            await asyncio.sleep(every)

    sampler = asyncio.create_task(sample())
    lanes = [asyncio.create_task(lane()) for _ in range(conc)]
    try:
        while not all(x.done() for x in lanes):
            if max_s and time.monotonic() - t0 > max_s:
                stop = True
            await asyncio.sleep(0.5)
        for x in lanes:
            x.result()
    finally:
        sampler.cancel()
    st, _ = await client.rpc.request(m.HaStatus())
    size, in_use = etcd_sizes(t.etcd_endpoints)
    wall = time.monotonic() - t0
    print(f"end: {done} commands in {wall:.0f} s ({done / wall:.0f}/s); etcd dbSize {size / 2**20:.1f} MiB, "
          f"in use {in_use / 2**20:.1f} MiB; log seq {st.log_first}..{st.log_end}")
    await client.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=1_000_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--every", type=float, default=15.0)
    ap.add_argument("--max-seconds", type=float, default=0.0, help="stop earlier, after this long (0: never)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="etcd-size-bench-")
    t = Target(os.path.join(tmp, "ha"), True, 2.0)
    try:
        os.makedirs(t.root)
        t.start()
        asyncio.run(run(t, args.commands, args.concurrency, args.keys, args.every, args.max_seconds))
    finally:
        t.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
