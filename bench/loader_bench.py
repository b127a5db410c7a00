"""Training-loader benchmark: a shuffled PyTorch DataLoader over small samples, four ways, in one run.

    python bench/loader_bench.py            # 20,000 samples of 110 KiB, batch 64, 4 workers, 3 epochs
    python bench/loader_bench.py --quick    # 4,000 samples, 1 epoch

Starts `epochfs up` (3 DataNodes, 3 replicas), uploads the samples, copies them to a local folder, then reads them
with the same DataLoader settings through
  (a) epochfs:// one request per sample (the dataset without __getitems__),
  (b) epochfs:// batch reads (PrefixDataset: one request per DataLoader batch; the gateway locates the samples and
      issues a read token, the workers read the bytes straight from the DataNodes),
  (p) the same with direct reads off (direct_reads=False: every byte proxied by the gateway's /_epochfs/batch),
  (c) s3fs against the gateway (PrefixDataset over s3://: s3fs's cat_ranges, concurrent GETs per batch),
  (d) the local folder (PrefixDataset over a path),
and reports samples/s, the ratios (b)/(c), (b)/(d) and (b)/(p), the servers' CPU per sample summed over every epochfs
process from /proc (helpers of bench/s3_bench.py) and the loader's own CPU per sample (this process and its
workers). Every sample's size is checked, and one in 64 byte for byte (after the timed epochs). The two loaders with
a request per sample, (a) and (c), run --slow-epochs epochs (default 1: s3fs would take most of the run otherwise);
samples/s is per sample either way.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from s3_bench import CLK_TCK, CpuMeter, EpochfsTarget  # noqa: E402

from epochfs.common.client import S3Client  # noqa: E402
from epochfs.frontends.datasets import PrefixDataset  # noqa: E402

BUCKET = "loaderbench"


def sample(i: int, size: int) -> bytes:
    return hashlib.shake_128(i.to_bytes(8, "big")).digest(size)


class PerFileDataset(PrefixDataset):
    """The same dataset, but the DataLoader fetches each sample on its own (no batch request)."""
    __getitems__ = None


def _collate(batch: list) -> list:
    return batch


async def upload(tgt: dict, n: int, size: int, conc: int = 32) -> None:
    endpoint = f"http://{tgt['host']}:{tgt['port']}"
    async with S3Client(endpoint, tgt["ak"], tgt["sk"], max_connections=conc) as c:
        await c.create_bucket(BUCKET)
        sem = asyncio.Semaphore(conc)

        async def one(i: int) -> None:
            async with sem:
                await c.put(BUCKET, f"train/{i:06d}.bin", sample(i, size))
        await asyncio.gather(*(one(i) for i in range(n)))


def _ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def read_all(ds, a, epochs: int) -> tuple[float, int, float]:
    """Run the epochs; returns (seconds, samples read, the loader's own CPU seconds: this process and its
    workers). Workers persist across epochs, as in training."""
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, collate_fn=_collate,
                        persistent_workers=True, prefetch_factor=4)
    n = 0
    me0 = _ticks(os.getpid())
    t0 = time.perf_counter()
    for _ in range(epochs):
        for batch in loader:
            for data in batch:
                if len(data) != a.size:
                    raise AssertionError(f"sample of {len(data)} bytes, want {a.size}")
                n += 1
    dt = time.perf_counter() - t0
    cpu = (_ticks(os.getpid()) - me0 + sum(_ticks(w.pid) for w in loader._iterator._workers)) / CLK_TCK
    del loader
    for i in range(0, len(ds), 64):  # one sample in 64, byte for byte, outside the timing
        if ds[i] != sample(int(Path(ds.paths[i]).stem), a.size):
            raise AssertionError(f"sample {ds.paths[i]} differs")
    return dt, n, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=110 << 10)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--slow-epochs", type=int, default=1, help="epochs for (a) and (c), one request per sample")
    ap.add_argument("--quick", action="store_true", help="4,000 samples, 1 epoch")
    ap.add_argument("--only", default="abpcd", help="which loaders to run, e.g. 'bc'; 'p' is (b) with direct "
                    "DataNode reads off (every byte through the gateway)")
    a = ap.parse_args()
    if a.quick:
        a.samples, a.epochs, a.slow_epochs = 4000, 1, 1
    target = EpochfsTarget()
    local = Path(tempfile.mkdtemp(prefix="loader-bench-local-"))
    try:
        tgt = target.tgt
        endpoint = f"http://{tgt['host']}:{tgt['port']}"
        t0 = time.perf_counter()
        asyncio.run(upload(tgt, a.samples, a.size))
        print(f"# uploaded {a.samples} x {a.size} B in {time.perf_counter() - t0:.1f} s; {target.note}")
        (local / "train").mkdir()
        for i in range(a.samples):
            (local / "train" / f"{i:06d}.bin").write_bytes(sample(i, a.size))
        opts = {"endpoint_url": endpoint, "key": tgt["ak"], "secret": tgt["sk"]}
        s3opts = {"key": tgt["ak"], "secret": tgt["sk"], "client_kwargs": {"endpoint_url": endpoint}}
        loaders = {
            "a": ("epochfs:// per-file", lambda: PerFileDataset(f"epochfs://{BUCKET}/train", storage_options=opts)),
            "b": ("epochfs:// batch", lambda: PrefixDataset(f"epochfs://{BUCKET}/train", storage_options=opts)),
            "p": ("epochfs:// batch, proxy", lambda: PrefixDataset(f"epochfs://{BUCKET}/train",
                                                                   storage_options={**opts, "direct_reads": False})),
            "c": ("s3fs -> gateway", lambda: PrefixDataset(f"s3://{BUCKET}/train", storage_options=s3opts)),
            "d": ("local folder", lambda: PrefixDataset(str(local / "train"))),
        }
        meter = CpuMeter(target.pids)
        res = {}
        print(f"# {a.samples} samples x {a.epochs} epochs ((a) and (c): {a.slow_epochs}), batch {a.batch}, "
              f"{a.workers} workers, shuffled")
        print(f"{'loader':<24} {'samples/s':>10} {'MB/s':>8} {'server CPU/sample':>18} {'loader CPU/sample':>18}")
        for k in a.only:
            name, make = loaders[k]
            ds = make()
            assert len(ds) == a.samples, (name, len(ds))
            meter.settle(quiet_ticks=2, max_s=20)
            before = meter.snap()
            dt, n, own = read_all(ds, a, a.slow_epochs if k in "ac" else a.epochs)
            split = meter.delta(before, meter.snap())
            cpu = sum(split.values())
            rate = n / dt
            res[k] = rate
            per = f"{cpu / n * 1e6:,.0f} us" if k != "d" else "-"
            print(f"{name:<24} {rate:>10,.0f} {rate * a.size / 1e6:>8,.0f} {per:>18} {own / n * 1e6:>15,.0f} us",
                  flush=True)
            if k != "d":
                print("#   server CPU/sample: " + ", ".join(f"{p} {t / n * 1e6:,.0f} us" for p, t in split.items()))
        if "b" in res and "c" in res:
            print(f"ratio (b)/(c) = {res['b'] / res['c']:.2f}x   (b)/(a) = "
                  f"{res['b'] / res['a']:.2f}x" if "a" in res else f"ratio (b)/(c) = {res['b'] / res['c']:.2f}x")
        if "b" in res and "d" in res:
            print(f"ratio (b)/(d) = {res['b'] / res['d']:.2f}x")
        if "b" in res and "p" in res:
            print(f"ratio (b) direct / (b) proxy = {res['b'] / res['p']:.2f}x")
        print(f"# CPU ticks per second: {CLK_TCK}; server CPU is every epochfs process (gateway, NameNode, "
              "DataNodes); the loader's own processes are not counted")
    finally:
        target.stop()
        shutil.rmtree(local, ignore_errors=True)


if __name__ == "__main__":
    main()
