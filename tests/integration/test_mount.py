"""The POSIX mount on a live cluster: each operation, rename atomicity, close-to-open through S3, errno mapping."""
from __future__ import annotations

import ctypes
import errno
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from cluster import MAIN
from mounting import Mount, needs_fuse

pytestmark = [pytest.mark.integration, needs_fuse]


def _renameat2(src, dst, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(src), -100, os.fsencode(dst), flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(dst))


def test_files_dirs_and_attributes(cluster, mnt, s3, bucket):
    root = mnt.path
    (root / "d").mkdir(mode=0o750)
    f = root / "d" / "f.bin"
    f.write_bytes(b"hello world")
    assert f.read_bytes() == b"hello world"
    st = f.stat()
    assert stat.S_ISREG(st.st_mode) and st.st_size == 11 and st.st_uid == 0
    assert stat.S_IMODE((root / "d").stat().st_mode) == 0o750
    assert st.st_blksize == 1 << 20  # the kernel's largest write: cp and buffered writers write that much at a time

    os.chmod(f, 0o640)
    os.chown(f, 1234, 5678)
    os.utime(f, ns=(1_000_000_000_123, 2_000_000_000_456))
    st = f.stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, 1234, 5678)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)

    os.truncate(f, 5)
    assert f.read_bytes() == b"hello"
    os.truncate(f, 8)
    assert f.read_bytes() == b"hello\0\0\0"
    os.truncate(f, 0)
    assert f.read_bytes() == b""

    with open(f, "r+b") as fh:  # random writes in place, and past the end
        fh.write(b"0123456789")
        fh.seek(3)
        fh.write(b"ab")
        fh.seek(12)
        fh.write(b"Z")
        fh.flush()
        fh.seek(0)
        assert fh.read() == b"012ab56789\0\0Z"
    assert s3.get_object(Bucket=bucket, Key="d/f.bin")["Body"].read() == b"012ab56789\0\0Z"

    os.symlink("f.bin", root / "d" / "link")
    assert os.readlink(root / "d" / "link") == "f.bin"
    assert (root / "d" / "link").read_bytes() == b"012ab56789\0\0Z"
    assert stat.S_ISLNK(os.lstat(root / "d" / "link").st_mode)

    os.link(f, root / "d" / "hard")
    assert f.stat().st_nlink == 2
    (root / "d" / "hard").write_bytes(b"via the other name")
    assert f.read_bytes() == b"via the other name"
    assert s3.get_object(Bucket=bucket, Key="d/f.bin")["Body"].read() == b"via the other name"
    os.unlink(root / "d" / "hard")
    assert f.stat().st_nlink == 1

    os.mkfifo(root / "d" / "fifo")
    assert stat.S_ISFIFO(os.stat(root / "d" / "fifo").st_mode)
    assert sorted(os.listdir(root / "d")) == ["f.bin", "fifo", "link"]
    # S3 sees regular files and directories only
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["d/", "d/f.bin"]

    with pytest.raises(OSError) as e:
        os.rmdir(root / "d")
    assert e.value.errno == errno.ENOTEMPTY
    for name in ("f.bin", "fifo", "link"):
        os.unlink(root / "d" / name)
    os.rmdir(root / "d")
    assert os.listdir(root) == []
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    sv = os.statvfs(root)
    assert sv.f_blocks > 0 and sv.f_namemax == 255
    # df: the cluster's three DataNodes share this machine's disk, whose free space counts once (not three times)
    assert sv.f_bavail * sv.f_frsize == pytest.approx(shutil.disk_usage(cluster.root).free, rel=0.02)


def _nn_calls(cluster, op: str) -> float:
    text = httpx.get(f"http://{cluster.addr('nn')}:{cluster.ports['nn'][0]}/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f'epochfs_rpc_calls_total{{op="{op}"}} '))


def test_an_unlink_gives_its_folder_the_new_times_without_a_getattr_request(cluster, mnt):
    """The kernel drops a folder's attributes after each unlink in it and asks again (rm -rf: once per file); the
    unlink's reply carries the NameNode's time, which the mount keeps as the folder's mtime and ctime."""
    d = mnt.path / "rmd"
    d.mkdir()
    for i in range(20):
        (d / f"f{i}").write_bytes(b"x")
    before, t0 = _nn_calls(cluster, "fs_getattr"), time.time_ns()
    for i in range(20):
        os.unlink(d / f"f{i}")
        st = d.stat()
        assert t0 <= st.st_mtime_ns == st.st_ctime_ns <= time.time_ns()
    assert _nn_calls(cluster, "fs_getattr") - before < 5  # 20 and more when each was a request
    assert os.listdir(d) == []


def test_rename_files_and_directories(mnt, s3, bucket):
    root = mnt.path
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "x").write_bytes(b"x")
    os.rename(root / "a", root / "z")
    assert (root / "z" / "b" / "x").read_bytes() == b"x"
    assert not (root / "a").exists()
    assert s3.get_object(Bucket=bucket, Key="z/b/x")["Body"].read() == b"x"

    (root / "y").write_bytes(b"y")
    os.rename(root / "y", root / "z" / "b" / "x")  # replaces
    assert (root / "z" / "b" / "x").read_bytes() == b"y"
    (root / "w").write_bytes(b"w")
    with pytest.raises(FileExistsError):
        _renameat2(root / "w", root / "z" / "b" / "x", 1)  # RENAME_NOREPLACE
    _renameat2(root / "w", root / "z" / "b" / "x", 2)      # RENAME_EXCHANGE
    assert (root / "w").read_bytes() == b"y" and (root / "z" / "b" / "x").read_bytes() == b"w"
    with pytest.raises(OSError) as e:
        _renameat2(root / "w", root / "v", 4)              # RENAME_WHITEOUT: not offered, nothing moves
    assert e.value.errno == errno.EINVAL and (root / "w").read_bytes() == b"y" and not (root / "v").exists()
    with pytest.raises(OSError) as e:
        os.rename(root / "z", root / "z" / "b" / "inside")
    assert e.value.errno == errno.EINVAL


def test_rename_is_atomic_under_a_concurrent_reader(mnt):
    """A writer keeps replacing `cur` by renaming fresh files over it; a reader never sees a missing or mixed file."""
    root = mnt.path
    size = 200_000
    (root / "cur").write_bytes(b"A" * size)
    stop = threading.Event()
    seen, bad = set(), []

    def reader():
        while not stop.is_set():
            try:
                data = (root / "cur").read_bytes()
            except OSError as e:
                bad.append(repr(e))
                continue
            if len(data) != size or data.count(data[:1]) != size:
                bad.append(f"mixed read of {len(data)} bytes")
            seen.add(data[:1])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(25):
            tmp = root / f"tmp{i}"
            tmp.write_bytes(bytes([66 + i % 20]) * size)
            os.rename(tmp, root / "cur")
    finally:
        stop.set()
        t.join()
    assert not bad, bad[:3]
    assert len(seen) > 1


def test_close_to_open_and_s3_visibility(cluster, mnt, s3, bucket):
    data = os.urandom(9 << 20) + b"tail"  # over two 4 MiB blocks
    with open(mnt.path / "ckpt.pt", "wb") as f:
        f.write(data)
    # close() returned: the data is committed and visible through S3 with the same bytes
    got = s3.get_object(Bucket=bucket, Key="ckpt.pt")["Body"].read()
    assert got == data
    # write-then-rename checkpointing
    with open(mnt.path / "ckpt.tmp", "wb") as f:
        f.write(b"v2")
    os.replace(mnt.path / "ckpt.tmp", mnt.path / "ckpt.pt")
    assert s3.get_object(Bucket=bucket, Key="ckpt.pt")["Body"].read() == b"v2"

    # an object written through S3 appears within the attribute timeout, and an overwrite is seen on reopen
    s3.put_object(Bucket=bucket, Key="from-s3/sample.bin", Body=b"one")
    deadline = time.monotonic() + 5
    while not (mnt.path / "from-s3" / "sample.bin").exists():
        assert time.monotonic() < deadline, "S3 object did not appear in the mount"
        time.sleep(0.1)
    assert (mnt.path / "from-s3" / "sample.bin").read_bytes() == b"one"
    s3.put_object(Bucket=bucket, Key="from-s3/sample.bin", Body=b"second")
    time.sleep(1.0)
    assert (mnt.path / "from-s3" / "sample.bin").read_bytes() == b"second"
    st = (mnt.path / "from-s3" / "sample.bin").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o644, 0)


def test_long_paths_and_names(mnt):
    """Paths past S3's 1,024-byte key limit work through the mount; a name over 255 bytes is ENAMETOOLONG."""
    d = mnt.path
    for i in range(6):
        d = d / (f"{i}" * 200)
        d.mkdir()
    (d / "deep.txt").write_bytes(b"deep")
    assert len(str(d / "deep.txt")) - len(str(mnt.path)) > 1024
    assert (d / "deep.txt").read_bytes() == b"deep"
    with pytest.raises(OSError) as e:
        (mnt.path / ("n" * 256)).write_bytes(b"")
    assert e.value.errno == errno.ENAMETOOLONG


def test_random_writes_match_a_model(mnt, s3, bucket):
    rng = random.Random(7)
    model = bytearray()
    path = mnt.path / "fsx.bin"
    path.write_bytes(b"")
    with open(path, "r+b") as f:
        for _ in range(300):
            op = rng.random()
            if op < 0.6:
                off, n = rng.randrange(0, 3 << 20), rng.randrange(1, 70_000)
                buf = rng.randbytes(n)
                f.seek(off)
                f.write(buf)
                if off > len(model):
                    model += bytes(off - len(model))
                model[off:off + n] = buf
            elif op < 0.7:
                size = rng.randrange(0, 3 << 20)
                f.truncate(size)
                del model[size:]
                model += bytes(size - len(model))
            else:
                off, n = rng.randrange(0, 3 << 20), rng.randrange(1, 70_000)
                f.seek(off)
                assert f.read(n) == bytes(model[off:off + n])
    assert path.read_bytes() == bytes(model)
    assert s3.get_object(Bucket=bucket, Key="fsx.bin")["Body"].read() == bytes(model)


def test_read_only_mount_gives_erofs(cluster, bucket, s3, tmp_path):
    s3.put_object(Bucket=bucket, Key="f", Body=b"x")
    m = Mount(cluster, bucket, tmp_path / "ro", "--read-only", log=tmp_path / "mount.log")
    try:
        assert (m.path / "f").read_bytes() == b"x"
        for action in (lambda: (m.path / "f").write_bytes(b"y"), lambda: (m.path / "d").mkdir(),
                       lambda: os.unlink(m.path / "f")):
            with pytest.raises(OSError) as e:
                action()
            assert e.value.errno == errno.EROFS
    finally:
        m.close()


def test_all_buckets_mount(cluster, bucket, s3, tmp_path):
    s3.put_object(Bucket=bucket, Key="k/v", Body=b"z")
    m = Mount(cluster, "", tmp_path / "all", log=tmp_path / "mount.log")
    try:
        assert bucket in os.listdir(m.path)
        assert (m.path / bucket / "k" / "v").read_bytes() == b"z"
        (m.path / bucket / "new").write_bytes(b"n")
        assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"n"
        with pytest.raises(PermissionError):
            (m.path / f"nb-{uuid.uuid4().hex[:8]}").mkdir()
        m.proc.send_signal(signal.SIGINT)  # Ctrl-C unmounts cleanly
        assert m.proc.wait(timeout=15) == 0
        assert not os.path.ismount(m.path)
    finally:
        m.close()


def test_daemon_mount_and_umount(cluster, bucket, s3, tmp_path):
    """`epochfs mount` without -f returns once the mount is up; `epochfs umount` takes it down."""
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    mp = tmp_path / "daemon"
    mp.mkdir()
    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1]}
    cli = [sys.executable, "-m", "epochfs.frontends.cli.main"]
    try:
        out = subprocess.run([*cli, "mount", bucket, str(mp)], env=env, check=True, timeout=60, capture_output=True,
                             text=True).stderr
        log = Path(re.search(r"log (\S+\.log)\)", out).group(1))
        assert log.exists() and (mp / "k").read_bytes() == b"v"
        again = subprocess.run([*cli, "mount", bucket, str(mp)], env=env, timeout=60, capture_output=True, text=True)
        assert again.returncode == 2 and "a mount point already" in again.stderr  # not a second mount over it
        subprocess.run([*cli, "umount", str(mp)], check=True, timeout=30)
        assert not os.path.ismount(mp)
        deadline = time.monotonic() + 15
        while log.exists() and time.monotonic() < deadline:  # the daemon ends after the unmount
            time.sleep(0.05)
        assert not log.exists(), "a clean mount's empty log file is not left behind"
        # a mount that gives up (no such bucket) says why and leaves no log behind either
        before = set(Path(tempfile.gettempdir()).glob("epochfs-mount-*.log"))
        failed = subprocess.run([*cli, "mount", f"{bucket}-none", str(mp)], env=env, timeout=60, capture_output=True,
                                text=True)
        assert failed.returncode != 0 and "does not exist" in failed.stderr and not os.path.ismount(mp)
        assert set(Path(tempfile.gettempdir()).glob("epochfs-mount-*.log")) <= before
    finally:
        if os.path.ismount(mp):
            subprocess.call(["fusermount3", "-u", "-z", str(mp)])
