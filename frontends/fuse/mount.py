"""`epochfs mount [BUCKET[/PREFIX]] MOUNTPOINT` and `epochfs umount MOUNTPOINT`.

The mount runs pyfuse3 under trio in the foreground (-f) or, by default, as a background process of its own that the
command waits for until the mount is up. SIGTERM and SIGINT unmount it cleanly.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyfuse3
import trio

from epochfs.common.client import S3Client
from epochfs.common.service import keep_buffers_on_heap, setup_logging

from .ops import EpochOperations
from .options import MountOptions, options

log = logging.getLogger("epochfs.mount")


def fuse_options(opts: MountOptions, allow_other: bool) -> set[str]:
    out = {"fsname=epochfs", "subtype=epochfs", "default_permissions"}
    if allow_other:
        out.add("allow_other")
    if opts.read_only:
        out.add("ro")
    return out


def read_large_bodies() -> None:
    """httpcore reads a response 64 KiB per socket read, each one a trip through h11's and trio's machinery: most of
    the mount's CPU when it fetches 4 MiB chunks. Reads of 1 MiB cut that 16-fold (this process only)."""
    from httpcore._async.http11 import AsyncHTTP11Connection
    AsyncHTTP11Connection.READ_NUM_BYTES = max(AsyncHTTP11Connection.READ_NUM_BYTES, 1 << 20)


async def set_kernel_readahead(mountpoint: str, nbytes: int) -> None:
    """Let the kernel read ahead `nbytes` of a sequential reader (its default for FUSE is 128 KiB, which caps
    every read request at that size). The kernel sets it from the mount's INIT reply, so this waits for the first
    answer after INIT: a stat of the mount root, from a thread (this process answers it). The backing device is
    found in /proc/self/mountinfo. Best effort: without root or sysfs the default stays."""
    try:
        await trio.to_thread.run_sync(os.stat, mountpoint)
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            f = line.split()
            if f[4] == mountpoint:
                Path(f"/sys/class/bdi/{f[2]}/read_ahead_kb").write_text(str(nbytes >> 10))
    except OSError as e:
        log.info("kernel readahead left at its default: %s", e)


async def serve(ops: EpochOperations, mountpoint: str, fuse_opts: set[str]) -> None:
    read_large_bodies()
    await ops.start()
    pyfuse3.init(ops, mountpoint, fuse_opts)
    try:
        async with trio.open_nursery() as nursery:
            ops.nursery = nursery
            nursery.start_soon(_stop_on_signal)
            nursery.start_soon(set_kernel_readahead, mountpoint, ops.o.readahead * ops.o.chunk_size)
            await pyfuse3.main()
            await ops.writes.settle_all()  # write-back: the files closed but not yet committed
            nursery.cancel_scope.cancel()
    finally:
        pyfuse3.close(unmount=True)
        await ops.close()


async def _stop_on_signal() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            pyfuse3.terminate()
            return


def cmd_mount(args) -> int:
    mp = os.path.abspath(args.mountpoint)
    if not os.path.isdir(mp):
        print(f"epochfs mount: {mp} is not a directory", file=sys.stderr)
        return 2
    if os.path.ismount(mp):  # FUSE would stack a second mount over it, hiding the first: a slip, not a wish
        print(f"epochfs mount: {mp} is a mount point already (epochfs umount {mp} first)", file=sys.stderr)
        return 2
    if not args.foreground:
        return _mount_background(mp)
    setup_logging("warning")
    keep_buffers_on_heap(64 << 20)  # the block cache and RPC payloads, as in the services
    opts = options(args)
    if opts.cache_dir is not None:
        opts.cache_dir.mkdir(parents=True, exist_ok=True)
    # dataset mode takes the tree as immutable: its namespace reads may come from a standby NameNode (HA)
    client = S3Client(args.endpoint, args.access_key, args.secret_key, timeout=opts.timeout, stale_reads=opts.dataset)
    ops = EpochOperations(client, opts)
    try:
        trio.run(serve, ops, mp, fuse_options(opts, not args.no_allow_other))
    except Exception as e:  # noqa: BLE001 -- the command's one place to turn a failure into a message
        print(f"epochfs mount: {e}", file=sys.stderr)
        return 1
    _drop_empty_log()
    return 0


LOG_ENV = "EPOCHFS_MOUNT_LOG"  # the daemon's log file (_mount_background), dropped at a clean exit if it is empty


def _drop_empty_log() -> None:
    path = os.environ.get(LOG_ENV)
    try:
        if path and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass


def _mount_background(mp: str) -> int:
    """Run this same command with -f in a new session and wait until the mount is up (or the child gave up). The
    daemon logs to a file of its own: the terminal that started it may be long gone when it has something to say
    (the file goes when the mount ends cleanly with nothing in it, or when it gave up before mounting: what it said
    is shown then)."""
    argv = [sys.executable, "-m", "epochfs.frontends.cli.main", *sys.argv[1:], "--foreground"]
    log = tempfile.NamedTemporaryFile(prefix="epochfs-mount-", suffix=".log", delete=False)
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                         env={**os.environ, LOG_ENV: log.name})
    log.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.ismount(mp):
            print(f"epochfs mounted on {mp} (pid {p.pid}, log {log.name}); unmount with: epochfs umount {mp}",
                  file=sys.stderr)
            return 0
        if p.poll() is not None:  # it gave up: what it said is shown here, and its log goes (nothing else in it)
            sys.stderr.write(Path(log.name).read_text())
            with contextlib.suppress(OSError):
                os.unlink(log.name)
            return p.returncode or 1
        time.sleep(0.05)
    p.terminate()
    print(f"epochfs mount: {mp} did not come up within 30 s (its log: {log.name})", file=sys.stderr)
    return 1


def cmd_umount(args) -> int:
    mp = os.path.abspath(args.mountpoint)
    tool = shutil.which("fusermount3") or shutil.which("fusermount")
    cmd = [tool, "-u", mp] if tool else ["umount", mp]
    if args.lazy:
        cmd = [tool, "-u", "-z", mp] if tool else ["umount", "-l", mp]
    return subprocess.call(cmd)
