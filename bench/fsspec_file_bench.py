"""fsspec files opened and read: the pinned read path (one locate, then the DataNodes with its read token, see
common/client.py PinnedReader) against ranged GETs through the gateway (what EpochFile did before), in the same run
on the same cluster, alternating.

    python bench/fsspec_file_bench.py [--files 200] [--big-mib 256] [--rounds 2]

Reports files/s for 128 KiB files opened and read whole, MiB/s for one large file read front to back in 8 MiB
requests, and the cluster's CPU (NameNode, DataNodes, gateway, from /proc) per file and per MiB.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import fsspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "integration"))
sys.path.insert(0, str(HERE))
from cluster import MAIN, Cluster  # noqa: E402
from epochfs.frontends import errmap  # noqa: E402
from epochfs.frontends.fsspec_fs import EpochFile  # noqa: E402
from s3_bench import CLK_TCK, proc_ticks  # noqa: E402

PINNED = EpochFile._fetch_range


def ranged_get(self, start, end):
    with errmap.as_oserror(self.path):
        return self._call(self.fs.client.get(self.bucket, self.key, start, end))


def cluster_cpu_s(c: Cluster) -> float:
    return sum(proc_ticks(p.pid) or 0 for p in c.procs.values()) / CLK_TCK


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--big-mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        c = Cluster(Path(root)).start()
        try:
            s3 = c.s3()
            s3.create_bucket(Bucket="bench")
            for i in range(a.files):
                s3.put_object(Bucket="bench", Key=f"s/{i}", Body=os.urandom(128 << 10))
            s3.put_object(Bucket="bench", Key="big", Body=os.urandom(a.big_mib << 20))
            fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1],
                                   skip_instance_cache=True)
            fs.find("bench")  # sizes and ETags from one listing: opens ask nothing
            for _ in range(a.rounds):
                for name, fetch in (("ranged GET", ranged_get), ("pinned", PINNED)):
                    EpochFile._fetch_range = fetch
                    t, u = time.perf_counter(), cluster_cpu_s(c)
                    for i in range(a.files):
                        with fs.open(f"bench/s/{i}", "rb") as f:
                            f.read()
                    dt, du = time.perf_counter() - t, cluster_cpu_s(c) - u
                    t2, u2 = time.perf_counter(), cluster_cpu_s(c)
                    with fs.open("bench/big", "rb", block_size=8 << 20, cache_type="none") as f:
                        while f.read(8 << 20):
                            pass
                    dt2, du2 = time.perf_counter() - t2, cluster_cpu_s(c) - u2
                    print(f"{name:10s} 128 KiB files: {a.files / dt:6.0f} files/s, cluster {du / a.files * 1e3:.2f} "
                          f"ms/file | {a.big_mib} MiB file: {a.big_mib / dt2:5.0f} MiB/s, cluster "
                          f"{du2 / a.big_mib * 1e3:.2f} ms/MiB", flush=True)
            EpochFile._fetch_range = PINNED
        finally:
            c.close()


if __name__ == "__main__":
    main()
