"""Batch reads straight from the DataNodes with the gateway's read token, and the fallback through the gateway."""
from __future__ import annotations

import asyncio

import msgspec
import orjson
import pytest

from cluster import ALT, MAIN, SECRET, Cluster
from epochfs.common import errors, readtoken
from epochfs.common import messages as m
from epochfs.common.clients import DataNodeClient
from epochfs.common.client import S3Client
from epochfs.common.rpc import RpcClient

pytestmark = pytest.mark.integration


def run(coro):
    return asyncio.run(coro)


async def _locate(endpoint, user, items) -> m.BatchLocated:
    async with S3Client(endpoint, user[0], user[1]) as c:
        body = orjson.dumps({"items": [{"bucket": b, "key": k} for b, k in items]})
        return msgspec.json.decode((await c._fs_send("POST", "locate", content=body)).content, type=m.BatchLocated)


def _read(addr: str, call):
    """What `call(client)` returns with a DataNodeClient connected as a native client: without the cluster secret."""
    async def go():
        host, _, port = addr.rpartition(":")
        dn = DataNodeClient(RpcClient(host, int(port), ""))
        try:
            return await call(dn)
        finally:
            await dn.close()
    return run(go())


def _piece(plan: m.BatchLocated, i: int) -> tuple[m.BlockRead, str]:
    p = plan.items[i].pieces[0]
    return m.BlockRead(id=p.id, offset=p.offset, length=p.length), plan.addrs[str(p.nodes[0])]


def test_datanode_serves_a_valid_token_and_refuses_forged_expired_or_foreign_ones(cluster, bucket, s3):
    s3.put_object(Bucket=bucket, Key="a", Body=b"alpha" * 100)
    s3.put_object(Bucket=bucket, Key="b", Body=b"beta" * 100)
    plan = run(_locate(cluster.endpoint, MAIN, [(bucket, "a")]))
    read, addr = _piece(plan, 0)
    grant = plan.grant
    head, data = _read(addr, lambda dn: dn.read_tokened([read], grant))
    assert bytes(data) == b"alpha" * 100 and head.lens == [500] and not head.errs

    forged = msgspec.structs.replace(grant, tok=grant.tok[:-2] + ("00" if grant.tok[-2:] != "00" else "11"))
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        _read(addr, lambda dn: dn.read_tokened([read], forged))
    # a token for "a" does not open "b", even with b's id added to the list it claims to cover
    other, _ = _piece(run(_locate(cluster.endpoint, MAIN, [(bucket, "b")])), 0)
    with pytest.raises(errors.Unauthorized, match="does not cover"):
        _read(addr, lambda dn: dn.read_tokened([other], grant))
    widened = msgspec.structs.replace(grant, blocks=grant.blocks + [other.id])
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        _read(addr, lambda dn: dn.read_tokened([other], widened))
    expired = readtoken.issue(SECRET, [read.id], ttl_s=-5)
    with pytest.raises(errors.Unauthorized, match="expired"):
        _read(addr, lambda dn: dn.read_tokened([read], expired))
    # a connection without the secret may do nothing but tokened reads
    with pytest.raises(errors.Unauthorized, match="cluster secret"):
        _read(addr, lambda dn: dn.get(read.id))
    with pytest.raises(errors.Unauthorized, match="cluster secret"):
        _read(addr, lambda dn: dn.delete([read.id]))
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"alpha" * 100


def test_locate_checks_access_like_get_object(cluster, bucket, s3):
    s3.put_object(Bucket=bucket, Key="private", Body=b"x")
    plan = run(_locate(cluster.endpoint, ALT, [(bucket, "private")]))
    assert plan.items[0].err == "AccessDenied" and plan.grant.blocks == []


def test_batch_reads_other_replicas_when_a_datanode_is_unreachable(tmp_path):
    c = Cluster(tmp_path).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="fallback")
        want = {f"k{i}": bytes([i]) * (1000 + i) for i in range(30)}
        for k, v in want.items():
            s3.put_object(Bucket="fallback", Key=k, Body=v)
        c.replicate_once()
        c.kill("dn1")  # still listed as alive by the NameNode: the client is sent there and can't connect

        async def go():
            sent = []
            async with S3Client(c.endpoint, MAIN[0], MAIN[1]) as cl:
                send = cl._send
                cl._send = lambda method, b="", k="", **kw: sent.append(k) or send(method, b, k, **kw)
                items = [("fallback", k, None, None) for k in want]
                first = await cl.batch_get(items)
                second = await cl.batch_get(items)
            return first, second, sent

        first, second, sent = run(go())
        assert first == second == list(want.values())
        # the pieces dn1 was to serve came from the blocks' other holders, straight from the DataNodes both times
        # (the second batch skips dn1); the gateway only located
        assert sent == ["locate", "locate"]
    finally:
        c.close()
