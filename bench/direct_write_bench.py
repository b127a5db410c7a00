"""Writes through fsspec: straight to the DataNodes with a write token (common/directwrite.py) against the gateway's
path (PUT, multipart, batch PUT), in the same run on the same cluster, alternating.

    python bench/direct_write_bench.py [--big-mib 512] [--small 2000] [--rounds 2]

For each path: a large file written with open('wb') in 8 MiB writes (MiB/s), and `pipe` of many 110 KiB files at
once (files/s); the CPU of each server process (NameNode, DataNodes, gateway; from /proc, counted until the cluster
is quiet again, so background replication is included) per MiB and per file, and of this client process.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import fsspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
sys.path.insert(0, str(HERE))
from cluster import MAIN, Cluster  # noqa: E402
from s3_bench import CLK_TCK, proc_ticks  # noqa: E402


def cpu(c: Cluster) -> dict[str, float]:
    return {n: (proc_ticks(p.pid) or 0) / CLK_TCK for n, p in c.procs.items()}


def settle(c: Cluster, quiet_s: float = 0.3, timeout: float = 120.0) -> None:
    """Wait until the servers use (almost) no CPU: replication and compactions a write started are counted."""
    end = time.monotonic() + timeout
    last = sum(cpu(c).values())
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = sum(cpu(c).values())
        if now - last < 0.02:
            return
        last = now


def client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(c: Cluster, fn) -> tuple[float, dict[str, float], float]:
    settle(c)
    before, cl0, t0 = cpu(c), client_cpu(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    cl = client_cpu() - cl0
    settle(c)
    after = cpu(c)
    return wall, {n: after[n] - before[n] for n in after}, cl


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mib", type=int, default=512)
    ap.add_argument("--small", type=int, default=2000)
    ap.add_argument("--small-size", type=int, default=110 << 10)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    chunk = os.urandom(8 << 20)
    smalls = {i: os.urandom(a.small_size) for i in range(64)}
    with tempfile.TemporaryDirectory() as root:
        c = Cluster(Path(root)).start()
        try:
            c.s3().create_bucket(Bucket="bench")
            fss = {name: fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1],
                                           skip_instance_cache=True, direct_writes=direct)
                   for name, direct in (("gateway", False), ("direct", True))}
            rows = []
            for r in range(a.rounds):
                for name, fs in fss.items():
                    def big():
                        with fs.open(f"bench/{name}/big{r}", "wb", block_size=8 << 20) as f:
                            for _ in range(a.big_mib // 8):
                                f.write(chunk)

                    def many():
                        fs.pipe({f"bench/{name}/s{r}/{i:06d}": smalls[i % 64][:-8] + i.to_bytes(8, "big")
                                 for i in range(a.small)})
                    w, srv, cl = measure(c, big)
                    rows.append((name, "big", w, srv, cl, a.big_mib))
                    w, srv, cl = measure(c, many)
                    rows.append((name, "small", w, srv, cl, a.small))
                    d, g = fs.client.direct_writes, fs.client.gateway_writes
                    assert (g == 0) if name == "direct" else (d == 0), (name, d, g)
            names = list(c.procs)
            print(f"\n{a.big_mib} MiB file in 8 MiB writes; {a.small:,} files of {a.small_size:,} B piped at once; "
                  f"{os.cpu_count()} cores, {a.rounds} rounds alternating\n")
            print(f"{'path':<9}{'what':<7}{'s':>7}{'rate':>12}{'client':>9}{'cluster':>9}"
                  + "".join(f"{n:>8}" for n in names) + "   (CPU ms per MiB / per file)")
            for name, what, w, srv, cl, n in rows:
                unit = "MiB/s" if what == "big" else "files/s"
                per = 1e3 / n
                print(f"{name:<9}{what:<7}{w:>7.2f}{n / w:>8.0f} {unit:<4}{cl * per:>8.2f}{sum(srv.values()) * per:>9.2f}"
                      + "".join(f"{srv[x] * per:>8.2f}" for x in names))
        finally:
            c.close()


if __name__ == "__main__":
    main()
