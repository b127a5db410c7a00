import asyncio
import hashlib
import struct

import msgspec
import orjson
import pytest
import xxhash

from epochfs.common import errors, messages as m, writetoken
from epochfs.common.rpc import RpcClient, RpcServer

S = "s3cret"
ALLOC = m.Allocation(block_size=1 << 20, blocks=[m.Placed(10, (1, 2, 3)), m.Placed(11, (2, 3, 1))],
                     addrs={"1": "10.0.0.1:7001", "2": "10.0.0.2:7001", "3": "10.0.0.3:7001", "9": "10.0.0.9:1"},
                     acks=2)


def _grant(**kw) -> m.WriteGrant:
    return writetoken.issue(S, bucket="b", who="AK", alloc=ALLOC, **kw)


def test_a_write_token_names_its_bucket_caller_blocks_nodes_and_sizes():
    g = _grant()
    assert (g.bucket, g.who, [p.id for p in g.blocks], g.size, g.acks) == ("b", "AK", [10, 11], 1 << 20, 2)
    assert set(g.addrs) == {"1", "2", "3"}  # only the placed nodes' addresses are signed in
    writetoken.check(S, g)
    heads = [m.ReplicaHead(10, 0, 100), m.ReplicaHead(11, 0, 1 << 20)]
    assert writetoken.check_heads(S, g, heads, 2, 100 + (1 << 20)) == {10: (1, 2, 3), 11: (2, 3, 1)}
    # any field changed, and the token is not ours any more: more blocks, other nodes or addresses (a client
    # would make the DataNode push the block, with the cluster secret, to an address of its choosing), a larger
    # size, a later expiry, fewer copies to wait for, another bucket or caller
    for change in (dict(blocks=g.blocks + [m.Placed(12, (1, 2, 3))]),
                   dict(blocks=[m.Placed(10, (1, 2, 9)), g.blocks[1]]),
                   dict(addrs={**g.addrs, "2": "evil:1"}), dict(size=g.size + 1), dict(exp=g.exp + 3600),
                   dict(acks=1), dict(bucket="c"), dict(who="AK2")):
        with pytest.raises(errors.Unauthorized, match="bad write token"):
            writetoken.check(S, msgspec.structs.replace(g, **change))
    with pytest.raises(errors.Unauthorized, match="bad write token"):
        writetoken.check("other-cluster", g)


def test_a_datanode_refuses_other_blocks_other_nodes_oversize_and_expired_tokens():
    g = _grant()
    with pytest.raises(errors.Unauthorized, match="does not cover block 12"):
        writetoken.check_heads(S, g, [m.ReplicaHead(12, 0, 10)], 1, 10)
    with pytest.raises(errors.Unauthorized, match="not placed on this node"):
        writetoken.check_heads(S, g, [m.ReplicaHead(10, 0, 10)], 4, 10)
    with pytest.raises(errors.Unauthorized, match="not placed on this node"):  # not registered yet: no node id
        writetoken.check_heads(S, g, [m.ReplicaHead(10, 0, 10)], None, 10)
    with pytest.raises(errors.EntityTooLarge, match="allows 1048576"):
        writetoken.check_heads(S, g, [m.ReplicaHead(10, 0, (1 << 20) + 1)], 1, (1 << 20) + 1)
    with pytest.raises(errors.InvalidInput, match="add up"):
        writetoken.check_heads(S, g, [m.ReplicaHead(10, 0, 10)], 1, 11)
    with pytest.raises(errors.InvalidInput, match="twice"):
        writetoken.check_heads(S, g, [m.ReplicaHead(10, 0, 10), m.ReplicaHead(10, 0, 10)], 1, 20)
    old = _grant(ttl_s=-1)
    with pytest.raises(errors.Unauthorized, match="expired"):
        writetoken.check_heads(S, old, [m.ReplicaHead(10, 0, 10)], 1, 10)
    writetoken.check(S, old, live=False)  # the gateway's commit takes an expired grant (the NameNode's pending
    #                                       record decides whether its blocks can still be committed)


def test_receipts_are_the_datanodes_word():
    r = writetoken.receipt(S, id=10, size=5, crc=7, digest=hashlib.md5(b"hello").hexdigest(), nodes=(1, 2, 3),
                           acks=1)
    writetoken.check_receipt(S, r)
    for change in (dict(size=6), dict(crc=8), dict(digest="0" * 32), dict(digest="x" + r.digest),
                   dict(nodes=(1, 2)), dict(acks=3), dict(id=11)):
        with pytest.raises(errors.Unauthorized, match="bad receipt"):
            writetoken.check_receipt(S, msgspec.structs.replace(r, **change))
    g = _grant()  # a write token's MAC is no receipt's (keys of their own)
    with pytest.raises(errors.Unauthorized, match="bad receipt"):
        writetoken.check_receipt(S, msgspec.structs.replace(r, mac=g.tok))


def test_etag_is_the_md5_for_one_block_and_multipart_style_for_more():
    a, b = hashlib.md5(b"a").hexdigest(), hashlib.md5(b"b").hexdigest()
    assert writetoken.object_etag([]) == hashlib.md5(b"").hexdigest()
    assert writetoken.object_etag([a]) == a
    assert writetoken.object_etag([a, b]) == hashlib.md5(bytes.fromhex(a) + bytes.fromhex(b)).hexdigest() + "-2"


def test_blocks_of_an_object_of_several_are_digested_fast_and_give_a_multipart_form_etag():
    """A fast digest is the XXH3-128 (not the MD5) behind an "x"; an ETag over such digests is the multipart form,
    also for a single block (an MD5 of the bytes can't be made of it), and changes with any block's bytes."""
    a, b = b"a" * 1000, b"b" * 1000
    fa, fb = writetoken.block_digest(a, True), writetoken.block_digest(b, True)
    assert fa == "x" + xxhash.xxh3_128_hexdigest(a) and writetoken.block_digest(a, False) == hashlib.md5(a).hexdigest()
    raw = bytes.fromhex(fa[1:]) + bytes.fromhex(fb[1:])
    assert writetoken.object_etag([fa, fb]) == hashlib.md5(raw).hexdigest() + "-2"
    assert writetoken.object_etag([fa]) == hashlib.md5(bytes.fromhex(fa[1:])).hexdigest() + "-1"
    c = b"a" * 999 + b"c"
    assert writetoken.object_etag([writetoken.block_digest(c, True), fb]) != writetoken.object_etag([fa, fb])


def test_a_refused_payload_is_never_buffered():
    """A connection without the cluster secret announces a 48 MiB payload its token does not allow: the server
    answers the refusal after reading past it in 64 KiB pieces, and a good write on the same connection goes on."""
    seen = []

    async def write(req, payload):
        seen.append(len(payload))
        return m.Receipts(done=[])

    def open_payload(req, n):
        writetoken.check_heads(S, req.grant, req.blocks, 1, n)

    async def go():
        server = RpcServer({m.WriteTokened: write}, S, open_ops=frozenset({"write_tokened"}), open_payload=open_payload,
                           max_payload=64 << 20)
        await server.start("127.0.0.1", 0)
        port = server._server.sockets[0].getsockname()[1]
        biggest = 0

        def watch():
            nonlocal biggest
            for c in server._conns:
                biggest = max(biggest, len(c._buf))
        client = RpcClient("127.0.0.1", port, "")
        try:
            g = _grant()
            big = bytes(48 << 20)
            req = m.WriteTokened(grant=g, blocks=[m.ReplicaHead(10, 0, len(big))])
            task = asyncio.ensure_future(client.request(req, big))
            while not task.done():
                watch()
                await asyncio.sleep(0.001)
            with pytest.raises(errors.EntityTooLarge):
                task.result()
            assert biggest <= 64 << 10 and seen == []
            await client.request(m.WriteTokened(grant=g, blocks=[m.ReplicaHead(10, 0, 100)]), bytes(100))
            assert seen == [100]
            with pytest.raises(errors.Unauthorized, match="does not cover"):
                await client.request(m.WriteTokened(grant=g, blocks=[m.ReplicaHead(99, 0, 100)]), bytes(100))
            assert seen == [100]
        finally:
            await client.close()
            await server.stop()
    asyncio.run(go())


def test_an_unauthenticated_payload_over_the_servers_bound_closes_the_connection():
    async def go():
        server = RpcServer({m.WriteTokened: None}, S, open_ops=frozenset({"write_tokened"}),
                           open_payload=lambda req, n: None, max_payload=1 << 20)
        await server.start("127.0.0.1", 0)
        port = server._server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        hello = orjson.dumps({"op": "hello"})
        w.write(struct.pack(">II", len(hello), 0) + hello)
        await r.readexactly(8 + 2)
        w.write(struct.pack(">II", 10, 2 << 20) + b"{" * 10)  # over max_payload: cut before anything is read
        try:  # closed (abort: a reset) at once
            assert await asyncio.wait_for(r.read(), 5) == b""
        except ConnectionResetError:
            pass
        w.close()
        await server.stop()
    asyncio.run(go())
