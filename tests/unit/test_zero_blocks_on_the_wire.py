"""A large block of zeros crosses the network as its size alone (Put.zero, PutReplica.zero): from the gateway to its
primary, and from the primary to its secondaries; each stores it as its meta (ZEROED). Two DataNodes' handlers
behind real RpcServers on loopback, the primary's Replicator pushing to the other through Peers."""
from __future__ import annotations

import asyncio
import os

import pytest

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.blocks import ZERO_MIN, all_zeros, crc32c, zero_size, zeros
from epochfs.common.clients import DataNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.peers import Peers
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.datanode import keys
from epochfs.datanode.api import make_handlers
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


def test_a_block_of_zeros_goes_to_its_primary_and_its_secondary_as_its_size(tmp_path):
    kvs = [RocksKV.open(tmp_path / f"dn{i}" / "blocks", bulk=True) for i in range(2)]
    stores = [BlockStore(kv, files=tmp_path / f"dn{i}" / "files") for i, kv in enumerate(kvs)]
    got: list[tuple[int, str, int, int]] = []  # (node, op, the zero field, payload bytes) of every put that came

    def recording(i: int, handlers: dict) -> dict:
        for t in (m.Put, m.PutReplica):
            def wrap(inner, t=t):
                async def h(req, payload):
                    got.append((i, t.__name__, req.zero, len(payload)))
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

        servers = [RpcServer(recording(i, make_handlers(s, Replicator(s, peers), spawn, max_block=64 * MiB)), S)
                   for i, s in enumerate(stores)]
        for srv in servers:
            await srv.start("127.0.0.1", 0)
        addr = [f"127.0.0.1:{srv._server.sockets[0].getsockname()[1]}" for srv in servers]
        gw = DataNodeClient(RpcClient(*addr[0].split(":")[:1], int(addr[0].split(":")[1]), S))
        try:
            z = bytes(4 * MiB)
            await gw.put(1, crc32c(z), [z[:MiB], z[MiB:]], [m.Secondary(2, addr[1])])  # a list, as the gateway sends
            data = os.urandom(4 * MiB)
            await gw.put(2, crc32c(data), data, [m.Secondary(2, addr[1])])
            small = bytes(ZERO_MIN // 2)
            await gw.put(3, crc32c(small), small, [m.Secondary(2, addr[1])])
            for _ in range(200):
                if len([g for g in got if g[0] == 1]) == 3 and not tasks:
                    break
                await asyncio.sleep(0.02)
            # wrong CRC for zeros: refused, nothing stored
            with pytest.raises(errors.CorruptBlock):
                await gw.put(4, crc32c(data), z)
            # a raw request naming zeros with bytes, or more zeros than a block may hold: refused
            raw = RpcClient(*addr[0].split(":")[:1], int(addr[0].split(":")[1]), S)
            with pytest.raises(errors.InvalidInput):
                await raw.request(m.Put(block_id=5, crc=crc32c(z), zero=len(z)), b"x")
            with pytest.raises(errors.InvalidInput):
                await raw.request(m.PutReplica(block_id=6, crc=0, zero=1 << 40), b"")
            await raw.close()
        finally:
            await gw.close()
            await peers.close()
            for srv in servers:
                await srv.stop()

    asyncio.run(go())
    puts = sorted((node, op, zero, n) for node, op, zero, n in got if op in ("Put", "PutReplica"))
    assert (0, "Put", 4 * MiB, 0) in puts and (1, "PutReplica", 4 * MiB, 0) in puts, puts
    assert (0, "Put", 0, 4 * MiB) in puts and (1, "PutReplica", 0, 4 * MiB) in puts, "other data as its bytes"
    assert (0, "Put", 0, ZERO_MIN // 2) in puts, "small zeros as their bytes"
    for s in stores:
        assert _meta(s, 1)[12:13] == ZEROED and b"".join(s.read(1)) == bytes(4 * MiB)
        assert _meta(s, 2)[12:13] == FILED
        assert _meta(s, 4) is None and _meta(s, 5) is None and _meta(s, 6) is None
    assert stores[0].used == stores[1].used == 4 * MiB + ZERO_MIN // 2
    assert not stores[0].due_replications(10, now=float("inf")), "every push done"
    for kv in kvs:
        kv.close()
