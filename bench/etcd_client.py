#!/usr/bin/env python3
"""Which etcd client the HA NameNode uses: etcd3gw (etcd's JSON gRPC gateway over requests; synchronous, so run in a
worker thread from asyncio) against aetcd (asyncio gRPC), doing what the active NameNode does per log append: one txn
`create_revision(leader) == epoch AND create_revision(log key) == 0 -> put(log key, group)`.

Measured: latency per append (p50, p99; sequential, then 8 appends in flight at once as the NameNode never does but
a busy client library might) and the benchmark process's CPU per append (utime+stime from /proc: the client's
cost, which is the NameNode's cost). The etcd server is started here: a throwaway single member in /tmp on free
ports (the same binary as production, etcd 3.4).

    pip install etcd3gw   # the candidate not chosen is not a dependency of epochfs
    python bench/etcd_client.py [--appends 2000] [--value-bytes 2048]
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from epochfs.common import ports


def start_etcd(tmp: str) -> tuple[subprocess.Popen, int]:
    cp, pp = ports.free_block(), ports.free_block()
    proc = subprocess.Popen(
        ["etcd", "--name", "b0", "--data-dir", os.path.join(tmp, "b0"),
         "--listen-client-urls", f"http://127.0.0.1:{cp}", "--advertise-client-urls", f"http://127.0.0.1:{cp}",
         "--listen-peer-urls", f"http://127.0.0.1:{pp}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{pp}",
         "--initial-cluster", f"b0=http://127.0.0.1:{pp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", cp), 0.2).close()
            return proc, cp
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("etcd did not start")


def cpu_s() -> float:
    with open(f"/proc/{os.getpid()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


async def run_etcd3gw(port: int, n: int, value: bytes, prefix: bytes, inflight: int) -> list[float]:
    import etcd3gw
    client = etcd3gw.client(host="127.0.0.1", port=port)
    lease = client.lease(30)
    leader = prefix + b"leader"
    client.put(leader.decode(), "x", lease=lease)
    epoch = int(client.get(leader.decode(), metadata=True)[0][1]["create_revision"])

    def append(i: int) -> float:
        key = prefix + b"log/%020d" % i
        t = time.perf_counter()
        r = client.transaction({
            "compare": [{"key": b64(leader), "result": "EQUAL", "target": "CREATE", "create_revision": epoch},
                        {"key": b64(key), "result": "EQUAL", "target": "CREATE", "create_revision": 0}],
            "success": [{"request_put": {"key": b64(key), "value": b64(value)}}], "failure": []})
        assert r.get("succeeded"), r
        return time.perf_counter() - t

    return await drive(lambda i: asyncio.to_thread(append, i), n, inflight)


async def run_aetcd(port: int, n: int, value: bytes, prefix: bytes, inflight: int) -> list[float]:
    import aetcd
    async with aetcd.Client(host="127.0.0.1", port=port) as client:
        lease = await client.lease(30)
        leader = prefix + b"leader"
        await client.put(leader, b"x", lease=lease)
        epoch = (await client.get(leader)).create_revision
        tx = client.transactions

        async def append(i: int) -> float:
            key = prefix + b"log/%020d" % i
            t = time.perf_counter()
            ok, _ = await client.transaction(compare=[tx.create(leader) == epoch, tx.create(key) == 0],
                                             success=[tx.put(key, value)], failure=[])
            assert ok
            return time.perf_counter() - t

        return await drive(append, n, inflight)


async def drive(append, n: int, inflight: int) -> list[float]:
    lat: list[float] = []
    nxt = iter(range(n))

    async def one_lane():
        for i in nxt:
            lat.append(await append(i))

    await asyncio.gather(*(one_lane() for _ in range(inflight)))
    return lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=2000)
    ap.add_argument("--value-bytes", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per client (noise)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="etcd-bench-")
    proc, port = start_etcd(tmp)
    value = os.urandom(args.value_bytes)
    try:
        print(f"{'client':8} {'inflight':>8} {'appends/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'cpu us/append':>14}")
        for rnd in range(args.rounds):
            for name, fn in (("etcd3gw", run_etcd3gw), ("aetcd", run_aetcd)):
                for inflight in (1, 8):
                    prefix = f"/bench/{name}/{rnd}/{inflight}/".encode()
                    c0, t0 = cpu_s(), time.perf_counter()
                    lat = asyncio.run(fn(port, args.appends, value, prefix, inflight))
                    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
                    lat.sort()
                    print(f"{name:8} {inflight:8d} {len(lat) / wall:10.0f} {statistics.median(lat) * 1e3:7.2f} "
                          f"{lat[int(len(lat) * 0.99)] * 1e3:7.2f} {cpu / len(lat) * 1e6:14.0f}", flush=True)
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
