#!/usr/bin/env python3
"""What stale reads from standby NameNodes (HA observer reads, messages.StaleOk) take off the active NameNode: the
dataset readers' metadata load run against an HA trio (3 etcd members, 3 NameNodes), with the reads strong (every
one answered by the active NameNode) and stale (answered by the standbys while they are within
NN_STALE_READ_MAX_S of the log's end), alternating rounds in one run.

One op = what a dataset loader asks of the namespace per epoch of a `--keys`-key dataset: its listing (the manifest,
pages of 1,000 keys) and a stat_many per batch of 64 keys (the batch reads' stats), sent by `--concurrency` readers
through one NameNodeClient given all three NameNodes (as the gateway is). Reported per round: ops/s and CPU per op
(utime+stime from /proc) of the active NameNode, of the two standbys together and of etcd (the standbys' freshness
confirmations).

    python bench/stale_read_bench.py [--keys 10000] [--ops 20] [--concurrency 4] [--rounds 2]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from nn_ha_bench import OBJ, SECRET, Target, cpu_s  # noqa: E402

from epochfs.common import messages as m  # noqa: E402
from epochfs.common.clients import NameNodeClient  # noqa: E402
from epochfs.common.rpc import RpcClient  # noqa: E402

PAGE = 1000
BATCH = 64


async def fill(t: Target, keys: int) -> None:
    rpc, _ = await t.active()
    c = NameNodeClient(RpcClient("127.0.0.1", rpc, SECRET))
    await c.bucket_create("data", owner="bench")
    for lo in range(0, keys, 500):
        await c.put_objects("data", [m.PutItem(key=f"train/{i:07d}.jpg", obj=OBJ)
                                     for i in range(lo, min(lo + 500, keys))])
    await c.close()


async def epoch(c: NameNodeClient, stale: bool) -> int:
    keys, after = [], ""
    while True:
        page = await c.manifest("data", "train/", after, PAGE, stale=m.StaleOk() if stale else None)
        keys += [it.key for it in page.items]
        if not page.truncated:
            break
        after = keys[-1]
    for lo in range(0, len(keys), BATCH):
        res = await c.stat_many([("data", k) for k in keys[lo:lo + BATCH]],
                                 stale=m.StaleOk() if stale else None)
        assert not any(o.error for o in res.objs)
    return len(keys)


async def run_round(t: Target, ops: int, conc: int, stale: bool, keys: int) -> dict:
    _, active = await t.active()
    c = NameNodeClient([RpcClient("127.0.0.1", rpc, SECRET, max_idle=conc * 2) for _, rpc, _ in t.nn])
    await c.msync()  # finds the active one, as a gateway's first calls do
    assert await epoch(c, stale) == keys  # warm
    etcd = [p.pid for p in t.procs if p.args[0] == "etcd"]
    standby = [p.pid for _, _, p in t.nn if p is not active]
    todo = iter(range(ops))

    async def lane():
        for _ in todo:
            assert await epoch(c, stale) == keys

    a0, s0, e0, w0 = cpu_s([active.pid]), cpu_s(standby), cpu_s(etcd), time.perf_counter()
    served0 = c.stale_reads
    await asyncio.gather(*(lane() for _ in range(conc)))
    wall = time.perf_counter() - w0
    res = {"ops/s": ops / wall, "active ms/op": (cpu_s([active.pid]) - a0) / ops * 1e3,
           "standbys ms/op": (cpu_s(standby) - s0) / ops * 1e3, "etcd ms/op": (cpu_s(etcd) - e0) / ops * 1e3,
           "by standbys": c.stale_reads - served0}
    await c.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--ops", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    t = Target(tempfile.mkdtemp(prefix="stale-read-bench-"), True, 2.0)
    try:
        t.start()
        asyncio.run(fill(t, args.keys))
        time.sleep(1.0)  # the standbys apply the fill
        calls = args.keys // PAGE + 1 + -(-args.keys // BATCH)
        print(f"one op: a listing of {args.keys} keys ({args.keys // PAGE + 1} manifest pages) and "
              f"{-(-args.keys // BATCH)} stat_many of {BATCH}: {calls} NameNode calls")
        print(f"{'reads':6} {'round':>5} {'ops/s':>7} {'active ms/op':>12} {'standbys ms/op':>14} {'etcd ms/op':>10} "
              f"{'calls by standbys':>17}")
        out: dict[bool, list[dict]] = {False: [], True: []}
        for r in range(args.rounds):
            for stale in (False, True):
                res = asyncio.run(run_round(t, args.ops, args.concurrency, stale, args.keys))
                out[stale].append(res)
                print(f"{'stale' if stale else 'strong':6} {r:5d} {res['ops/s']:7.2f} {res['active ms/op']:12.1f} "
                      f"{res['standbys ms/op']:14.1f} {res['etcd ms/op']:10.2f} {res['by standbys']:17d}", flush=True)
        strong_a = statistics.mean(x["active ms/op"] for x in out[False])
        stale_a = statistics.mean(x["active ms/op"] for x in out[True])
        ratio = statistics.mean(x["ops/s"] for x in out[True]) / statistics.mean(x["ops/s"] for x in out[False])
        print(f"active NameNode CPU per op: strong {strong_a:.1f} ms, stale {stale_a:.1f} ms "
              f"({stale_a / strong_a:.2f}x); throughput stale/strong {ratio:.2f}x")
    finally:
        t.close()
        shutil.rmtree(t.root, ignore_errors=True)


if __name__ == "__main__":
    main()
