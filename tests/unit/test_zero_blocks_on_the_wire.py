"""A large block of zeros crosses the network as its size alone (Put.zero, PutReplica.zero): from the gateway to its
primary, and from the primary to its secondaries; each stores it as its meta (ZEROED). Two DataNodes' handlers
behind real RpcServers on loopback, the primary's Replicator pushing to the other through Peers."""
from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import pytest

from epochfs.common import errors, writetoken
from epochfs.common import messages as m
from epochfs.common.blocks import ZERO_MIN, all_zeros, crc32c, zero_size, zeros
from epochfs.common.clients import DataNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.peers import Peers
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.datanode import keys
from epochfs.datanode.api import OPEN_OPS, make_handlers, open_payload_check
from epochfs.datanode.blockstore import FILED, ZEROED, BlockStore
from epochfs.datanode.replicator import Replicator

S = "zero-secret"
MiB = 1 << 20


def test_zero_size_finds_blocks_of_zeros_in_one_buffer_or_several():
    assert zero_size(bytes(4 * MiB)) == 4 * MiB
    assert zero_size([bytes(MiB), memoryview(bytearray(3 * MiB))]) == 4 * MiB
    assert zero_size(bytes(ZERO_MIN - 1)) == 0, "a small block is sent as its bytes"
    tail = bytearray(4 * MiB)
    tail[-1] = 1
    assert zero_size(tail) == 0 and zero_size([bytes(2 * MiB), bytes(tail[2 * MiB:])]) == 0
    assert all_zeros(zeros(5 * MiB)) and len(zeros(123)) == 123 and not any(zeros(MiB))


def _meta(store: BlockStore, bid: int) -> bytes | None:
    return store.kv.get(keys.meta(bid))


@contextlib.contextmanager
def _two_nodes(tmp_path, body) -> Iterator[tuple[list[BlockStore], list[tuple[int, str, int, int]]]]:
    """Two DataNodes (node ids 1 and 2) behind RpcServers on loopback, the first's pushes going to the second;
    `await body(addrs)`; the stores and every put that came: (node index, op, zero field or -1 for the number of
    heads marked zero, payload bytes)."""
    kvs = [RocksKV.open(tmp_path / f"dn{i}" / "blocks", bulk=True) for i in range(2)]
    stores = [BlockStore(kv, files=tmp_path / f"dn{i}" / "files") for i, kv in enumerate(kvs)]
    got: list[tuple[int, str, int, int]] = []

    def recording(i: int, handlers: dict) -> dict:
        for t in (m.Put, m.PutReplica, m.PutReplicas, m.WriteTokened):
            def wrap(inner, t=t):
                async def h(req, payload):
                    zero = req.zero if hasattr(req, "zero") else -sum(b.zero for b in req.blocks)
                    got.append((i, t.__name__, zero, len(payload)))
                    return await inner(req, payload)
                return h
            handlers[t] = wrap(handlers[t])
        return handlers

    async def go():
        peers = Peers(S)
        tasks: set = set()

        def spawn(coro):
            t = asyncio.ensure_future(coro)
            tasks.add(t)
            t.add_done_callback(tasks.discard)

        servers = [RpcServer(recording(i, make_handlers(s, Replicator(s, peers), spawn, secret=S, max_block=64 * MiB,
                                                        node_id=lambda i=i: i + 1)),
                             S, open_ops=OPEN_OPS, open_payload=open_payload_check(S, lambda i=i: i + 1))
                   for i, s in enumerate(stores)]
        for srv in servers:
            await srv.start("127.0.0.1", 0)
        try:
            await body([f"127.0.0.1:{srv._server.sockets[0].getsockname()[1]}" for srv in servers])
            for _ in range(250):
                if not tasks and not stores[0].due_replications(10, now=float("inf")):
                    break
                await asyncio.sleep(0.02)
        finally:
            await peers.close()
            for srv in servers:
                await srv.stop()

    try:
        asyncio.run(go())
        yield stores, got
    finally:
        for kv in kvs:
            kv.close()


def _client(addr: str, secret: str = S) -> DataNodeClient:
    host, port = addr.split(":")
    return DataNodeClient(RpcClient(host, int(port), secret))


def test_a_block_of_zeros_goes_to_its_primary_and_its_secondary_as_its_size(tmp_path):
    z, data, small = bytes(4 * MiB), os.urandom(4 * MiB), bytes(ZERO_MIN // 2)

    async def body(addr):
        gw = _client(addr[0])
        try:
            await gw.put(1, crc32c(z), [z[:MiB], z[MiB:]], [m.Secondary(2, addr[1])])  # a list, as the gateway sends
            await gw.put(2, crc32c(data), data, [m.Secondary(2, addr[1])])
            await gw.put(3, crc32c(small), small, [m.Secondary(2, addr[1])])
            with pytest.raises(errors.CorruptBlock):  # zeros under another CRC: refused, nothing stored
                await gw.put(4, crc32c(data), z)
            # a raw request naming zeros with bytes, or more zeros than a block may hold: refused
            with pytest.raises(errors.InvalidInput):
                await gw.rpc.request(m.Put(block_id=5, crc=crc32c(z), zero=len(z)), b"x")
            with pytest.raises(errors.InvalidInput):
                await gw.rpc.request(m.PutReplica(block_id=6, crc=0, zero=1 << 40), b"")
        finally:
            await gw.close()

    with _two_nodes(tmp_path, body) as (stores, got):
        assert (0, "Put", 4 * MiB, 0) in got and (1, "PutReplica", 4 * MiB, 0) in got, got
        assert (0, "Put", 0, 4 * MiB) in got and (1, "PutReplica", 0, 4 * MiB) in got, "other data as its bytes"
        assert (0, "Put", 0, ZERO_MIN // 2) in got, "small zeros as their bytes"
        for s in stores:
            assert _meta(s, 1)[12:13] == ZEROED and b"".join(s.read(1)) == z
            assert _meta(s, 2)[12:13] == FILED and b"".join(s.read(2)) == data
            assert _meta(s, 4) is None and _meta(s, 5) is None and _meta(s, 6) is None
            assert s.used == 4 * MiB + ZERO_MIN // 2
        assert not stores[0].due_replications(10, now=float("inf")), "every push done"


def test_batches_and_tokened_writes_send_their_blocks_of_zeros_as_sizes(tmp_path):
    """put_replicas (repair copies, a put_many batch's replication) and write_tokened (a mount's or an fsspec
    file's direct write) mark each large block of zeros and leave it out of the payload; the receipts are those
    of the zeros."""
    z, data, small = bytes(4 * MiB), os.urandom(4 * MiB), os.urandom(5000)
    receipts = {}

    async def body(addr):
        peer = _client(addr[1])
        native = _client(addr[0], secret="")  # a client without the cluster secret, with a write token
        try:
            heads = [m.ReplicaHead(10, crc32c(z), len(z)), m.ReplicaHead(11, crc32c(data), len(data)),
                     m.ReplicaHead(12, crc32c(small), len(small)), m.ReplicaHead(13, crc32c(z), len(z))]
            assert await peer.put_replicas(heads, [z + data[:MiB], data[MiB:] + small, z]) == {}
            alloc = m.Allocation(block_size=4 * MiB, blocks=[m.Placed(20, (1, 2)), m.Placed(21, (1, 2))],
                                 addrs={"1": addr[0], "2": addr[1]})
            grant = writetoken.issue(S, bucket="b", who="k", alloc=alloc)
            for fast in (True, False):
                ids = (20, 21) if fast else (20,)
                blocks = [z, data][:len(ids)]
                if not fast:  # a second grant for a one-block object: its receipt's digest is the zeros' MD5
                    alloc = m.Allocation(block_size=4 * MiB, blocks=[m.Placed(30, (1, 2))],
                                         addrs={"1": addr[0], "2": addr[1]})
                    grant, ids = writetoken.issue(S, bucket="b", who="k", alloc=alloc), (30,)
                rs = await native.write_tokened(grant, [m.ReplicaHead(i, crc32c(b), len(b))
                                                        for i, b in zip(ids, blocks)], blocks, fast=fast)
                assert rs.errs == {}
                receipts.update({r.id: r for r in rs.done})
        finally:
            await peer.close()
            await native.close()

    with _two_nodes(tmp_path, body) as (stores, got):
        assert (1, "PutReplicas", -2, 4 * MiB + 5000) in got, got
        assert (0, "WriteTokened", -1, 4 * MiB) in got and (0, "WriteTokened", -1, 0) in got, got
        for bid in (10, 13):
            assert _meta(stores[1], bid)[12:13] == ZEROED and b"".join(stores[1].read(bid)) == z
        assert b"".join(stores[1].read(11)) == data and b"".join(stores[1].read(12)) == small
        for s in stores:  # the tokened writes stored on both nodes (the second by the first's replication)
            for bid in (20, 30):
                assert _meta(s, bid)[12:13] == ZEROED
            assert b"".join(s.read(21)) == data
        for bid in (20, 21, 30):
            writetoken.check_receipt(S, receipts[bid])
        assert receipts[20].digest == writetoken.block_digest(z, True)
        assert receipts[30].digest == writetoken.block_digest(z, False) and receipts[30].size == 4 * MiB
