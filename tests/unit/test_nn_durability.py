"""NameNode durability in the embedded mode (issue 16 point 1): a reply is written only after the command it reflects
is in the fsynced RocksDB WAL, and concurrent commands share their fsyncs (group commit). Observed through RocksDB's
own statistics on a real store, over the real RPC server."""
from __future__ import annotations

import asyncio

from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.namenode import keys
from epochfs.namenode.api import nodes
from epochfs.namenode.ha.journal import LocalJournal
from epochfs.namenode.jobs import OperatorJobs
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.repair import RepairWorker

SECRET = "s3cret"


def wal_synced(kv: RocksKV) -> int:
    return kv.statistics().get("rocksdb.wal.synced", 0)


def serve(tmp_path, test):
    kv = RocksKV.open(tmp_path / "meta", statistics=True)

    async def main():
        meta = MetaStore(kv)
        journal = meta.journal = LocalJournal(kv, meta)
        members = Membership(meta, timeout_s=10.0)
        repair = RepairWorker(meta, members)
        server = RpcServer(nodes.handlers(meta, members, repair, OperatorJobs(meta, members, repair), journal),
                           SECRET, before_reply=lambda req: journal.durable(meta.seq))
        await server.start("127.0.0.1", 0)
        client = NameNodeClient(RpcClient("127.0.0.1", server._server.sockets[0].getsockname()[1], SECRET))
        try:
            await test(client, meta, journal)
        finally:
            await client.close()
            await server.stop()
    try:
        asyncio.run(main())
    finally:
        kv.close()


def test_a_command_is_acknowledged_only_after_a_wal_fsync_and_each_batch_records_its_seq(tmp_path):
    async def test(client, meta, journal):
        first = meta.seq
        assert first >= 1 and meta.stored_seq() == first  # InitRoot: command 1, applied_seq in its own batch
        before = wal_synced(meta.kv)
        await client.register(m.Register(uuid="u1", host="h", rpc_port=1))
        assert wal_synced(meta.kv) > before  # the reply waited for a sync that began after the command
        assert meta.seq == first + 2  # AssignNodeId, SaveNode
        assert meta.kv.get(keys.APPLIED_SEQ) == keys.u64(meta.seq)
        assert journal.synced == meta.seq
        idle = wal_synced(meta.kv)
        await client.heartbeat(m.Heartbeat(node_id=2))  # changes nothing durable: no sync
        assert wal_synced(meta.kv) == idle
    serve(tmp_path, test)


def test_concurrent_commands_share_wal_fsyncs(tmp_path):
    async def test(client, meta, journal):
        before_syncs, before_seq = wal_synced(meta.kv), meta.seq
        ids = await asyncio.gather(*(client.register(m.Register(uuid=f"u{i}", host="h", rpc_port=i + 1))
                                     for i in range(32)))
        n = wal_synced(meta.kv) - before_syncs
        assert meta.seq - before_seq == 64
        assert 1 <= n <= 8, f"{n} WAL syncs for 32 concurrent registrations (64 commands): no group commit"
        assert journal.syncs == n and journal.synced == meta.seq
        assert len(set(ids)) == 32
    serve(tmp_path, test)


def test_ha_status_in_the_embedded_mode_names_the_one_namenode(tmp_path):
    async def test(client, meta, journal):
        journal.name, journal.addr = "nn", "127.0.0.1:1"
        await client.register(m.Register(uuid="u1", host="h", rpc_port=1))
        st = await journal.ha_state()
        assert (st.mode, st.role, st.epoch, st.log_end) == ("embedded", "embedded", 0, meta.seq)
        assert [(x.name, x.applied) for x in st.members] == [("nn", meta.seq)]
    serve(tmp_path, test)
