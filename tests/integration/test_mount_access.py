"""The mount's API (/_epochfs/fs) checks every operation against the bucket it touches: another user's key gets
EACCES (403 for data) on a private bucket, on its inodes reached by number through a bucket of its own, and what
the bucket's ACL grants once it is granted."""
from __future__ import annotations

import asyncio
import errno

import pytest

from cluster import ALT, MAIN
from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.common.messages import FileWrite, NewExtent
from epochfs.frontends import errmap

pytestmark = pytest.mark.integration
ROOT = 1


async def _chunks(data: bytes):
    yield data


def _whole(size: int) -> FileWrite:
    """The layout of a write that replaces a file's whole content."""
    return FileWrite(base=None, size=size, segs=[NewExtent(length=size)])


def _as(cluster, user, fn):
    async def go():
        async with S3Client(cluster.endpoint, user[0], user[1]) as c:
            return await fn(c)
    return asyncio.run(go())


def _denied(cluster, fn) -> None:
    """ALT's call fails with EACCES (a namespace answer) or 403 AccessDenied (a data call)."""
    with pytest.raises(errors.Unauthorized) as e:
        _as(cluster, ALT, fn)
    assert errmap.to_errno(e.value) == errno.EACCES


@pytest.fixture
def tree(cluster, s3, bucket):
    """MAIN's private bucket with d/f.txt (made through S3) and m/ (made through the mount's API): their inodes."""
    s3.put_object(Bucket=bucket, Key="d/f.txt", Body=b"secret data")

    async def walk(c):
        root = await c.fs_lookup(bucket, parent=ROOT, name=bucket)
        d = await c.fs_lookup(bucket, parent=root["ino"], name="d")
        f = await c.fs_lookup(bucket, parent=d["ino"], name="f.txt")
        m = await c.fs_mkdir(bucket, parent=root["ino"], name="m", mode=0o755, uid=0, gid=0)
        return {"root": root["ino"], "d": d["ino"], "f": f["ino"], "m": m["ino"]}
    return _as(cluster, MAIN, walk)


def _all_denied(cluster, bucket: str, t: dict) -> None:
    """lookup/getattr/readdir/read/write/setattr/rename/mkdir as ALT in `bucket` on MAIN's inodes all fail."""
    for fn in (lambda c: c.fs_lookup(bucket, parent=t["d"], name="f.txt"),
               lambda c: c.fs_getattr(bucket, ino=t["f"]),
               lambda c: c.fs_readdir(bucket, ino=t["d"]),
               lambda c: c.fs_readdir(bucket, ino=t["m"]),
               lambda c: c.fs_read(bucket, t["f"], 0, 100),
               lambda c: c.fs_write(bucket, t["f"], _whole(3), _chunks(b"bad")),
               lambda c: c.fs_setattr(bucket, ino=t["f"], fields={"mode": 0o777}),
               lambda c: c.fs_rename(bucket, parent=t["d"], name="f.txt", newparent=t["m"], newname="g"),
               lambda c: c.fs_mkdir(bucket, parent=t["d"], name="x", mode=0o755, uid=0, gid=0)):
        _denied(cluster, fn)


def test_other_user_is_denied_on_a_private_bucket(cluster, s3, bucket, tree):
    _denied(cluster, lambda c: c.fs_lookup(bucket, parent=ROOT, name=bucket))
    _all_denied(cluster, bucket, tree)
    assert s3.get_object(Bucket=bucket, Key="d/f.txt")["Body"].read() == b"secret data"
    # the tree of buckets shows ALT only its own
    entries = _as(cluster, ALT, lambda c: c.fs_readdir(None, ino=ROOT))["entries"]
    assert bucket not in [n for n, _ in entries]
    assert bucket in [n for n, _ in _as(cluster, MAIN, lambda c: c.fs_readdir(None, ino=ROOT))["entries"]]
    _denied(cluster, lambda c: c.fs_getattr(None, ino=tree["f"]))
    _denied(cluster, lambda c: c.fs_lookup(None, parent=ROOT, name=bucket))


def test_inodes_of_another_bucket_are_refused_by_number(cluster, s3, bucket, tree):
    """ALT's own bucket passes the gateway's check; the NameNode refuses MAIN's inodes in it."""
    mine = f"{bucket}-alt"
    cluster.s3(ALT).create_bucket(Bucket=mine)
    _denied(cluster, lambda c: c.fs_lookup(mine, parent=ROOT, name=bucket))
    _all_denied(cluster, mine, tree)

    async def steal(c):
        root = await c.fs_lookup(mine, parent=ROOT, name=mine)
        return await c.fs_link(mine, ino=tree["f"], parent=root["ino"], name="stolen")
    _denied(cluster, steal)
    assert s3.get_object(Bucket=bucket, Key="d/f.txt")["Body"].read() == b"secret data"


def test_acl_grants_open_the_bucket(cluster, s3, bucket, tree):
    s3.put_bucket_acl(Bucket=bucket, GrantRead=f"id={ALT[2]}")
    s3.put_object_acl(Bucket=bucket, Key="d/f.txt", GrantRead=f"id={ALT[2]}")
    assert _as(cluster, ALT, lambda c: c.fs_lookup(bucket, parent=ROOT, name=bucket))["ino"] == tree["root"]
    assert _as(cluster, ALT, lambda c: c.fs_getattr(bucket, ino=tree["f"]))["size"] == 11
    assert [n for n, _ in _as(cluster, ALT, lambda c: c.fs_readdir(bucket, ino=tree["d"]))["entries"]] == ["f.txt"]
    assert _as(cluster, ALT, lambda c: c.fs_read(bucket, tree["f"], 0, 100)) == b"secret data"
    _denied(cluster, lambda c: c.fs_setattr(bucket, ino=tree["f"], fields={"mode": 0o600}))
    _denied(cluster, lambda c: c.fs_write(bucket, tree["f"], _whole(3), _chunks(b"new")))

    s3.put_bucket_acl(Bucket=bucket, GrantRead=f"id={ALT[2]}", GrantWrite=f"id={ALT[2]}")
    attr = _as(cluster, ALT, lambda c: c.fs_setattr(bucket, ino=tree["f"], fields={"mode": 0o600}))
    assert attr["mode"] & 0o777 == 0o600
    assert _as(cluster, ALT, lambda c: c.fs_write(bucket, tree["f"], _whole(3), _chunks(b"new")))["size"] == 3
    _as(cluster, ALT, lambda c: c.fs_rename(bucket, parent=tree["d"], name="f.txt", newparent=tree["m"],
                                            newname="g.txt"))
    assert s3.get_object(Bucket=bucket, Key="m/g.txt")["Body"].read() == b"new"
