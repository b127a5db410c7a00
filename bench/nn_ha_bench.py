#!/usr/bin/env python3
"""Metadata throughput of the NameNode, embedded (RocksDB WAL fsynced per group) against HA (3 etcd members, 3
NameNodes, the active one appending groups to etcd's log), in one run, alternating.

One op = one PutObject of a 0-byte object (a namespace command: applied, made durable, acknowledged), sent straight
to the (active) NameNode by `--concurrency` typed clients (NameNodeClient) in this process. Reported per round:
ops/s, p50/p99 latency, server CPU per op (utime+stime from /proc, summed over every NameNode and etcd process of
the target, so HA pays for its standbys and its etcd too), split into the active NameNode, its etcd members, its
standbys and this client process, and for HA the commands per log append and the time of one append (the active
NameNode's metrics). With every caller in one group, a round trip of the group is the execution of its commands
on the active NameNode (E) followed by its append (A), one after the other: HA/embedded is about E / (E + A).

    python bench/nn_ha_bench.py [--ops 3000] [--concurrency 16] [--rounds 2] [--ttl 2]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

from epochfs.common import errors, ports
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.rpc import RpcClient

SECRET = "bench-secret-bench-secret"
OBJ = m.ObjectRecord(size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"', owner="bench")


def cpu_s(pids) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


class Target:
    def __init__(self, root: str, ha: bool, ttl: float) -> None:
        self.root, self.ha, self.ttl = root, ha, ttl
        self.procs: list[subprocess.Popen] = []
        self.nn: list[tuple[int, int, subprocess.Popen]] = []
        self.appends = (0.0, 0.0, 0.0)  # the active NameNode's log append count, commands, seconds (metrics)

    def _spawn(self, args, env=None, name="p") -> subprocess.Popen:
        log = open(os.path.join(self.root, f"{name}.log"), "ab")
        p = subprocess.Popen(args, env={**os.environ, **(env or {})}, stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def start(self) -> "Target":
        endpoints = ""
        if self.ha:
            etcd_ports = [(ports.free_block(), ports.free_block()) for _ in range(3)]
            cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(etcd_ports))
            for i, (c, p) in enumerate(etcd_ports):
                self._spawn(["etcd", "--name", f"e{i}", "--data-dir", os.path.join(self.root, f"etcd{i}"),
                             "--listen-client-urls", f"http://127.0.0.1:{c}",
                             "--advertise-client-urls", f"http://127.0.0.1:{c}",
                             "--listen-peer-urls", f"http://127.0.0.1:{p}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{p}",
                             "--initial-cluster", cluster, "--max-request-bytes", str(8 << 20)], name=f"etcd{i}")
            endpoints = ",".join(f"http://127.0.0.1:{c}" for c, _ in etcd_ports)
            self.etcd_endpoints = ",".join(f"127.0.0.1:{c}" for c, _ in etcd_ports)
        for i in range(3 if self.ha else 1):
            http, rpc = ports.free_block(), ports.free_block()
            env = {"NN_HOST": "127.0.0.1", "NN_PORT": str(http), "NN_RPC_PORT": str(rpc),
                   "NN_DATA_DIR": os.path.join(self.root, f"nn{i}"), "NN_CLUSTER_SECRET": SECRET,
                   "NN_NAME": f"nn{i}", "NN_ETCD_ENDPOINTS": endpoints, "NN_LEASE_TTL_S": str(self.ttl),
                   "NN_LOG_LEVEL": "warning"}
            self.nn.append((http, rpc, self._spawn([sys.executable, "-m", "epochfs.namenode"], env, f"nn{i}")))
        for http, _, _ in self.nn:
            wait_http(f"http://127.0.0.1:{http}/healthz")
        return self

    async def active(self) -> tuple[int, subprocess.Popen]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for _, rpc, p in self.nn:
                c = RpcClient("127.0.0.1", rpc, SECRET)
                try:
                    st, _ = await c.request(m.HaStatus())
                    if st.role in ("active", "embedded"):
                        return rpc, p
                except errors.DomainError:
                    pass
                finally:
                    await c.close()
            await asyncio.sleep(0.1)
        raise TimeoutError("no active NameNode")

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


async def run_round(t: Target, ops: int, conc: int, bucket: str) -> dict:
    rpc, active = await t.active()
    client = NameNodeClient(RpcClient("127.0.0.1", rpc, SECRET, max_idle=conc * 2))
    await client.bucket_create(bucket, owner="bench")
    await client.put_object(bucket, "warm", OBJ)
    pids = [p.pid for p in t.procs]
    lat: list[float] = []
    nxt = iter(range(ops))

    async def lane():
        for i in nxt:
            t0 = time.perf_counter()
            await client.put_object(bucket, f"k{i:07d}", OBJ)
            lat.append(time.perf_counter() - t0)

    etcd = [p.pid for p in t.procs if p.args[0] == "etcd"]
    standby = [p.pid for _, _, p in t.nn if p is not active]
    c0, a0, w0 = cpu_s(pids), cpu_s([active.pid]), time.perf_counter()
    e0, s0, me0 = cpu_s(etcd), cpu_s(standby), time.process_time()
    await asyncio.gather(*(lane() for _ in range(conc)))
    wall, cpu, acpu = time.perf_counter() - w0, cpu_s(pids) - c0, cpu_s([active.pid]) - a0
    ecpu, scpu, me = cpu_s(etcd) - e0, cpu_s(standby) - s0, time.process_time() - me0
    await client.close()
    http = next(h for h, _, p in t.nn if p is active)
    groups = ""
    try:
        text = httpx.get(f"http://127.0.0.1:{http}/metrics", timeout=5).text
        val = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
               if ln.startswith(("epochfs_nn_log_append_seconds_", "epochfs_nn_log_group_commands_"))}
        n = val.get("epochfs_nn_log_append_seconds_count", 0) - t.appends[0]
        if n:
            groups = (f"{(val['epochfs_nn_log_group_commands_sum'] - t.appends[1]) / n:.1f} cmds/append, "
                      f"{(val['epochfs_nn_log_append_seconds_sum'] - t.appends[2]) / n * 1e3:.2f} ms/append")
            t.appends = (val["epochfs_nn_log_append_seconds_count"], val["epochfs_nn_log_group_commands_sum"],
                         val["epochfs_nn_log_append_seconds_sum"])
    except (httpx.HTTPError, KeyError, IndexError):
        pass
    lat.sort()
    return {"ops/s": ops / wall, "p50 ms": statistics.median(lat) * 1e3, "p99 ms": lat[int(ops * 0.99)] * 1e3,
            "srv ms/op": cpu / ops * 1e3, "active nn ms/op": acpu / ops * 1e3,
            "etcd ms/op": ecpu / ops * 1e3, "standby ms/op": scpu / ops * 1e3, "client ms/op": me / ops * 1e3,
            "groups": groups}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ttl", type=float, default=2.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="nn-ha-bench-")
    targets = {"embedded": Target(os.path.join(tmp, "emb"), False, args.ttl),
               "ha": Target(os.path.join(tmp, "ha"), True, args.ttl)}
    try:
        for t in targets.values():
            os.makedirs(t.root)
            t.start()
        results: dict[str, list[dict]] = {k: [] for k in targets}
        print(f"{'target':9} {'round':>5} {'ops/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'srv ms/op':>9} {'nn ms/op':>8} "
              f"{'etcd':>6} {'stby':>6} {'client':>6}")
        for r in range(args.rounds):
            for name, t in targets.items():
                res = asyncio.run(run_round(t, args.ops, args.concurrency, f"b{r}"))
                results[name].append(res)
                print(f"{name:9} {r:5d} {res['ops/s']:8.0f} {res['p50 ms']:7.1f} {res['p99 ms']:7.1f} "
                      f"{res['srv ms/op']:9.2f} {res['active nn ms/op']:8.2f} {res['etcd ms/op']:6.2f} "
                      f"{res['standby ms/op']:6.2f} {res['client ms/op']:6.2f} {res['groups']}", flush=True)
        e = statistics.mean(x["ops/s"] for x in results["embedded"])
        h = statistics.mean(x["ops/s"] for x in results["ha"])
        print(f"HA / embedded ops/s: {h / e:.2f} (goal >= 0.7)")
    finally:
        for t in targets.values():
            t.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
