"""Direct writes: the client stores blocks on the DataNodes with the gateway's write token; the gateway commits."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os

import msgspec
import pytest
import xxhash

from test_direct_reads import _read  # noqa: E402
from botocore.exceptions import ClientError

from cluster import ALT, MAIN, SECRET
from epochfs.common import errors, writetoken
from epochfs.common import messages as m
from epochfs.common.blocks import crc32c
from epochfs.common.client import S3Client
from epochfs.common.directwrite import DirectWriter

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(coro)


async def _with(endpoint, user, fn, **kw):
    async with S3Client(endpoint, user[0], user[1], **kw) as c:
        return await fn(c)


_native = _read  # a DataNodeClient connected as a native client (test_direct_reads.py's)


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


def _plan(cluster, bucket, user=MAIN, keys=("k",), sizes=(), more=0) -> m.WriteGrant:
    return run(_with(cluster.endpoint, user, lambda c: DirectWriter(c).allocate(bucket, list(keys), list(sizes), more)))


def _commit(cluster, bucket, grants, items, user=MAIN) -> list[m.PutResult]:
    return run(_with(cluster.endpoint, user, lambda c: DirectWriter(c).commit(bucket, grants, items)))


def _store(grant: m.WriteGrant, i: int, data: bytes, node: int | None = None, head: m.ReplicaHead | None = None):
    """write_tokened of block i of `grant` to `node` (its primary by default), as a native client."""
    n = grant.blocks[i].nodes[0] if node is None else node
    return _native(grant.addrs[str(n)], lambda dn: dn.write_tokened(grant, [head or _head(grant, i, data)], data))


def test_datanode_takes_exactly_the_blocks_sizes_and_time_a_token_allows(cluster, bucket, s3):
    g = _plan(cluster, bucket, more=2)
    a, b = os.urandom(5000), os.urandom(6000)
    got = _store(g, 0, a)
    assert got.done[0].size == 5000 and got.done[0].digest == hashlib.md5(a).hexdigest() and not got.errs
    # a token for blocks A and B does not open block C, nor does one widened to name it
    other = _plan(cluster, bucket, more=1)
    c_head = _head(other, 0, b)
    addr = g.addrs[str(g.blocks[0].nodes[0])]
    with pytest.raises(errors.Unauthorized, match="does not cover"):
        _native(addr, lambda dn: dn.write_tokened(g, [c_head], b))
    widened = msgspec.structs.replace(g, blocks=g.blocks + other.blocks, addrs={**g.addrs, **other.addrs})
    with pytest.raises(errors.Unauthorized, match="bad write token"):
        _native(addr, lambda dn: dn.write_tokened(widened, [c_head], b))
    # a block over the token's size is refused from its head, before its bytes are taken
    big = bytes(g.size + 1)
    with pytest.raises(errors.EntityTooLarge):
        _native(addr, lambda dn: dn.write_tokened(g, [m.ReplicaHead(g.blocks[1].id, crc32c(big), len(big))], big))
    # one write per block: other bytes for it (a replay while the token lives) are refused, its copy unchanged;
    # the same bytes again (a retry whose answer was lost) get the same receipt
    again = _store(g, 0, b, head=m.ReplicaHead(g.blocks[0].id, crc32c(b), len(b)))
    assert again.done == [None] and again.errs == {0: "Conflict"}
    assert _store(g, 0, a).done == got.done
    assert cluster.read_replica(f"dn{_dn_index(cluster, g.blocks[0].nodes[0])}", g.blocks[0].id) == a
    # a bad CRC is that block's error
    bad = _store(g, 1, b, head=m.ReplicaHead(g.blocks[1].id, crc32c(b) ^ 1, len(b)))
    assert bad.done == [None] and bad.errs == {0: "CorruptBlock"}
    # an expired token (signed with the cluster's secret, so only its expiry is wrong) is refused
    expired = writetoken.issue(SECRET, bucket=bucket, who=MAIN[0], ttl_s=-5, alloc=m.Allocation(
        block_size=g.size, blocks=g.blocks, addrs=g.addrs, acks=g.acks))
    with pytest.raises(errors.Unauthorized, match="expired"):
        _native(addr, lambda dn: dn.write_tokened(expired, [_head(g, 1, b)], b))
    # a native connection still can't do anything but tokened reads and writes
    with pytest.raises(errors.Unauthorized, match="cluster secret"):
        _native(addr, lambda dn: dn.put(g.blocks[1].id, crc32c(b), b))
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)  # nothing committed: nothing visible


def _dn_index(cluster, node_id: int) -> int:
    return int({v: k for k, v in cluster.node_ids().items()}[node_id][2:])


def test_commit_takes_only_the_callers_fresh_blocks_with_true_receipts(cluster, bucket, s3):
    g = _plan(cluster, bucket, keys=["a", "b"], more=4)
    data = [os.urandom(3000 + i) for i in range(4)]
    rs = [_store(g, i, d).done[0] for i, d in enumerate(data)]
    item = lambda key, blocks, **kw: m.DirectItem(key=key, blocks=blocks, **kw)  # noqa: E731
    # a receipt whose size, CRC or MD5 the client changed is refused (the DataNode's MAC); a refused item's
    # blocks are given back, as a failed PUT's
    lie = msgspec.structs.replace(rs[0], digest=hashlib.md5(b"other").hexdigest())
    res = _commit(cluster, bucket, [g], [item("x", [lie])])
    assert res[0].err == "AccessDenied" and "bad receipt" in res[0].msg
    assert rs[0].id not in set(cluster.nn.pending())
    # another access key can't commit the blocks (the grant names its caller)
    with pytest.raises(errors.Unauthorized):
        _commit(cluster, bucket, [g], [item("a", [rs[1]])], user=ALT)
    # a grant of another bucket covers none of them, in either bucket
    s3.create_bucket(Bucket=bucket + "-x")
    gx = _plan(cluster, bucket + "-x", more=1)
    with pytest.raises(errors.Unauthorized):
        _commit(cluster, bucket, [gx], [item("a", [rs[1]])])
    res = _commit(cluster, bucket + "-x", [gx], [item("a", [rs[1]])])
    assert res[0].err == "AccessDenied" and "not allocated to you" in res[0].msg
    # the honest commit; a checksum given is checked against the blocks' CRCs
    want = base64.b64encode(crc32c(data[1]).to_bytes(4, "big")).decode()
    res = _commit(cluster, bucket, [g], [item("a", [rs[1]], checksum={"crc32c": want}),
                                         item("b", [rs[2]], checksum={"crc32c": "AAAAAA=="})])
    assert res[0].etag.strip('"') == hashlib.md5(data[1]).hexdigest() and res[1].err == "BadDigest"
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == data[1]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["a"]
    # a block committed once can't be committed again (under another key, or twice in one commit): two objects
    # sharing a block would lose it when one is deleted
    res = _commit(cluster, bucket, [g], [item("c", [rs[1]])])
    assert res[0].err == "InvalidArgument" and "committed already" in res[0].msg
    res = _commit(cluster, bucket, [g], [item("c", [rs[3]]), item("d", [rs[3]])])
    assert res[0].etag and res[1].err == "InvalidArgument"
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == data[1]
    assert s3.get_object(Bucket=bucket, Key="c")["Body"].read() == data[3]
    assert not {r.id for r in rs} & set(cluster.nn.pending())  # committed, or given back
    # a block not full-size before the last one is refused: block boundaries are the bucket's
    g2 = _plan(cluster, bucket, more=2)
    r2 = [_store(g2, i, os.urandom(100)).done[0] for i in range(2)]
    res = _commit(cluster, bucket, [g2], [item("short", r2)])
    assert res[0].err == "InvalidArgument" and "every block but the last" in res[0].msg
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="short")


def test_conditions_quota_and_policy_apply_to_a_direct_commit(cluster, bucket, s3):
    run(_with(cluster.endpoint, MAIN, lambda c: DirectWriter(c).put_objects(bucket, [("k", b"one")])))
    res = run(_with(cluster.endpoint, MAIN, lambda c: DirectWriter(c).put_objects(
        bucket, [("k", b"two"), ("new", b"x")], if_none_match="*")))
    assert isinstance(res[0], errors.PreconditionFailed) and res[1] == hashlib.md5(b"x").hexdigest()
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"one"
    # the bucket's quota counts each object of a direct commit: what fits commits, the rest is its own error and
    # its blocks are given back
    cluster.nn.bucket_settings(bucket, quota_objects=5)  # "k" and "new" already
    res = run(_with(cluster.endpoint, MAIN, lambda c: DirectWriter(c).put_objects(
        bucket, [(f"q{i}", bytes([i]) * 100) for i in range(5)])))
    assert [isinstance(r, str) for r in res] == [True] * 3 + [False] * 2
    assert all(isinstance(r, errors.QuotaExceeded) for r in res[3:])
    assert (lambda u: u.objects)(cluster.nn.bucket_usage(bucket)[bucket]) == 5
    with pytest.raises(ClientError):
        s3.head_object(Bucket=bucket, Key="q3")
    # ALT has no right to write here: the allocation is refused before any block exists
    with pytest.raises(errors.Unauthorized):
        _plan(cluster, bucket, user=ALT, keys=["k"], sizes=[3])


def test_a_bucket_that_encrypts_by_default_is_written_through_the_gateway(cluster, bucket, s3):
    s3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={
        "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]})
    other = bucket + "-plain"
    s3.create_bucket(Bucket=other)
    items = [(f"k{i}", os.urandom(500 + i)) for i in range(5)]

    async def go(c):
        with pytest.raises(errors.Unavailable, match="encrypts new objects"):
            await DirectWriter(c).allocate(bucket, ["k0"], [500])
        enc = await c.put_many(bucket, items)  # refused directly: the gateway encrypts them
        plain = await c.put_many(other, items)  # another bucket still goes directly
        return enc, plain, c.direct_writes, c.gateway_writes
    enc, plain, direct, gateway = run(_with(cluster.endpoint, MAIN, go))
    assert (direct, gateway) == (5, 5)
    for (k, v), e in zip(items, enc):
        got = s3.get_object(Bucket=bucket, Key=k)
        assert got["Body"].read() == v and got["ServerSideEncryption"] == "AES256"
    assert plain == [hashlib.md5(v).hexdigest() for _, v in items]


def test_a_stream_aborted_while_its_rounds_are_stored_leaves_nothing_and_gives_its_blocks_back(cluster, bucket, s3):
    """A direct stream keeps a round of blocks being stored while its writer fills the next: an abort then cancels
    what is in flight and gives back every block it was allocated; a stream finished the same way is whole."""
    chunk = os.urandom(1 << 20)

    async def stream(c: S3Client, key: str, finish: bool):
        up = c.direct.upload(bucket, key)
        for _ in range(40):  # 10 blocks of 4 MiB: 2 rounds of 4 sent, the second still storing; 2 buffered
            await up.write(chunk)
        storing = len(up._storing)
        ids = [b.id for g in up.grants for b in g.blocks]
        if finish:
            return storing, await up.finish()
        await up.abort()
        return storing, ids

    storing, ids = run(_with(cluster.endpoint, MAIN, lambda c: stream(c, "gone", False)))
    assert storing == 1 and len(ids) >= 8  # two rounds sent, the second one still storing
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    assert not set(ids) & set(cluster.nn.pending())  # given back, none left to the pending expiry
    storing, etag = run(_with(cluster.endpoint, MAIN, lambda c: stream(c, "kept", True)))
    assert storing == 1
    got = s3.get_object(Bucket=bucket, Key="kept")
    assert got["Body"].read() == chunk * 40 and got["ETag"] == f'"{etag}"'
    # an object of several blocks: the multipart form over the blocks' XXH3-128s (the DataNodes hashed no MD5)
    bs, data = cluster.block_size, chunk * 40
    digests = [xxhash.xxh3_128_digest(data[o:o + bs]) for o in range(0, len(data), bs)]
    assert etag == hashlib.md5(b"".join(digests)).hexdigest() + f"-{len(digests)}"


def test_a_stream_of_one_block_has_the_md5_etag_of_a_put(cluster, bucket, s3):
    small = os.urandom(100_000)

    async def go(c: S3Client):
        return await c.direct.put_stream(bucket, "one", [small[:50_000], small[50_000:]])
    etag = run(_with(cluster.endpoint, MAIN, go))
    assert etag == hashlib.md5(small).hexdigest()
    assert s3.head_object(Bucket=bucket, Key="one")["ETag"] == f'"{etag}"'
