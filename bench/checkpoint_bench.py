#!/usr/bin/env python3
"""Checkpoint benchmark: a ~1 GiB model state dict saved and loaded through epochfs next to the same on local disk,
in one run (the machine is shared and noisy: the ratios are what count).

    torch.save       torch.save into an open file, flush + fsync, close (a durable checkpoint): the mount vs a local
                     folder; torch.load back (mmap=False, every byte read)
    DCP              torch.distributed.checkpoint save/load (one process): FsspecWriter/FsspecReader on
                     epochfs://bench/... vs FileSystemWriter/FileSystemReader on a local folder, each with
                     --threads writer threads (DCP's thread_count: one file per thread); also FileSystemWriter on the
                     mount

Every load is checked against the saved tensors (bitwise). MB/s are of the state dict's tensor bytes. "client cpu" is
this process (torch, fsspec), "mount cpu" the FUSE process, "cluster cpu" every process of `epochfs up` (gateway,
NameNode, DataNodes), all from /proc, in ms per MiB. The load average (1 min) is printed before and after.

    python bench/checkpoint_bench.py                  # 1 GiB, 4 threads
    python bench/checkpoint_bench.py --mib 256        # a loaded machine
    python bench/checkpoint_bench.py --only dcp       # or save (torch.save/load)
    python bench/checkpoint_bench.py --torch-threads 1  # torch's intra-op threads, for both sides

On a machine whose cores the cluster shares (this 2-core one), torch's OpenMP workers, which spin-wait after each
parallel copy_ (DCP copies every loaded tensor into its target), take the core the epochfs reader's fetches and the
DataNodes need; `--torch-threads 1` leaves it to them (the local runs then use one thread too).

Needs torch (CPU is enough), root and /dev/fuse for the mount phases (skipped without them, saying so). Starts its own
cluster (`epochfs up` in a temporary folder) and tears it down.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mount_bench import cpu_seconds, descendants, mount, settle, start_cluster, teardown  # noqa: E402

warnings.filterwarnings("ignore", message="torch.distributed is disabled")
warnings.filterwarnings("ignore", message="Detected an existing checkpoint")
MiB = 1 << 20


def state_dict(mib: int, seed: int = 0) -> dict:
    """A transformer-like state: 8 MiB fp32 weight matrices (about 90 %), their biases and norms, and AdamW-like
    moments for a third of them (as a sharded optimizer state would be), plus a few scalars."""
    g = torch.Generator().manual_seed(seed)
    sd, total, i = {}, 0, 0
    while total < mib * MiB:
        w = torch.randn(1024, 2048, generator=g)
        sd[f"layers.{i}.weight"] = w
        sd[f"layers.{i}.bias"] = torch.randn(1024, generator=g)
        sd[f"layers.{i}.norm"] = torch.ones(2048, dtype=torch.bfloat16)
        total += w.nbytes + 4096 + 4096
        i += 1
    sd["step"] = torch.tensor(1000)
    return sd


def nbytes(sd: dict) -> int:
    return sum(t.nbytes for t in sd.values() if isinstance(t, torch.Tensor))


def same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, t in a.items():
        assert b[k].dtype == t.dtype and torch.equal(b[k], t), k


def empty_like(sd: dict) -> dict:
    return {k: torch.empty_like(t) for k, t in sd.items()}


def service_cpu(cluster_pid: int) -> dict[str, float]:
    """CPU seconds of the cluster's processes by service (gateway, namenode, datanode: the three summed)."""
    out = {"gateway": 0.0, "namenode": 0.0, "datanode": 0.0}
    for p in descendants(cluster_pid):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
            role = next((r for r in out if f"epochfs.{r}".encode() in cmd), None)
            if role is not None:
                out[role] += cpu_seconds(p)
        except (OSError, ValueError, IndexError):
            pass
    return out


def fsync_save(sd: dict, path: Path) -> None:
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())


class Meter:
    def __init__(self, mnt_pid: int | None, cluster_pid: int) -> None:
        self.mnt_pid, self.cluster_pid = mnt_pid, cluster_pid

    def __call__(self, fn) -> tuple[float, float, float, dict[str, float]]:
        """(seconds, client cpu, mount cpu, cluster cpu by service) of fn()."""
        m0 = cpu_seconds(self.mnt_pid) if self.mnt_pid else 0.0
        c0, p0 = service_cpu(self.cluster_pid), time.process_time()
        t0 = time.monotonic()
        fn()
        dt = time.monotonic() - t0
        c1 = service_cpu(self.cluster_pid)
        return (dt, time.process_time() - p0, (cpu_seconds(self.mnt_pid) - m0) if self.mnt_pid else 0.0,
                {k: c1[k] - c0[k] for k in c0})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="state dict size")
    ap.add_argument("--threads", type=int, default=4, help="DCP writer threads (thread_count)")
    ap.add_argument("--only", choices=("save", "dcp"))
    ap.add_argument("--no-mount", action="store_true", help="skip the mount phases")
    ap.add_argument("--sync-files", action="store_true",
                    help="FsspecWriter(sync_files=True): DCP then calls os.sync() (fsspec files have no fileno)")
    ap.add_argument("--mount-args", default="")
    ap.add_argument("--torch-threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    if a.torch_threads:
        torch.set_num_threads(a.torch_threads)
    use_mount = not a.no_mount and os.path.exists("/dev/fuse") and os.geteuid() == 0 and shutil.which("fusermount3")
    if not use_mount and not a.no_mount:
        print("no /dev/fuse, fusermount3 or root: the mount phases are skipped")
    print(f"load average before: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    sd = state_dict(a.mib)
    size = nbytes(sd)
    print(f"state dict: {len(sd)} tensors, {size / MiB:.0f} MiB")
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-bench-"))
    cluster, env = start_cluster(tmp)
    os.environ.update(env)
    mnt = None
    rows: list[tuple[str, tuple, tuple]] = []
    try:
        import fsspec
        fs = fsspec.filesystem("epochfs")
        fs.mkdir("bench")
        local = tmp / "local"
        local.mkdir()
        settle(cluster.pid)
        meter = Meter(None, cluster.pid)
        if use_mount:
            mnt = mount(env, "bench", tmp / "mnt", a.mount_args.split(), tmp / "mount.log")
            meter = Meter(mnt.pid, cluster.pid)
        mp = tmp / "mnt"
        failed: list[str] = []

        def attempt(name: str, fn, lo, check=lambda: None) -> None:
            """Time fn() on epochfs against the local run `lo`; a failure is reported, not fatal (DCP's writer
            threads swallow their errors: a bad save shows at its load)."""
            try:
                res = meter(fn)
                check()
                rows.append((name, res, lo))
            except Exception as e:  # noqa: BLE001 -- reported with the figures
                failed.append(f"{name}: {type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}")

        if a.only in (None, "save") and use_mount:
            lo = meter(lambda: fsync_save(sd, local / "ckpt.pt"))
            attempt("torch.save + fsync", lambda: fsync_save(sd, mp / "ckpt.pt"), lo)
            got: dict = {}
            lo = meter(lambda: got.update(local=torch.load(local / "ckpt.pt", weights_only=True)))
            same(sd, got.pop("local"))
            attempt("torch.load", lambda: got.update(mount=torch.load(mp / "ckpt.pt", weights_only=True)), lo,
                    lambda: same(sd, got.pop("mount")))
        if a.only in (None, "dcp"):
            threads = a.threads
            url = "epochfs://bench/dcp/step-1"
            lo = meter(lambda: dcp.save(sd, storage_writer=FileSystemWriter(local / "dcp", thread_count=threads)))
            attempt(f"DCP save epochfs:// ({threads} thr)",
                    lambda: dcp.save(sd, storage_writer=FsspecWriter(url, thread_count=threads,
                                                                    sync_files=a.sync_files)), lo)
            if use_mount:
                attempt(f"DCP save mount ({threads} thr)",
                        lambda: dcp.save(sd, storage_writer=FileSystemWriter(mp / "dcp", thread_count=threads)), lo)
            into = empty_like(sd)
            lo = meter(lambda: dcp.load(into, storage_reader=FileSystemReader(local / "dcp")))
            same(sd, into)
            into = empty_like(sd)
            attempt("DCP load epochfs://", lambda: dcp.load(into, storage_reader=FsspecReader(url)), lo,
                    lambda: same(sd, into))
            if use_mount:
                into2 = empty_like(sd)
                attempt("DCP load mount", lambda: dcp.load(into2, storage_reader=FileSystemReader(mp / "dcp")), lo,
                        lambda: same(sd, into2))
        mib = size / MiB
        print(f"\nload average after: {os.getloadavg()[0]:.1f}; mount args {a.mount_args!r}; FsspecWriter "
              f"sync_files={a.sync_files}; torch threads {torch.get_num_threads()}\n")
        print(f"{'phase':<30}{'epochfs MB/s':>13}{'local MB/s':>12}{'ratio':>7}{'client':>8}{'mount':>7}"
              f"{'cluster':>9}{'gw':>6}{'nn':>6}{'dn':>6}  cpu ms/MiB (epochfs side)")
        for name, (t, cc, mc, kc), (lt, *_) in rows:
            per = {k: v / mib * 1e3 for k, v in kc.items()}
            print(f"{name:<30}{size / t / 1e6:>13,.0f}{size / lt / 1e6:>12,.0f}{lt / t:>7.2f}{cc / mib * 1e3:>8.2f}"
                  f"{mc / mib * 1e3:>7.2f}{sum(per.values()):>9.2f}{per['gateway']:>6.2f}{per['namenode']:>6.2f}"
                  f"{per['datanode']:>6.2f}")
        for f in failed:
            print(f"FAILED {f}")
    except BaseException:
        teardown(tmp, cluster, [mnt], True)
        raise
    teardown(tmp, cluster, [mnt], False)


if __name__ == "__main__":
    main()
