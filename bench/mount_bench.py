#!/usr/bin/env python3
"""Mount benchmark: training-style reads through `epochfs mount` next to the same reads from a local directory.

What it measures, in one run, through the mount and from a local copy of the same files:

    epoch 1..E   read N files of S bytes (default 20,000 x 110 KiB) in a new shuffled order each epoch with T reader
                 threads (default 8); files/s and MB/s per epoch
    sequential   a B-byte file (default 1 GiB) read front to back in 1 MiB reads, MB/s: one on the new mount before
                 the epochs, another after them (a different file, so that neither is in any cache); with the CPU the
                 mount and the cluster spent per MB, and what the cluster read from disk meanwhile (its page cache
                 lost the blocks: on one machine the DataNodes, the local copy and the mount share the memory)

The ratio column is mount / local (1.0 = local-directory speed). The local copy is read from the page cache (it was
just written), so it is the ceiling any file system on this machine can reach. The mount runs in dataset mode with
the block cache policy "none" (--mount-args to change) and is started fresh after the upload, so epoch 1 reads
everything from the cluster, once the cluster has settled after the upload (compactions, replication). "mount cpu
ms/file" is the FUSE process's CPU (utime+stime from /proc) per file read (per MB for the sequential read).

A sequential read through any cached file system puts the file into new page cache (the mount's block cache does not
keep a stream a second time). After the epochs this machine has few recently freed pages left, and on a VM whose
free memory goes back to the host (virtio-balloon free page reporting) a page the guest touches for the first time
costs a host fault. So the run also times the kernel alone putting B bytes into new page cache (a write to a new
tmpfs file, right after the mount's read): no cached read can fill the page cache faster than that at that moment.

How to run:

    python bench/mount_bench.py                 # full run: 20,000 files, 3 epochs, 1 GiB sequential
    python bench/mount_bench.py --quick         # 2,000 files, 2 epochs, 128 MiB
    python bench/mount_bench.py --mount-args="--cache off"     # the same without the client cache

It starts its own cluster (`epochfs up --data-dir <tmp> --port <free port>`) and mount (needs root and /dev/fuse),
and tears both down at the end.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
from botocore.config import Config

from epochfs.common import ports


def random_source(mib: int) -> Path:
    """A file of `mib` MiB of random bytes for dd to copy, in /dev/shm (memory: not the disk the benchmark writes
    to) where there is one. Never /dev/zero: the DataNodes store a large block of zeros as its size alone (and the
    client sends it so), which would measure that path, not a write. The caller deletes it."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, name = tempfile.mkstemp(prefix="epochfs-bench-src-", dir=d)
    with os.fdopen(fd, "wb") as f:
        for _ in range(0, mib, 64):
            f.write(os.urandom(min(64, mib) << 20))
    os.truncate(name, mib << 20)
    return Path(name)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def settle(pid: int, quiet: float = 0.05, timeout: float = 180.0) -> float:
    """Wait until the cluster under `pid` uses less than `quiet` of a core for two seconds running (RocksDB
    compactions and replication after the upload), so that epoch 1 measures reads of a dataset at rest, as
    training finds it; returns the seconds waited."""
    t0, calm = time.monotonic(), 0

    def used() -> float:
        total = 0.0
        for p in descendants(pid):
            try:
                total += cpu_seconds(p)
            except (OSError, ValueError, IndexError):
                pass
        return total

    last = used()
    while calm < 2 and time.monotonic() - t0 < timeout:
        time.sleep(1)
        now = used()
        calm = calm + 1 if now - last < quiet else 0
        last = now
    return time.monotonic() - t0


def start_cluster(root: Path) -> tuple[subprocess.Popen, dict]:
    port = ports.free_block(20)  # `epochfs up` uses the port and the 15 after it
    p = subprocess.Popen([sys.executable, "-m", "epochfs.frontends.cli.main", "up", "--data-dir", str(root / "data"),
                          "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("export AWS_ENDPOINT_URL="):
            env = dict(re.findall(r"(AWS_[A-Z_]+)=(\S+)", line))
            return p, {k: v.strip("'\"") for k, v in env.items()}
    raise RuntimeError("epochfs up did not print its exports")


def mount(env: dict, bucket: str, mp: Path, extra: list[str], log: Path) -> subprocess.Popen:
    mp.mkdir(parents=True, exist_ok=True)
    p = subprocess.Popen([sys.executable, "-m", "epochfs.frontends.cli.main", "mount", "-f", bucket, str(mp),
                          f"--endpoint={env['AWS_ENDPOINT_URL']}", f"--access-key={env['AWS_ACCESS_KEY_ID']}",
                          f"--secret-key={env['AWS_SECRET_ACCESS_KEY']}", *extra],
                         stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not os.path.ismount(mp):
        if p.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"mount failed: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    return p


def teardown(tmp: Path, cluster: subprocess.Popen, mounts: list, failed: bool) -> None:
    """End of a mount bench: after a failure the mount's own log (its account, before the folder goes), then each
    mount (or None) and the cluster stopped, and the folder removed."""
    log = tmp / "mount.log"
    if failed and log.exists():
        print(f"--- end of {log}:\n{log.read_text(errors='replace')[-4000:]}", file=sys.stderr)
    for m in mounts:
        if m is not None:
            m.send_signal(signal.SIGTERM)
            m.wait(timeout=60)
    cluster.send_signal(signal.SIGTERM)
    cluster.wait(timeout=60)
    shutil.rmtree(tmp, ignore_errors=True)


def read_epoch(root: Path, names: list[str], threads: int, seed: int) -> tuple[float, int]:
    order = list(names)
    random.Random(seed).shuffle(order)

    def read(name: str) -> int:
        with open(root / name, "rb", buffering=0) as f:
            return len(f.read())

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as ex:
        total = sum(ex.map(read, order, chunksize=64))
    return time.perf_counter() - t0, total


def read_sequential(path: Path) -> tuple[float, int]:
    buf = bytearray(1 << 20)
    n = 0
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                break
            n += k
    return time.perf_counter() - t0, n


def cluster_usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, bytes read from disk) of the cluster's processes (`epochfs up` and its children)."""
    cpu, disk = 0.0, 0
    for p in descendants(pid):
        try:
            cpu += cpu_seconds(p)
            disk += next(int(line.split()[1]) for line in Path(f"/proc/{p}/io").read_text().splitlines()
                         if line.startswith("read_bytes:"))
        except (OSError, ValueError, IndexError, StopIteration):
            pass
    return cpu, disk


def sequential(name: str, pid: int, cluster: int, mnt: Path, local: Path, file: str) -> tuple:
    """(name, mount MB/s, local MB/s, mount CPU ms per MB, cluster CPU ms per MB, MB the cluster read from disk) of
    reading `file` through the mount, then locally."""
    cpu0, (ccpu0, disk0) = cpu_seconds(pid), cluster_usage(cluster)
    t_m, n_m = read_sequential(mnt / file)
    mb = n_m / 1e6
    cpu, (ccpu, disk) = cpu_seconds(pid), cluster_usage(cluster)
    t_l, n_l = read_sequential(local / file)
    assert n_m == n_l
    return name, mb / t_m, n_l / t_l / 1e6, (cpu - cpu0) / mb * 1e3, (ccpu - ccpu0) / mb * 1e3, (disk - disk0) / 1e6


def new_page_cache_mb_s(nbytes: int) -> float | None:
    """MB/s of the kernel alone putting `nbytes` into new page cache: 1 MiB writes of one buffer to a new file in
    /dev/shm (tmpfs), removed afterwards; None without /dev/shm."""
    if not os.path.isdir("/dev/shm"):
        return None
    buf = os.urandom(1 << 20)
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="mount-bench-")
    try:
        t0 = time.perf_counter()
        for _ in range(nbytes >> 20):
            os.write(fd, buf)
        return (nbytes >> 20 << 20) / (time.perf_counter() - t0) / 1e6
    finally:
        os.close(fd)
        os.unlink(path)


def upload(s3, bucket: str, names: list[str], size: int, local: Path) -> None:
    def put(name: str) -> None:
        body = random.Random(name).randbytes(size)
        (local / name).write_bytes(body)
        s3.put_object(Bucket=bucket, Key=name, Body=body)

    for d in {str(Path(n).parent) for n in names}:
        (local / d).mkdir(parents=True, exist_ok=True)
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(put, names))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=110 << 10)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--big", type=int, default=1 << 30, help="bytes of the sequential file")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mount-args", default="--dataset --cache none --cache-mem 4G")
    a = ap.parse_args()
    if a.quick:
        a.files, a.epochs, a.big = 2_000, 2, 128 << 20
    tmp = Path(tempfile.mkdtemp(prefix="mount-bench-"))
    cluster, env = start_cluster(tmp)
    mnt = None
    try:
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1",
                          config=Config(max_pool_connections=16))
        s3.create_bucket(Bucket="bench")
        local = tmp / "local"
        names = [f"shard{i % 100:03d}/sample{i:06d}.bin" for i in range(a.files)]
        print(f"uploading {a.files} files of {a.size} B and two of {a.big} B ...", flush=True)
        upload(s3, "bench", names, a.size, local)
        for name in ("fresh.bin", "big.bin"):
            big = os.urandom(1 << 20) * (a.big >> 20)
            (local / name).write_bytes(big)
            s3.upload_fileobj(open(local / name, "rb"), "bench", name)
            del big
        print(f"cluster settled after {settle(cluster.pid):.0f} s", flush=True)
        mnt = mount(env, "bench", tmp / "mnt", shlex.split(a.mount_args), tmp / "mount.log")
        seq = [sequential("sequential, new mount", mnt.pid, cluster.pid, tmp / "mnt", local, "fresh.bin")]
        rows = []
        for e in range(1, a.epochs + 1):
            cpu0 = cpu_seconds(mnt.pid)
            t_m, n_m = read_epoch(tmp / "mnt", names, a.threads, e)
            cpu = cpu_seconds(mnt.pid) - cpu0
            t_l, n_l = read_epoch(local, names, a.threads, e)
            assert n_m == n_l == a.files * a.size
            rows.append((f"epoch {e}", a.files / t_m, n_m / t_m / 1e6, a.files / t_l, n_l / t_l / 1e6,
                         cpu / a.files * 1e3))
        seq.append(sequential("sequential, after the epochs", mnt.pid, cluster.pid, tmp / "mnt", local, "big.bin"))
        fill = new_page_cache_mb_s(a.big)
        print(f"\nmount args: {a.mount_args}; {a.threads} reader threads; {os.cpu_count()} cores\n")
        print(f"{'phase':<12}{'mount files/s':>15}{'mount MB/s':>12}{'local files/s':>15}{'local MB/s':>12}"
              f"{'ratio':>8}{'mount cpu ms/file':>19}")
        for name, fm, mm, fl, ml, cpu in rows:
            print(f"{name:<12}{fm:>15,.0f}{mm:>12,.1f}{fl:>15,.0f}{ml:>12,.1f}{fm / fl:>8.2f}{cpu:>19.3f}")
        print(f"\n{'sequential read of ' + format(a.big >> 20, ',') + ' MiB':<30}{'mount MB/s':>12}{'local MB/s':>12}"
              f"{'ratio':>8}{'mount cpu ms/MB':>17}{'cluster cpu ms/MB':>19}{'cluster disk MB':>17}")
        for name, mm, ml, cpu, ccpu, disk in seq:
            print(f"{name:<30}{mm:>12,.1f}{ml:>12,.1f}{mm / ml:>8.2f}{cpu:>17.3f}{ccpu:>19.3f}{disk:>17,.0f}")
        if fill is not None:
            print(f"{'new page cache (tmpfs write)':<30}{fill:>12,.1f}{'':>12}{'':>17}   (right after the mount's read: "
                  f"after the epochs mount/this = {seq[-1][1] / fill:.2f})")
    except BaseException:
        teardown(tmp, cluster, [mnt], True)
        raise
    teardown(tmp, cluster, [mnt], False)


if __name__ == "__main__":
    main()
