"""Direct writes: the client stores blocks on the DataNodes with the gateway's write token; the gateway commits."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os

import msgspec
import pytest

from cluster import ALT, MAIN, SECRET, Cluster
from epochfs.common import errors, writetoken
from epochfs.common import messages as m
from epochfs.common.blocks import crc32c
from epochfs.common.client import S3Client
from epochfs.common.clients import DataNodeClient
from epochfs.common.directwrite import DirectWriter
from epochfs.common.rpc import RpcClient

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(coro)


async def _with(endpoint, user, fn, **kw):
    async with S3Client(endpoint, user[0], user[1], **kw) as c:
        return await fn(c)


def _native(addr: str, call):
    """What `call(client)` returns with a DataNodeClient connected as a native client: without the cluster secret."""
    async def go():
        host, _, port = addr.rpartition(":")
        dn = DataNodeClient(RpcClient(host, int(port), ""))
        try:
            return await call(dn)
        finally:
            await dn.close()
    return run(go())


def _head(grant: m.WriteGrant, i: int, data: bytes) -> m.ReplicaHead:
    return m.ReplicaHead(grant.blocks[i].id, crc32c(data), len(data))


def test_direct_put_objects_make_objects_as_a_put_would(cluster, bucket, s3):
    small = {f"d/{i}": os.urandom(1000 + i) for i in range(20)}
    big = os.urandom(cluster.block_size * 2 + 12345)  # three blocks
    empty = b""

    async def go(c):
        w = DirectWriter(c)
        res = await w.put_objects(bucket, list(small.items()) + [("big", big), ("empty", empty)])
        return res
    res = run(_with(cluster.endpoint, MAIN, go))
    for (k, v), etag in zip(small.items(), res):
        assert etag == hashlib.md5(v).hexdigest()  # one block: the MD5 of the bytes, as a PutObject's
        got = s3.get_object(Bucket=bucket, Key=k)
        assert got["Body"].read() == v and got["ETag"] == f'"{etag}"'
    md5s = [hashlib.md5(big[o:o + cluster.block_size]).digest() for o in range(0, len(big), cluster.block_size)]
    assert res[-2] == hashlib.md5(b"".join(md5s)).hexdigest() + "-3"
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == big
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    head = s3.head_object(Bucket=bucket, Key="d/3", ChecksumMode="ENABLED")
    assert head["ChecksumCRC32C"] == base64.b64encode(crc32c(small["d/3"]).to_bytes(4, "big")).decode()
    cluster.replicate_once()  # the primary replicated each block to the two other nodes the grant placed it on
    ids = {b.id for b in cluster.nn.stat(bucket, "big").obj.blocks}
    assert len(ids) == 3 and all(ids <= have for have in cluster.datanode_blocks().values())
