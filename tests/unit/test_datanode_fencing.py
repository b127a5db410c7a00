"""DataNode fencing (issue 16): a real DataNode app (its RocksDB store, RPC server and heartbeat loop) heartbeats to
NameNodes played by RpcServers on loopback; a reply whose fencing epoch is below the highest the DataNode has seen
(a deposed leader's) gets none of its orders obeyed, and is logged and counted."""
from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from epochfs.common import errors, ports
from epochfs.common import messages as m
from epochfs.common.blocks import crc32c
from epochfs.common.clients import DataNodeClient
from epochfs.common.rpc import RpcClient, RpcServer
from epochfs.datanode.app import create_app
from epochfs.datanode.config import DataNodeSettings

SECRET = "s3cret"


class FakeNameNode:
    """Answers register and heartbeat: `orders` is the next heartbeat reply (then empty orders with `epoch`);
    a standby (not `active`) answers NotLeader naming `leader`."""

    def __init__(self, epoch: int, active: bool = True) -> None:
        self.epoch, self.active, self.leader = epoch, active, ""
        self.port = ports.free_block()
        self.addr = f"127.0.0.1:{self.port}"
        self.orders: m.HeartbeatOrders | None = None
        self.beats: list[m.Heartbeat] = []
        self.server = RpcServer({m.Register: self._register, m.Heartbeat: self._heartbeat}, SECRET)

    def _check(self):
        if not self.active:
            raise errors.NotLeader("standby", leader=self.leader)

    async def _register(self, req, payload):
        self._check()
        return m.Registered(node_id=1, epoch=self.epoch)

    async def _heartbeat(self, req, payload):
        self._check()
        self.beats.append(req)
        orders, self.orders = self.orders, None
        return orders or m.HeartbeatOrders(epoch=self.epoch)

    async def reply_once(self, orders: m.HeartbeatOrders) -> m.Heartbeat:
        """Make `orders` the next reply; the heartbeat after the one that carried them (the DataNode acted)."""
        self.orders = orders
        while self.orders is not None:
            await asyncio.sleep(0.02)
        n = len(self.beats)
        while len(self.beats) <= n:
            await asyncio.sleep(0.02)
        return self.beats[-1]


def stale_count() -> float:
    return REGISTRY.get_sample_value("epochfs_datanode_stale_orders_total") or 0.0


def test_orders_of_a_deposed_namenode_are_refused(tmp_path, caplog):
    async def main():
        old, new = FakeNameNode(epoch=3, active=False), FakeNameNode(epoch=5)
        old.leader = new.addr
        await old.server.start("127.0.0.1", old.port)
        await new.server.start("127.0.0.1", new.port)
        rpc_port = ports.free_block()
        settings = DataNodeSettings(data_dir=tmp_path, port=ports.free_block(), rpc_port=rpc_port, cluster_secret=SECRET,
                                    namenode=f"{old.addr},{new.addr}", heartbeat_interval_s=0.05)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            hb = app.state.heartbeat
            for _ in range(200):  # registered with the active one, through the standby's redirect
                if hb.node_id is not None and new.beats:
                    break
                await asyncio.sleep(0.02)
            assert hb.node_id == 1 and hb.epoch == 5 and not old.beats
            dn = DataNodeClient(RpcClient("127.0.0.1", rpc_port, SECRET))
            for bid in (11, 12):
                await dn.put(bid, crc32c(b"x" * 100), b"x" * 100)
            stale0 = stale_count()

            # a reply from the deposed leader (epoch 3) ordering a delete, a copy and a scrub: none obeyed
            beat = await new.reply_once(m.HeartbeatOrders(epoch=3, delete=m.DeleteOrder(blocks=[11]),
                                                          copy=[m.CopyOrder(2, "127.0.0.1:1", [12])],
                                                          scrub=m.ScrubOrder(job="j1")))
            assert await dn.has([11, 12]) == [True, True] and beat.deleted == []
            assert app.state.scrubber.job is None
            assert hb.stale_orders == 1 and stale_count() == stale0 + 1 and hb.epoch == 5
            assert "refusing the orders of a deposed NameNode" in caplog.text

            # the same order from the current epoch is obeyed, and the next heartbeat confirms it
            beat = await new.reply_once(m.HeartbeatOrders(epoch=5, delete=m.DeleteOrder(blocks=[11])))
            assert await dn.has([11, 12]) == [False, True] and beat.deleted == [11]

            # a newer epoch raises the bar: epoch 5 is now stale
            new.epoch = 6
            await new.reply_once(m.HeartbeatOrders(epoch=6))
            assert hb.epoch == 6
            await new.reply_once(m.HeartbeatOrders(epoch=5, delete=m.DeleteOrder(blocks=[12])))
            assert await dn.has([12]) == [True] and hb.stale_orders == 2 and stale_count() == stale0 + 2
            await dn.close()

        # restarted, the DataNode still knows epoch 6: the deposed leader's orders are refused from the first beat
        assert (tmp_path / "fencing-epoch").read_text() == "6"
        new.epoch = 5
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            hb = app.state.heartbeat
            assert hb.epoch == 6
            dn = DataNodeClient(RpcClient("127.0.0.1", rpc_port, SECRET))
            await new.reply_once(m.HeartbeatOrders(epoch=5, delete=m.DeleteOrder(blocks=[12])))
            assert await dn.has([12]) == [True] and hb.stale_orders >= 1
            await dn.close()
        await old.server.stop()
        await new.server.stop()
    asyncio.run(asyncio.wait_for(main(), 60))


def test_an_embedded_namenode_epoch_0_is_obeyed(tmp_path):
    async def main():
        nn = FakeNameNode(epoch=0)
        await nn.server.start("127.0.0.1", nn.port)
        rpc_port = ports.free_block()
        app = create_app(DataNodeSettings(data_dir=tmp_path, port=ports.free_block(), rpc_port=rpc_port,
                                          cluster_secret=SECRET, namenode=nn.addr, heartbeat_interval_s=0.05))
        async with app.router.lifespan_context(app):
            dn = DataNodeClient(RpcClient("127.0.0.1", rpc_port, SECRET))
            while app.state.heartbeat.node_id is None:
                await asyncio.sleep(0.02)
            await dn.put(21, crc32c(b"y"), b"y")
            await nn.reply_once(m.HeartbeatOrders(delete=m.DeleteOrder(blocks=[21])))
            assert await dn.has([21]) == [False] and app.state.heartbeat.stale_orders == 0
            await dn.close()
        await nn.server.stop()
    asyncio.run(asyncio.wait_for(main(), 60))
