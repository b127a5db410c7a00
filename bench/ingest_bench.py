#!/usr/bin/env python3
"""Ingest benchmark: upload a folder of many small files with `aws s3 sync` and `epochfs cp`, in one run.

It makes a folder of N files of S bytes (default 10,000 x 110 KiB, in 100 subfolders), starts its own cluster
(`epochfs up` in a temporary folder) and uploads the folder once per tool, each to its own prefix:

    aws          `aws s3 sync DIR s3://bench/aws/` (the baseline of the ratios)
    cp-single    `epochfs cp --no-batch DIR epochfs://bench/single/` (one PutObject per file: the old path)
    cp-gateway   `epochfs cp --no-direct DIR epochfs://bench/cp-gateway/` (small files in batch PUTs through the
                 gateway, POST /_epochfs/put)
    cp           `epochfs cp DIR epochfs://bench/cp/` (direct writes: each batch's blocks straight to their primary
                 DataNodes with a write token, one allocation and one commit through the gateway)

For each: wall time from start to exit, files/s and MB/s, the ratio to aws, and CPU per file: the client process
(its rusage, children included) and each server process (utime+stime from /proc, counted until the cluster is quiet
again, so background replication is included). It checks that every upload listed N objects.

    python bench/ingest_bench.py                       # 10,000 x 110 KiB
    python bench/ingest_bench.py --files 2000          # quicker
    python bench/ingest_bench.py --only aws,cp         # some tools only
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_bench import cpu_seconds, settle, start_cluster  # noqa: E402
from s3_bench import epochfs_servers, thread_ticks  # noqa: E402

import boto3  # noqa: E402

TOOLS = {
    "aws": lambda src, b, p, j: ["aws", "s3", "sync", "--only-show-errors", str(src), f"s3://{b}/{p}/"],
    "cp-single": lambda src, b, p, j: [sys.executable, "-m", "epochfs.frontends.cli.main", "cp", "-q", "--no-batch",
                                       "-j", str(j), str(src), f"epochfs://{b}/{p}"],
    "cp-gateway": lambda src, b, p, j: [sys.executable, "-m", "epochfs.frontends.cli.main", "cp", "-q", "--no-direct",
                                        "-j", str(j), str(src), f"epochfs://{b}/{p}"],
    "cp": lambda src, b, p, j: [sys.executable, "-m", "epochfs.frontends.cli.main", "cp", "-q", "-j", str(j),
                                str(src), f"epochfs://{b}/{p}"],
}


def make_folder(root: Path, n: int, size: int) -> None:
    block = os.urandom(size + 4096)
    for i in range(n):
        d = root / f"shard{i % 100:03d}"
        d.mkdir(parents=True, exist_ok=True)
        off = (i * 7919) % 4096
        (d / f"sample{i:06d}.bin").write_bytes(i.to_bytes(8, "big") + block[off:off + size - 8])


def server_cpu(pids: dict[str, int]) -> dict[str, float]:
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = cpu_seconds(pid)
        except OSError:
            out[name] = 0.0
    return out


def rocksdb_ticks(servers: dict[str, int]) -> int:
    """CPU ticks of the DataNodes' RocksDB background threads (flushes and compactions)."""
    return sum(t for n, pid in servers.items() if n.startswith("datanode")
               for comm, t in thread_ticks(pid).items() if comm.startswith("rocksdb"))


def run_tool(name: str, argv: list[str], env: dict, servers: dict[str, int], up_pid: int) -> dict:
    settle(up_pid)
    before = server_cpu(servers)
    rdb = rocksdb_ticks(servers)
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{name} failed ({p.returncode}): {err[-2000:]}")
    settle(up_pid)  # replication and compactions the upload started count too
    after = server_cpu(servers)
    return {"wall": wall, "client": ru.ru_utime + ru.ru_stime,
            "servers": {k: after[k] - before[k] for k in servers},
            "rocksdb": (rocksdb_ticks(servers) - rdb) / os.sysconf("SC_CLK_TCK")}


def count(s3, bucket: str, prefix: str) -> int:
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        n += page.get("KeyCount", 0)
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=110 << 10)
    ap.add_argument("--jobs", type=int, default=16, help="epochfs cp -j")
    ap.add_argument("--only", default="aws,cp-single,cp-gateway,cp", help="tools to run, in this order")
    a = ap.parse_args()
    tools = a.only.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    cluster = None
    try:
        src = tmp / "src"
        make_folder(src, a.files, a.size)
        for attempt in range(3):  # on a busy machine `epochfs up` may miss its start-up deadline
            try:
                cluster, cenv = start_cluster(tmp / f"up{attempt}")
                break
            except RuntimeError:
                if attempt == 2:
                    raise
        env = {**os.environ, **cenv, "AWS_DEFAULT_REGION": "us-east-1"}
        s3 = boto3.client("s3", endpoint_url=cenv["AWS_ENDPOINT_URL"], aws_access_key_id=cenv["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=cenv["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        servers = epochfs_servers(cluster.pid)
        res = {}
        for t in tools:
            print(f"{t}: {' '.join(TOOLS[t](src, 'bench', t, a.jobs))}", flush=True)
            res[t] = run_tool(t, TOOLS[t](src, "bench", t, a.jobs), env, servers, cluster.pid)
            got = count(s3, "bench", t)
            if got != a.files:
                raise RuntimeError(f"{t}: {got} objects listed, {a.files} uploaded")
        mb = a.files * a.size / 1e6
        base = res.get("aws") or next(iter(res.values()))
        print(f"\n{a.files:,} files of {a.size:,} B ({mb:,.0f} MB); {os.cpu_count()} cores; epochfs cp -j {a.jobs}\n")
        names = list(servers)
        print(f"{'tool':<12}{'s':>7}{'files/s':>9}{'MB/s':>7}{'x aws':>7}{'client':>8}{'cluster':>8}"
              + "".join(f"{n[:9]:>10}" for n in names) + "   (CPU ms per file)")
        for t, r in res.items():
            fps = a.files / r["wall"]
            cl = sum(r["servers"].values())
            print(f"{t:<12}{r['wall']:>7.1f}{fps:>9,.0f}{mb / r['wall']:>7.1f}{base['wall'] / r['wall']:>7.2f}"
                  f"{r['client'] / a.files * 1e3:>8.2f}{cl / a.files * 1e3:>8.2f}"
                  + "".join(f"{r['servers'][n] / a.files * 1e3:>10.2f}" for n in names))
        print("\nof which the DataNodes' RocksDB background threads (flushes, compactions), CPU ms per file: "
              + ", ".join(f"{t} {r['rocksdb'] / a.files * 1e3:.2f}" for t, r in res.items()))
    finally:
        if cluster is not None:
            cluster.send_signal(signal.SIGTERM)
            cluster.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
