"""The mount's write-back mode (--writeback) on a live cluster: new small files are made in the mount and created on
the NameNode in batches with their content and attributes after close(); fsync waits for its file; a clean unmount
commits every closed file; a killed mount loses only what was never fsynced (and files closed moments before); the
batch create API itself (each file whole or not at all)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import time
from types import SimpleNamespace

import pytest

from cluster import ALT, MAIN, Cluster
from lostreply import LostHttpReplies, start_behind_relay
from mounting import FUSERMOUNT, Mount, fs_requests, needs_fuse

from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.common.messages import NewFile

pytestmark = [pytest.mark.integration, needs_fuse]


def _wb(cluster, bucket, tmp_path, name="mnt"):
    return Mount(cluster, bucket, tmp_path / name, "--writeback", "--attr-timeout", "0.5", "--entry-timeout",
                 "0.5", "--cache-dir", str(tmp_path / "cache"), log=tmp_path / f"{name}.log")


def _keys(s3, bucket, prefix="") -> set[str]:
    out = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out |= {o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/")}  # not dir markers
    return out


def _until(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _untar_like(path, data: bytes, mtime: int, mode=0o644, uid=0, gid=0) -> None:
    """What `tar x` does per file: create 0600, write, futimens, fchown, fchmod, close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.utime(fd, ns=(mtime, mtime))
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def test_batch_creates_keep_content_mtime_and_attributes(cluster, s3, bucket, tmp_path):
    """200 files unpacked as tar does: no create request per file (files closed while the creates in flight are
    unanswered share the next request), each visible to S3 with its bytes once committed, and its mtime, mode and
    owner kept (seen by a second mount)."""
    # names and attributes trusted for the whole unpack: the mount needs no round trip for it (the gateway is stopped)
    m = Mount(cluster, bucket, tmp_path / "mnt", "--writeback", "--attr-timeout", "60", "--entry-timeout", "60",
              "--timeout", "60", "--cache-dir", str(tmp_path / "cache"), log=tmp_path / "mnt.log")
    try:
        (m.path / "d").mkdir()
        with open(m.path / "first", "wb") as f:  # a file made and created before: inode numbers reserved
            f.write(b"x")
            os.fsync(f.fileno())
        before = fs_requests(cluster)
        files = {f"d/f{i:03d}": os.urandom(1000 + 37 * i) for i in range(200)}
        gw = cluster.procs["gw"]
        gw.send_signal(signal.SIGSTOP)  # the creates get no answer while the files are unpacked (how many requests
        try:                            # share them then does not depend on the machine's speed)
            for i, (name, data) in enumerate(files.items()):
                _untar_like(m.path / name, data, 1_500_000_000_000_000_000 + i * 7_000_000_000, 0o640, 1234, 5678)
        finally:
            gw.send_signal(signal.SIGCONT)
        assert (m.path / "d" / "f007").read_bytes() == files["d/f007"]  # (a second open waits for its create)
        _until(lambda: _keys(s3, bucket, "d/") == set(files))
        after = fs_requests(cluster)
        assert after.get("mknod", 0) == before.get("mknod", 0)
        # the first files (a request per creator: two in flight, unanswered), then all the others in one
        assert 2 <= after.get("create_files", 0) - before.get("create_files", 0) <= 3
        assert after.get("setattr", 0) == before.get("setattr", 0)
        for name in ("d/f000", "d/f123", "d/f199"):
            assert s3.get_object(Bucket=bucket, Key=name)["Body"].read() == files[name]
    finally:
        m.close()
    other = Mount(cluster, bucket, tmp_path / "other", log=tmp_path / "other.log")
    try:
        for i in (0, 99, 199):
            st = (other.path / "d" / f"f{i:03d}").stat()
            assert st.st_mtime_ns == 1_500_000_000_000_000_000 + i * 7_000_000_000
            assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_size) == (0o640, 1234, 5678, 1000 + 37 * i)
        assert sorted(os.listdir(other.path / "d")) == sorted(n[2:] for n in files)
    finally:
        other.close()


def test_directories_in_use_are_renewed_together_and_see_names_made_elsewhere(cluster, s3, bucket, tmp_path):
    """An unpack into many directories: the names (and attributes) of the directories the mount writes into are
    renewed in one request per half timeout for all of them, no listing per directory; a name made elsewhere in one
    of them (an S3 PUT, a directory) is seen within the timeout, and a name taken elsewhere meanwhile can't be
    created again (O_EXCL)."""
    m = _wb(cluster, bucket, tmp_path)
    try:
        dirs = [m.path / "t" / f"d{i}" for i in range(10)]
        for d in dirs:
            d.mkdir(parents=True)
        before = fs_requests(cluster)
        t0, i = time.monotonic(), 0
        while time.monotonic() - t0 < 3.0:
            _untar_like(dirs[i % 10] / f"f{i:04d}", b"x" * 100, 1_500_000_000_000_000_000)
            i += 1
            if i == 50:  # made elsewhere, in directories the mount is writing into
                s3.put_object(Bucket=bucket, Key="t/d3/from-s3", Body=b"s3")
                s3.put_object(Bucket=bucket, Key="t/d4/sub/obj", Body=b"deep")
                made = time.monotonic()
            if i > 50 and (dirs[3] / "from-s3").exists() and (dirs[4] / "sub").exists():
                break
        assert time.monotonic() - made < 2.0  # within the 0.5 s timeout, give or take a loaded machine
        assert (dirs[3] / "from-s3").read_bytes() == b"s3"
        assert (dirs[4] / "sub" / "obj").read_bytes() == b"deep"
        with pytest.raises(FileExistsError):
            os.open(dirs[3] / "from-s3", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        after = fs_requests(cluster)
        assert after.get("readdir", 0) == before.get("readdir", 0)
        renewals = after.get("dirs", 0) - before.get("dirs", 0)
        assert 1 <= renewals <= 4 * (time.monotonic() - t0) + 10, renewals  # not one per directory and period
        names = {f"t/d{j % 10}/f{j:04d}" for j in range(i)}
        _until(lambda: names <= _keys(s3, bucket, "t/"))
    finally:
        m.close()


def test_operations_on_a_file_not_yet_created_wait_for_it(cluster, s3, bucket, tmp_path):
    """A rename, link, unlink, listing, second open or xattr of a file made in the mount first creates it on the
    NameNode, so each sees (and S3 sees) the file as the mount does."""
    m = _wb(cluster, bucket, tmp_path)
    try:
        p = m.path
        (p / "a").write_bytes(b"one")
        assert "a" in os.listdir(p)
        assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"one"  # the listing created it
        (p / "b").write_bytes(b"two")
        os.rename(p / "b", p / "c")
        assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == b"two"
        (p / "d").write_bytes(b"three")
        os.link(p / "d", p / "e")
        assert os.stat(p / "d").st_nlink == 2 and (p / "e").read_bytes() == b"three"
        (p / "f").write_bytes(b"four")
        os.unlink(p / "f")
        assert not (p / "f").exists()
        with open(p / "g", "wb") as f:  # still open: a second open sees what was written so far
            f.write(b"five")
            f.flush()
            assert (p / "g").read_bytes() == b"five"
            f.write(b"six")
        _until(lambda: s3.get_object(Bucket=bucket, Key="g")["Body"].read() == b"fivesix")
        (p / "h").write_bytes(b"x")
        os.setxattr(p / "h", "user.k", b"v")
        assert s3.head_object(Bucket=bucket, Key="h")["Metadata"] == {"k": "v"}
        with open(p / "big", "wb") as f:  # a large file is streamed as before, once it exists
            f.write(os.urandom(9 << 20))
        assert s3.head_object(Bucket=bucket, Key="big")["ContentLength"] == 9 << 20
        with pytest.raises(FileExistsError):
            os.open(p / "c", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        (p / "sub").mkdir()
        (p / "sub" / "x").write_bytes(b"y")
        with pytest.raises(OSError):
            os.rmdir(p / "sub")
    finally:
        m.close()


def test_fsync_is_durable_and_a_killed_mount_loses_only_unsaved_files(cluster, s3, bucket, tmp_path):
    """fsync returns once the file is created on the NameNode; a mount killed with SIGKILL loses the file that was
    open and never fsynced, never the fsynced one."""
    m = _wb(cluster, bucket, tmp_path)
    try:
        fd = os.open(m.path / "synced", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, b"durable")
        os.fsync(fd)
        assert s3.get_object(Bucket=bucket, Key="synced")["Body"].read() == b"durable"  # at once, no waiting
        os.close(fd)
        open_fd = os.open(m.path / "unsaved", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(open_fd, b"never closed")
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait()
        try:
            os.close(open_fd)
        except OSError:
            pass
    finally:
        m.close()
        subprocess.call([FUSERMOUNT, "-u", "-z", str(m.path)])  # a killed mount's mount point is left behind
    assert s3.get_object(Bucket=bucket, Key="synced")["Body"].read() == b"durable"
    assert "unsaved" not in _keys(s3, bucket)


def test_a_clean_unmount_commits_every_closed_file(cluster, s3, bucket, tmp_path):
    m = _wb(cluster, bucket, tmp_path)
    try:
        (m.path / "u").mkdir()
        files = {f"u/{i}": os.urandom(3000) for i in range(300)}
        for name, data in files.items():
            (m.path / name).write_bytes(data)
    finally:
        m.close()  # SIGTERM right after the last close
    assert _keys(s3, bucket, "u/") == set(files)
    assert s3.get_object(Bucket=bucket, Key="u/17")["Body"].read() == files["u/17"]


def test_batch_create_api_each_file_whole_or_not_at_all(cluster, s3, bucket):
    """The gateway's batch create: a name taken or an inode number never reserved is that file's error (nothing of
    it is made); the other files are created with their content."""
    s3.put_object(Bucket=bucket, Key="taken", Body=b"old")

    async def go():
        async with S3Client(cluster.endpoint, MAIN[0], MAIN[1]) as c:
            root = (await c.fs_lookup(bucket, parent=1, name=bucket))["ino"]
            inos = await c.fs_reserve_inodes(bucket, 4)
            t = time.time_ns()

            def f(i, name, data):
                return NewFile(ino=i, parent=root, name=name, mode=0o644, uid=0, gid=0, at=t, mt=t,
                               size=len(data)), data
            return await c.fs_create_files(bucket, [f(inos[0], "ok1", b"a" * 10), f(inos[1], "taken", b"new"),
                                                    f(inos[1] + 10 ** 9, "unreserved", b"z"),
                                                    f(inos[2], "ok2", b""), f(inos[3], "ok1", b"dup")])
    res = asyncio.run(go())
    assert isinstance(res[0], dict) and res[0]["size"] == 10
    assert isinstance(res[1], errors.AlreadyExists)
    assert isinstance(res[2], errors.InvalidInput)
    assert isinstance(res[3], dict) and res[3]["size"] == 0
    assert isinstance(res[4], errors.AlreadyExists)
    assert s3.get_object(Bucket=bucket, Key="ok1")["Body"].read() == b"a" * 10
    assert s3.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"old"
    assert _keys(s3, bucket) == {"ok1", "ok2", "taken"}


def test_reserved_inode_numbers_belong_to_the_access_key_that_reserved_them(cluster, s3, bucket):
    """Another user allowed to write the bucket (a bucket policy) can't create files with the inode numbers the
    bucket's owner reserved (they belong to the reserving mount's key); with numbers of its own it can."""
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": {"AWS": [f"arn:aws:iam::{ALT[2]}:root"]},
        "Action": ["s3:PutObject", "s3:ListBucket"],
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}))

    async def go():
        async with S3Client(cluster.endpoint, MAIN[0], MAIN[1]) as main, \
                S3Client(cluster.endpoint, ALT[0], ALT[1]) as alt:
            root = (await main.fs_lookup(bucket, parent=1, name=bucket))["ino"]
            t = time.time_ns()

            def f(i, name):
                return NewFile(ino=i, parent=root, name=name, mode=0o644, uid=0, gid=0, at=t, mt=t, size=1), b"x"
            mine = await main.fs_reserve_inodes(bucket, 2)
            stolen = await alt.fs_create_files(bucket, [f(mine[0], "stolen")])
            own = await alt.fs_reserve_inodes(bucket, 1)
            made = await alt.fs_create_files(bucket, [f(own[0], "alts")])
            kept = await main.fs_create_files(bucket, [f(mine[0], "mains")])
            return stolen, made, kept
    stolen, made, kept = asyncio.run(go())
    assert isinstance(stolen[0], errors.InvalidInput) and "another access key" in stolen[0].message
    assert isinstance(made[0], dict) and isinstance(kept[0], dict)
    assert _keys(s3, bucket) == {"alts", "mains"}


def test_a_batch_create_whose_answer_is_lost_is_sent_again_and_made_once(tmp_path):
    """A batch create is carried out and its answer lost: between the gateway and the NameNode (the gateway's client
    sends it again, the same blocks), and between the mount and the gateway (the mount sends the batch again, its
    content stored anew). Either way fsync succeeds and every file is there once with its bytes, mode and mtime;
    before, the second sending was refused (its inode numbers taken) and the files were reported unsaved (EIO)."""
    c = Cluster(tmp_path / "c")
    nn = start_behind_relay(c)
    gw = LostHttpReplies("127.0.0.1", c.ports["gw"])
    m = None
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="wback")
        m = _wb(SimpleNamespace(endpoint=f"http://127.0.0.1:{gw.port}"), "wback", tmp_path)
        files = {}
        for d, relay, marker in (("a", nn, "fs_create_files"), ("b", gw, "files=1")):
            (m.path / d).mkdir()
            relay.lose(marker)
            for i in range(10):
                files[f"{d}/f{i}"] = data = os.urandom(3000 + i)
                fd = os.open(m.path / d / f"f{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, data)
                    os.utime(fd, ns=(1_600_000_000_000_000_000 + i, 1_600_000_000_000_000_000 + i))
                    os.fchmod(fd, 0o640)
                    os.fsync(fd)  # waits for its create: EIO if the mount holds it unsaved
                finally:
                    os.close(fd)
            assert relay.dropped == [marker]
        assert nn.calls["fs_create_files"] >= 2
        _until(lambda: _keys(s3, "wback") == set(files))
        for key, data in files.items():
            assert s3.get_object(Bucket="wback", Key=key)["Body"].read() == data
            st = os.stat(m.path / key)
            assert (stat.S_IMODE(st.st_mode), st.st_size) == (0o640, len(data))
        assert os.stat(m.path / "b/f3").st_mtime_ns == 1_600_000_000_000_000_003
        assert "not saved" not in (tmp_path / "mnt.log").read_text()
    finally:
        if m is not None:
            m.close()
        c.close()
        nn.close()
        gw.close()
