#!/usr/bin/env python3
"""Mount write benchmark: writes through `epochfs mount` next to the same writes into a local directory, one run.

    dd       `dd if=<random> of=<dir>/big bs=4M count=N conv=fsync` (default N = 256: 1 GiB), MB/s; <random> is a
             file of random bytes in /dev/shm (zeros would take the DataNodes' zero-block path, not a write)
    tar xf   an archive of F generated files of 1-16 KiB (default 5,000, in 50 folders) unpacked into <dir>, files/s;
             then every file's mtime is checked against the archive's

With --writeback the same dd and tar also run on a second mount of the bucket with `--writeback` (new small files
made in the mount and created in batches after close), in the same run; "tar xf ... committed" is the time until
every file is listed through S3 (all created on the NameNode).

The ratio column is mount / local. "mount cpu" is the FUSE process's CPU (utime+stime from /proc), "cluster cpu" that
of every process of `epochfs up` (gateway, NameNode, DataNodes), "machine cpu" the whole machine's busy time
(/proc/stat: the writer, the kernel's writeback and everything else running), per MB for dd and per file for tar.

How to run (needs root and /dev/fuse; starts its own cluster and mount, and tears both down):

    python bench/mount_write_bench.py                    # 1 GiB dd, 5,000 files
    python bench/mount_write_bench.py --quick            # 256 MiB dd, 1,000 files
    python bench/mount_write_bench.py --writeback        # and again on a --writeback mount
    python bench/mount_write_bench.py --writeback-only   # on the --writeback mount only
    python bench/mount_write_bench.py --profile out.txt  # the same with py-spy recording the mount (needs py-spy)
"""
from __future__ import annotations

import argparse
import io
import os
import random
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import boto3

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_bench import cpu_seconds, descendants, mount, random_source, settle, start_cluster, teardown  # noqa: E402


def tree_cpu(pid: int) -> float:
    total = 0.0
    for p in descendants(pid):
        try:
            total += cpu_seconds(p)
        except (OSError, ValueError, IndexError):
            pass
    return total


def make_tar(path: Path, files: int, seed: int = 1) -> dict[str, int]:
    """An archive of `files` files of 1-16 KiB with distinct past mtimes; returns name -> mtime."""
    rnd = random.Random(seed)
    mtimes = {}
    with tarfile.open(path, "w") as t:
        for i in range(files):
            name = f"d{i % 50:02d}/f{i:05d}.bin"
            data = rnd.randbytes(rnd.randint(1 << 10, 16 << 10))
            ti = tarfile.TarInfo(name)
            ti.size, ti.mtime, ti.mode = len(data), 1_500_000_000 + i * 7, 0o644
            t.addfile(ti, io.BytesIO(data))
            mtimes[name] = ti.mtime
    return mtimes


def machine_busy() -> float:
    """Seconds of CPU the whole machine spent busy (/proc/stat: user, nice, system, irq, softirq): the kernel's
    writeback and block threads too, which no process of ours is charged for."""
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return sum(int(f[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")


def measure(fn, mnt_pid: int | None, cluster_pid: int) -> tuple[float, float, float, float]:
    m0 = cpu_seconds(mnt_pid) if mnt_pid else 0.0
    c0 = tree_cpu(cluster_pid)
    b0 = machine_busy()
    t0 = time.monotonic()
    fn()
    dt = time.monotonic() - t0
    return dt, (cpu_seconds(mnt_pid) - m0 if mnt_pid else 0.0), tree_cpu(cluster_pid) - c0, machine_busy() - b0


def dd(source: Path, target: Path, count: int) -> None:
    subprocess.run(["dd", f"if={source}", f"of={target}", "bs=4M", f"count={count}", "conv=fsync"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def untar(archive: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "xf", str(archive), "-C", str(into)], check=True)


def committed(s3, prefix: str, files: int, timeout: float = 300) -> int:
    """Wait until `files` files are listed under `prefix` through S3; how many were."""
    deadline = time.monotonic() + timeout
    while True:
        n = sum(1 for page in s3.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix=prefix)
                for o in page.get("Contents", []) if not o["Key"].endswith("/"))
        if n >= files or time.monotonic() > deadline:
            return n
        time.sleep(0.2)


def check_mtimes(root: Path, mtimes: dict[str, int]) -> int:
    """How many files lack or have another mtime than the archive's."""
    bad = 0
    for name, mt in mtimes.items():
        try:
            if int((root / name).stat().st_mtime) != mt:
                bad += 1
        except OSError:
            bad += 1
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=256, help="4 MiB blocks dd writes")
    ap.add_argument("--files", type=int, default=5_000)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mount-args", default="")
    ap.add_argument("--profile", help="record the mount (its CPU) with py-spy into this file (collapsed stacks)")
    ap.add_argument("--only", choices=("dd", "tar"))
    ap.add_argument("--writeback", action="store_true", help="also on a second mount with --writeback")
    ap.add_argument("--writeback-only", action="store_true", help="only on the mount with --writeback")
    a = ap.parse_args()
    if a.quick:
        a.count, a.files = 64, 1_000
    a.writeback = a.writeback or a.writeback_only
    tmp = Path(tempfile.mkdtemp(prefix="mount-wbench-"))
    cluster, env = start_cluster(tmp)
    mnt = spy = wb = None
    try:
        s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        archive = tmp / "files.tar"
        mtimes = make_tar(archive, a.files)
        local = tmp / "local"
        local.mkdir()
        settle(cluster.pid)
        mnt = mount(env, "bench", tmp / "mnt", shlex.split(a.mount_args), tmp / "mount.log")
        if a.profile:
            spy = subprocess.Popen(["py-spy", "record", "-p", str(mnt.pid), "-o", a.profile, "--format", "raw"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1)
        mp = tmp / "mnt"
        targets = [("", mnt, mp)]
        if a.writeback:
            wb = mount(env, "bench", tmp / "wb", ["--writeback", *shlex.split(a.mount_args)], tmp / "wb.log")
            targets.append((" writeback", wb, tmp / "wb" / "w"))
            (tmp / "wb" / "w").mkdir()
            if a.writeback_only:
                del targets[0]
        rows = []
        if a.only in (None, "dd"):
            nbytes = a.count * (4 << 20)
            src = random_source(a.count * 4)
            try:
                lm = measure(lambda: dd(src, local / "big", a.count), None, cluster.pid)
                for label, m, root in targets:
                    mm = measure(lambda: dd(src, root / "big", a.count), m.pid, cluster.pid)
                    assert (root / "big").stat().st_size == nbytes
                    rows.append((f"dd {nbytes >> 20} MiB{label} (MB/s)", nbytes / mm[0] / 1e6, nbytes / lm[0] / 1e6,
                                 mm[1] / nbytes * 1e9, mm[2] / nbytes * 1e9, mm[3] / nbytes * 1e9, "ms/MB"))
            finally:
                src.unlink()
        if a.only in (None, "tar"):
            lm = measure(lambda: untar(archive, local / "t"), None, cluster.pid)
            for label, m, root in targets:
                prefix = str((root / "t").relative_to(mp if m is mnt else tmp / "wb")) + "/"
                mm = measure(lambda: untar(archive, root / "t"), m.pid, cluster.pid)
                rows.append((f"tar xf {a.files}{label} (files/s)", a.files / mm[0], a.files / lm[0],
                             mm[1] / a.files * 1e3, mm[2] / a.files * 1e3, mm[3] / a.files * 1e3, "ms/file"))
                t0 = time.monotonic()
                listed = committed(s3, prefix, a.files)
                done = mm[0] + time.monotonic() - t0
                bad = check_mtimes(root / "t", mtimes)
                if label:
                    rows.append(("  ... committed (files/s)", a.files / done, a.files / lm[0], 0, 0, 0, ""))
                print(f"tar{label}: mount {mm[0]:.2f} s (all {listed} listed through S3 after {done:.2f} s), local "
                      f"{lm[0]:.2f} s; files with a wrong mtime: {bad}")
        print(f"\nmount args: {a.mount_args!r}; {os.cpu_count()} cores\n")
        print(f"{'phase':<26}{'mount':>10}{'local':>12}{'ratio':>8}{'mount cpu':>12}{'cluster cpu':>13}"
              f"{'machine cpu':>13}")
        for name, m, lo, mc, cc, bc, unit in rows:
            print(f"{name:<26}{m:>10,.1f}{lo:>12,.1f}{m / lo:>8.3f}{mc:>12.3f}{cc:>13.3f}{bc:>13.3f}  {unit}")
    except BaseException:
        _stop_spy(spy)
        teardown(tmp, cluster, [wb, mnt], True)
        raise
    _stop_spy(spy)
    teardown(tmp, cluster, [wb, mnt], False)


def _stop_spy(spy) -> None:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


if __name__ == "__main__":
    main()
