"""Issue 18 (hardening), reads: a read in progress survives the removal of its object, and a file's times set
while it is open with unflushed writes survive its close.

A GET (S3), an open file (fsspec) or an open handle (the mount) that began before the key was deleted or
overwritten reads the old object whole: the NameNode keeps the freed blocks' delete orders back for
NN_FREE_GRACE_S (these clusters run with the default), where it used to send them with the next heartbeat and the
reader got "block N is not stored here" half-way through.
"""
from __future__ import annotations

import os
import random
import subprocess
import time

import fsspec
import pytest

from cluster import MAIN, Cluster
from epochfs.common.client import WHOLE_GET_MAX
from mounting import Mount, needs_fuse

pytestmark = pytest.mark.integration

MiB = 1 << 20
SIZE = 64 * MiB  # past what the socket buffers and the gateway's prefetch hold after the first 12 MiB
HEAD = 12 * MiB
S_NS = 1_000_000_000


@pytest.fixture(scope="module")
def grace_cluster(tmp_path_factory):
    """The NameNode's default grace for freed blocks (the shared test cluster runs with none)."""
    c = Cluster(tmp_path_factory.mktemp("grace"), free_grace_s=None).start()
    yield c
    c.close()


def _deletes_delivered(c: Cluster) -> None:
    """Wait until the NameNode has handed every due delete order to the DataNodes and they have applied it (a few
    heartbeats), so that a block freed without grace would be gone by now."""
    deadline = time.monotonic() + 20
    while c.nn.stats().garbage and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the orders of the last heartbeat are applied on the DataNodes


@pytest.fixture
def obj(grace_cluster):
    s3 = grace_cluster.s3()
    bucket = f"g-{os.urandom(6).hex()}"
    s3.create_bucket(Bucket=bucket)
    data = random.Random(bucket).randbytes(SIZE)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=data)
    return bucket, data


@pytest.mark.parametrize("change", ["delete", "overwrite"])
def test_an_s3_get_in_progress_reads_the_old_object_whole(grace_cluster, obj, change):
    c, (bucket, data) = grace_cluster, obj
    s3 = c.s3()
    body = s3.get_object(Bucket=bucket, Key="big.bin")["Body"]
    head = body.read(HEAD)
    if change == "delete":
        s3.delete_object(Bucket=bucket, Key="big.bin")
    else:
        s3.put_object(Bucket=bucket, Key="big.bin", Body=b"new content")
    _deletes_delivered(c)
    assert head + body.read() == data
    if change == "overwrite":
        assert s3.get_object(Bucket=bucket, Key="big.bin")["Body"].read() == b"new content"


def test_an_open_fsspec_file_reads_the_old_object_whole(grace_cluster, obj):
    c, (bucket, data) = grace_cluster, obj
    fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1], skip_instance_cache=True)
    with fs.open(f"{bucket}/big.bin", "rb", block_size=4 * MiB, cache_type="none") as f:
        head = f.read(HEAD)
        c.s3().delete_object(Bucket=bucket, Key="big.bin")
        _deletes_delivered(c)
        assert head + f.read() == data
    assert not fs.exists(f"{bucket}/big.bin")


@pytest.mark.parametrize("size", [1000, WHOLE_GET_MAX + 1000], ids=["one-get", "from-the-datanodes"])
def test_an_fsspec_file_never_mixes_its_version_with_a_newer_one(grace_cluster, obj, size):
    """A file opened on what a cached listing said reads that version or fails: never the new bytes cut to the old
    size, as it did. Read whole in one call: one GET for a small object, located and read from the DataNodes for a
    large one (common/client.py WHOLE_GET_MAX)."""
    c, (bucket, _) = grace_cluster, obj
    s3 = c.s3()
    s3.put_object(Bucket=bucket, Key="small", Body=b"a" * size)
    fs = fsspec.filesystem("epochfs", endpoint_url=c.endpoint, key=MAIN[0], secret=MAIN[1], skip_instance_cache=True)
    fs.find(bucket)  # fills the listing cache: the open below believes "small" has `size` bytes of that version
    s3.put_object(Bucket=bucket, Key="small", Body=b"b" * 2 * size)
    with pytest.raises(OSError, match="changed since it was opened"):
        with fs.open(f"{bucket}/small", "rb") as f:
            f.read()
    fs.invalidate_cache()
    with fs.open(f"{bucket}/small", "rb") as f:
        assert f.read() == b"b" * 2 * size


@pytest.fixture
def gfs(grace_cluster):
    return fsspec.filesystem("epochfs", endpoint_url=grace_cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                             skip_instance_cache=True)


def test_a_forward_reader_gets_its_blocks_read_ahead_and_the_version_it_opened(grace_cluster, obj, gfs):
    """A file read front to back in readinto calls (as torch.load reads tensors): the blocks after each read are
    fetched in the background, and bytes come from the version the file was opened on though the key is overwritten
    in the middle of the read and the delete orders due went out (the old blocks stay for the grace period). (On
    the shared cluster, which frees blocks at once, this passed only when the read-ahead outran the deletions.)"""
    c, (bucket, _) = grace_cluster, obj
    s3, fs = c.s3(), gfs
    old, new = os.urandom(7 * fs.blocksize + 12345), os.urandom(3 * fs.blocksize)
    s3.put_object(Bucket=bucket, Key="ahead", Body=old)
    got = bytearray()
    with fs.open(f"{bucket}/ahead", "rb") as f:
        started, ahead = [], f.cache._ahead
        f.cache._ahead = lambda a, b: started.append((a, b)) or ahead(a, b)
        buf = bytearray(700_000)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            got += buf[:n]
            if len(got) == 700_000 * 4:
                s3.put_object(Bucket=bucket, Key="ahead", Body=new)
                _deletes_delivered(c)
        assert len(started) >= 3 and started[0][0] == fs.blocksize  # the blocks after the first, in the background
        assert f.cache.hit_count > f.cache.miss_count * 2  # most reads found their blocks already fetched
        assert f.cache.total_requested_bytes <= len(old) + 2 * fs.blocksize  # each block fetched about once
    assert bytes(got) == old
    assert fs.cat_file(f"{bucket}/ahead") == new


def test_a_reader_whose_direct_reads_were_set_aside_still_reads_the_version_it_opened(grace_cluster, obj, gfs):
    """Direct reads set aside after a brief failure (DataNodes marked down for DIRECT_RETRY_S), then the key
    overwritten: the gateway's If-Match GET can't serve the old version, so the reader asks the DataNodes again,
    which still hold its blocks, and reads the bytes it opened, not an error (it was EIO: the intermittent failure
    of the test above on a loaded machine)."""
    c, (bucket, _) = grace_cluster, obj
    s3, fs = c.s3(), gfs
    old, new = os.urandom(3 * fs.blocksize + 777), os.urandom(1000)
    s3.put_object(Bucket=bucket, Key="aside", Body=old)
    with fs.open(f"{bucket}/aside", "rb", cache_type="none") as f:
        head = f.read(1000)  # located: its blocks and a read token
        client = fs.client
        client._direct_after = time.monotonic() + 30  # as after an Unavailable
        client._dn_down = {addr: time.monotonic() + 30 for addr in f._reader._plan.addrs.values()}
        s3.put_object(Bucket=bucket, Key="aside", Body=new)
        _deletes_delivered(c)
        rest = f.read()
    assert type(head) is bytes and head + rest == old
    assert fs.cat_file(f"{bucket}/aside") == new


@needs_fuse
def test_an_open_file_in_the_mount_reads_the_old_object_whole(grace_cluster, obj, tmp_path):
    c, (bucket, data) = grace_cluster, obj
    m = Mount(c, bucket, tmp_path / "mnt", "--attr-timeout", "0.5", "--entry-timeout", "0.5", "--cache", "off",
              "--cache-dir", str(tmp_path / "cache"), log=tmp_path / "mount.log")
    try:
        with open(m.path / "big.bin", "rb", buffering=0) as f:
            head = f.read(HEAD)
            c.s3().delete_object(Bucket=bucket, Key="big.bin")
            _deletes_delivered(c)
            rest = b""
            while chunk := f.read(MiB):
                rest += chunk
        assert head + rest == data
    finally:
        m.close()


def test_freed_blocks_are_deleted_once_the_grace_is_over(tmp_path):
    """With a short grace the blocks of a deleted object do go: the delete orders wait, they are not lost."""
    c = Cluster(tmp_path, free_grace_s="2").start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="short")
        s3.put_object(Bucket="short", Key="k", Body=os.urandom(3 * MiB))
        ids = {b.id for b in c.nn.stat("short", "k").obj.blocks}
        s3.delete_object(Bucket="short", Key="k")
        _deletes_delivered(c)
        assert all(ids <= have for have in c.datanode_blocks().values())  # still there within the grace
        assert c.nn.stats().freed == 3 * len(ids)
        deadline = time.monotonic() + 30
        while any(ids & have for have in c.datanode_blocks().values()):
            assert time.monotonic() < deadline, "the freed blocks were never deleted"
            time.sleep(0.2)
        assert c.nn.stats().freed == 0
    finally:
        c.close()


# ---------------------------------------------------------------- times set while a file is open with unsaved writes
# `tar xf` and `cp -p` write a file, set its times, then close it: the close commits the content, and the commit's
# own time used to replace the one set explicitly.
T_AT, T_MT = 1_500_000_000_123_456_789, 1_600_000_000_987_654_321


def _times_kept(cluster, mnt, bucket, name: str, at: int = T_AT, mt: int = T_MT) -> None:
    time.sleep(0.6)  # past the mount's --attr-timeout: the kernel asks again
    st = os.stat(mnt.path / name)  # the stored times, from the NameNode's getattr
    assert (st.st_mtime_ns, st.st_atime_ns) == (mt, at)
    assert cluster.nn.stat(bucket, name).obj.mtime == mt  # what S3 shows as Last-Modified


@needs_fuse
@pytest.mark.parametrize("how", ["fd", "path"])
def test_times_set_on_an_open_file_with_unsaved_writes_survive_its_close(cluster, mnt, bucket, how):
    with open(mnt.path / "f.bin", "wb") as f:
        f.write(b"x" * 100_000)
        f.flush()  # (Python buffers st_blksize: 1 MiB; a write at close would make the mtime fresh again)
        os.utime(f.fileno() if how == "fd" else mnt.path / "f.bin", ns=(T_AT, T_MT))
        assert os.stat(f.fileno()).st_mtime_ns == T_MT  # seen so while still open, too
    _times_kept(cluster, mnt, bucket, "f.bin")
    assert (mnt.path / "f.bin").read_bytes() == b"x" * 100_000


@needs_fuse
def test_a_write_after_the_times_were_set_makes_the_mtime_fresh_again(cluster, mnt, bucket):
    before = time.time_ns()
    with open(mnt.path / "g.bin", "wb") as f:
        f.write(b"a")
        os.utime(f.fileno(), ns=(T_AT, T_MT))
        f.flush()
        f.write(b"b")
    time.sleep(0.6)
    assert os.stat(mnt.path / "g.bin").st_mtime_ns >= before
    with open(mnt.path / "h.bin", "wb") as f:  # and an ordinary write gets the time of its commit
        f.write(b"plain")
    time.sleep(0.6)
    assert os.stat(mnt.path / "h.bin").st_mtime_ns >= before


@needs_fuse
def test_tar_x_and_cp_p_into_the_mount_keep_mtimes(cluster, mnt, bucket, tmp_path):
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    want = {}
    for i, name in enumerate(["a.txt", "d/b.bin", "d/empty"]):
        (src / name).write_bytes(os.urandom(3000 * i))
        os.utime(src / name, ns=(T_AT + i * S_NS, T_MT + i * S_NS))
        want[name] = T_MT + i * S_NS
    subprocess.run(["tar", "cf", str(tmp_path / "a.tar"), "-C", str(src), "a.txt", "d"], check=True)
    (mnt.path / "tar").mkdir()
    subprocess.run(["tar", "xf", str(tmp_path / "a.tar"), "-C", str(mnt.path / "tar")], check=True)
    subprocess.run(["cp", "-rp", str(src), str(mnt.path / "cp")], check=True)
    time.sleep(0.6)
    for top in ("tar", "cp"):
        for name, mt in want.items():
            st = os.stat(mnt.path / top / name)
            assert st.st_mtime_ns // S_NS == mt // S_NS, (top, name)  # tar keeps whole seconds
            assert (mnt.path / top / name).read_bytes() == (src / name).read_bytes()
    assert os.stat(mnt.path / "cp" / "d" / "b.bin").st_mtime_ns == want["d/b.bin"]  # cp -p: to the nanosecond
