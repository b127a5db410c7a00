"""A streamed file whose commit answer is lost (a client-side timeout after the gateway committed, as happens on a
loaded machine) is not reported as replaced by someone else: the mount's write path (frontends/fuse/writer.py, run
in this process over a real cluster) sees its very bytes are the file's and finishes, instead of failing fsync/close
with EIO and losing the checkpoint it was writing. Bytes that differ are still refused."""
from __future__ import annotations

import os
import stat

import httpx
import pytest
import trio

from cluster import MAIN
from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.frontends.fuse.cache import BlockCache
from epochfs.frontends.fuse.inodes import InodeTable
from epochfs.frontends.fuse.options import MountOptions
from epochfs.frontends.fuse.writer import Writes

pytestmark = pytest.mark.integration

CHUNK = 1 << 20


def _write_losing_the_answer(cluster, bucket: str, name: str, body: bytes, direct: bool, *,
                             meanwhile: bytes | None = None):
    """Write `body` into a new file through the mount's write path; the stream's commit succeeds on the server but
    its answer is lost; `meanwhile`: another writer's content put over the file before our retry."""
    async def go():
        async with S3Client(cluster.endpoint, MAIN[0], MAIN[1], direct_writes=direct) as c:
            root = (await c.fs_lookup(bucket, parent=1, name=bucket))["ino"]
            ino = (await c.fs_mknod(bucket, parent=root, name=name, mode=stat.S_IFREG | 0o644, uid=0, gid=0))["ino"]
            opts = MountOptions(bucket=bucket, direct_writes=direct)
            ws = Writes(c, opts, InodeTable(c, opts), BlockCache())
            name_of_commit = "fs_write_direct" if direct else "fs_write"
            real = getattr(c, name_of_commit)
            lost = []

            async def commit_then_lose_the_answer(*a, **k):
                if lost:  # the retry: as sent
                    return await real(*a, **k)
                res = await real(*a, **k)
                lost.append(res)
                if meanwhile is not None:
                    await c.put(bucket, name, meanwhile)
                raise httpx.ReadTimeout("the answer was lost")
            setattr(c, name_of_commit, commit_then_lose_the_answer)
            async with trio.open_nursery() as n:
                ws.nursery = n
                w = await ws.attach(ino)
                for off in range(0, len(body), CHUNK):
                    await ws.write(ino, w, off, body[off:off + CHUNK])
                try:
                    return lost, await ws.upload(ino, w)
                finally:
                    n.cancel_scope.cancel()
    return trio.run(go)


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "gateway"])
def test_a_stream_that_committed_but_lost_its_answer_is_done(cluster, s3, bucket, direct):
    body = os.urandom(20 * CHUNK + 777)  # past STREAM_AFTER: streamed while written
    lost, a = _write_losing_the_answer(cluster, bucket, "ckpt.bin", body, direct)
    assert lost, "the stream's commit ran (and its answer was dropped)"
    assert a["size"] == len(body) and a["etag"] == lost[0]["etag"]
    assert s3.get_object(Bucket=bucket, Key="ckpt.bin")["Body"].read() == body


def test_other_bytes_put_meanwhile_are_still_a_replaced_file(cluster, s3, bucket):
    body = os.urandom(12 * CHUNK)
    other = os.urandom(12 * CHUNK)
    with pytest.raises(errors.PreconditionFailed):
        _write_losing_the_answer(cluster, bucket, "other.bin", body, True, meanwhile=other)
    assert s3.get_object(Bucket=bucket, Key="other.bin")["Body"].read() == other
