"""A client of the mount's API (/_epochfs/fs) that is not the kernel can't move a directory below itself: the NameNode
refuses it with InvalidMove, the POSIX answer the mount turns into EINVAL, and nothing moves."""
from __future__ import annotations

import asyncio
import errno

import orjson
import pytest

from cluster import MAIN
from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.frontends import errmap
from test_s3_bad_input import raw_request

pytestmark = pytest.mark.integration
ROOT = 1


def _run(cluster, fn):
    async def go():
        async with S3Client(cluster.endpoint, MAIN[0], MAIN[1]) as c:
            return await fn(c)
    return asyncio.run(go())


def _keys(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_moving_a_directory_below_itself_is_einval(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="a/b/c/f.txt", Body=b"below")  # S3 makes a, a/b, a/b/c

    async def inodes(c):
        root = (await c.fs_lookup(bucket, parent=ROOT, name=bucket))["ino"]
        a = (await c.fs_lookup(bucket, parent=root, name="a"))["ino"]
        b = (await c.fs_lookup(bucket, parent=a, name="b"))["ino"]
        cc = (await c.fs_lookup(bucket, parent=b, name="c"))["ino"]
        s = (await c.fs_mkdir(bucket, parent=root, name="s", mode=0o755, uid=0, gid=0))["ino"]
        return root, a, b, cc, s
    root, a, b, c, s = _run(cluster, inodes)
    before = _keys(s3, bucket)

    # the raw call the mount makes: a POSIX answer naming the domain error
    body = orjson.dumps({"op": "fs_rename", "parent": root, "name": "a", "newparent": c, "newname": "x", "flags": 0})
    status, _, data = raw_request(cluster, "POST", f"/_epochfs/fs/{bucket}", body=body)
    assert status == 200 and orjson.loads(data)["err"] == "InvalidMove", data
    # through the client the mount and fsspec use: the domain error, EINVAL at the mount
    for newparent in (a, b, c):
        with pytest.raises(errors.InvalidMove) as e:
            _run(cluster, lambda cl: cl.fs_rename(bucket, parent=root, name="a", newparent=newparent, newname="x"))
        assert errmap.to_errno(e.value) == errno.EINVAL
    assert _keys(s3, bucket) == before
    assert s3.get_object(Bucket=bucket, Key="a/b/c/f.txt")["Body"].read() == b"below"

    # legal moves still go: into a sibling's subtree, and a child up to the top
    _run(cluster, lambda cl: cl.fs_rename(bucket, parent=root, name="a", newparent=s, newname="a"))
    _run(cluster, lambda cl: cl.fs_rename(bucket, parent=a, name="b", newparent=root, newname="b"))
    assert s3.get_object(Bucket=bucket, Key="b/c/f.txt")["Body"].read() == b"below"
    with pytest.raises(errors.InvalidMove):  # the moved child's parent was recorded by its move
        _run(cluster, lambda cl: cl.fs_rename(bucket, parent=root, name="b", newparent=c, newname="b"))
    assert s3.get_object(Bucket=bucket, Key="b/c/f.txt")["Body"].read() == b"below"
