"""NameNodeClient over several NameNodes (HA): real RpcServers on loopback play the standbys (they answer NotLeader)
and the active one; the client finds the active one, follows redirects and failovers, and gives up with the last
error once its retry time is over."""
from __future__ import annotations

import asyncio
import time

import pytest

from epochfs.common import errors, ports
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient, parse_addrs
from epochfs.common.metrics import NN_LEADER_CHANGES, NN_REDIRECTS
from epochfs.common.rpc import RpcClient, RpcServer

SECRET = "s3cret"


class FakeNameNode:
    """An RpcServer answering bucket_list and ha_status: as the active NameNode (its own bucket name, so the test
    sees who answered) or as a standby (NotLeader naming `leader`). `calls` counts the requests it got."""

    def __init__(self, name: str, *, port: int | None = None, ha: bool = True) -> None:
        self.name, self.port = name, port or ports.free_block()
        self.addr = f"127.0.0.1:{self.port}"
        self.active = False
        self.leader = ""  # what a standby answers in NotLeader
        self.calls = 0
        handlers = {m.BucketList: self._bucket_list}
        if ha:
            handlers[m.HaStatus] = self._ha_status
        self.server = RpcServer(handlers, SECRET)

    async def _bucket_list(self, req, payload):
        self.calls += 1
        if not self.active:
            raise errors.NotLeader(f"{self.name} is a standby", leader=self.leader)
        return m.Buckets(buckets=[m.BucketRecord(name=self.name, owner="o")])

    async def _ha_status(self, req, payload):
        return m.HaState(mode="etcd", name=self.name, role="active" if self.active else "standby", epoch=7,
                         leader=self.leader, members=[m.HaMember(name=self.name, addr=self.addr, applied=3)])

    async def start(self) -> "FakeNameNode":
        await self.server.start("127.0.0.1", self.port)
        return self

    async def stop(self) -> None:
        await self.server.stop()


async def answered_by(client: NameNodeClient) -> str:
    return (await client.bucket_list())[0].name


def run(coro):
    asyncio.run(asyncio.wait_for(coro, 60))


def test_parse_addrs():
    assert parse_addrs("a:1") == ["a:1"]
    assert parse_addrs(" a:1, b:2,,a:1 ,c:3") == ["a:1", "b:2", "c:3"]
    with pytest.raises(ValueError):
        parse_addrs(" , ")


def test_one_address_works_as_before():
    async def main():
        nn = await FakeNameNode("solo").start()
        nn.active = True
        c = NameNodeClient.connect(nn.addr, SECRET)
        try:
            assert await answered_by(c) == "solo" and c.address == nn.addr and c.leader_changes == 0
        finally:
            await c.close()
            await nn.stop()
    run(main())


def test_finds_the_active_one_through_redirects_and_stays_there():
    async def main():
        nns = [await FakeNameNode(f"nn{i}").start() for i in range(3)]
        nns[2].active = True
        for n in nns[:2]:
            n.leader = nns[2].addr
        c = NameNodeClient.connect(",".join(n.addr for n in nns), SECRET)
        redirects0 = NN_REDIRECTS._value.get()
        try:
            assert await answered_by(c) == "nn2"
            # the first standby named the leader: one redirect, straight there (the second standby never asked)
            assert (nns[0].calls, nns[1].calls, nns[2].calls) == (1, 0, 1)
            assert c.redirects == 1 and c.leader_changes == 1 and c.address == nns[2].addr
            assert NN_REDIRECTS._value.get() == redirects0 + 1
            for _ in range(5):
                assert await answered_by(c) == "nn2"
            assert (nns[0].calls, nns[1].calls, nns[2].calls) == (1, 0, 6)  # the active one is kept
        finally:
            await c.close()
            for n in nns:
                await n.stop()
    run(main())


def test_a_standby_that_knows_no_leader_sends_the_call_to_the_next_address():
    async def main():
        nns = [await FakeNameNode(f"nn{i}").start() for i in range(3)]
        nns[1].active = True  # nn0 knows no leader (an election under way): the client tries nn1
        c = NameNodeClient.connect(",".join(n.addr for n in nns), SECRET)
        try:
            assert await answered_by(c) == "nn1" and nns[2].calls == 0
        finally:
            await c.close()
            for n in nns:
                await n.stop()
    run(main())


def test_follows_a_failover_and_skips_an_address_out_of_reach():
    async def main():
        dead = ports.free_block()  # nothing listens there
        nns = [await FakeNameNode(f"nn{i}").start() for i in range(2)]
        nns[0].active = True
        nns[1].leader = nns[0].addr
        c = NameNodeClient.connect(f"127.0.0.1:{dead},{nns[0].addr},{nns[1].addr}", SECRET, retry_s=10)
        moves0 = NN_LEADER_CHANGES._value.get()
        try:
            assert await answered_by(c) == "nn0"  # the first address refused the connection: the next one
            assert c.leader_changes == 1 and NN_LEADER_CHANGES._value.get() == moves0 + 1
            # failover: nn0 is killed; for a while nobody is active, then nn1 wins
            await nns[0].stop()
            nns[1].leader = ""

            async def elect():
                await asyncio.sleep(0.5)
                nns[1].active = True
            t0 = time.monotonic()
            _, name = await asyncio.gather(elect(), answered_by(c))
            assert name == "nn1" and c.address == nns[1].addr
            assert 0.5 <= time.monotonic() - t0 < 3.0  # retried with backoff (<= 1 s) until the election
        finally:
            await c.close()
            await nns[1].stop()
    run(main())


def test_learns_a_leader_address_it_was_not_given():
    async def main():
        standby, active = await FakeNameNode("sb").start(), await FakeNameNode("act").start()
        active.active = True
        standby.leader = active.addr
        c = NameNodeClient.connect(standby.addr, SECRET)  # only the standby configured
        try:
            assert await answered_by(c) == "act" and set(c.addresses) == {standby.addr, active.addr}
        finally:
            await c.close()
            await standby.stop()
            await active.stop()
    run(main())


def test_a_pinned_client_reports_not_leader_instead_of_following():
    async def main():
        standby, active = await FakeNameNode("sb").start(), await FakeNameNode("act").start()
        active.active = True
        standby.leader = active.addr
        c = NameNodeClient(RpcClient("127.0.0.1", standby.port, SECRET), retry_s=1.0, follow=False)
        try:
            with pytest.raises(errors.NotLeader) as e:
                await c.bucket_list()
            assert e.value.details["leader"] == active.addr and c.addresses == [standby.addr]
            assert active.calls == 0
        finally:
            await c.close()
            await standby.stop()
            await active.stop()
    run(main())


def test_gives_up_after_retry_s_with_the_last_error():
    async def main():
        nns = [await FakeNameNode(f"nn{i}").start() for i in range(3)]  # all standbys, no leader
        c = NameNodeClient.connect(",".join(n.addr for n in nns), SECRET, retry_s=1.0)
        try:
            t0 = time.monotonic()
            with pytest.raises(errors.NotLeader):
                await c.bucket_list()
            took = time.monotonic() - t0
            assert 0.6 <= took < 2.0, took
            assert all(n.calls >= 2 for n in nns)  # several rounds over every address
            # retry_s 0: every address once, no waiting
            c.retry_s = 0
            before = [n.calls for n in nns]
            t0 = time.monotonic()
            with pytest.raises(errors.NotLeader):
                await c.bucket_list()
            assert time.monotonic() - t0 < 0.5 and [n.calls - b for n, b in zip(nns, before)] == [1, 1, 1]
        finally:
            await c.close()
            for n in nns:
                await n.stop()
        # none reachable at all: Unavailable (not NotLeader) after retry_s
        c = NameNodeClient.connect(f"127.0.0.1:{ports.free_block()},127.0.0.1:{ports.free_block()}", SECRET, retry_s=0.3)
        with pytest.raises(errors.Unavailable) as e:
            await c.bucket_list()
        assert not isinstance(e.value, errors.NotLeader)
        await c.close()
    run(main())


def test_ha_status_from_each_namenode_and_embedded_when_unknown():
    async def main():
        act, old = await FakeNameNode("act").start(), await FakeNameNode("old", ha=False).start()
        act.active = True
        c = NameNodeClient.connect(f"{act.addr},{old.addr}", SECRET)
        try:
            st = await c.ha_status()
            assert st.mode == "etcd" and st.role == "active" and st.epoch == 7 and st.members[0].applied == 3
            st = await c.ha_status(old.addr)  # a NameNode without the op: the embedded one it is
            assert st.mode == "embedded" and st.role == "embedded" and st.members[0].addr == old.addr
        finally:
            await c.close()
            await act.stop()
            await old.stop()
    run(main())


def test_concurrent_calls_move_once():
    """16 calls at once find the first address dead and a standby second: each moves on, but the client's address
    moves to the leader once per step, not once per call (no calls bouncing it round the list)."""
    async def main():
        nns = [await FakeNameNode(f"nn{i}").start() for i in range(3)]
        nns[2].active = True
        nns[1].leader = nns[2].addr
        c = NameNodeClient.connect(f"127.0.0.1:{ports.free_block()},{nns[0].addr},{nns[1].addr},{nns[2].addr}", SECRET,
                                   retry_s=5)
        nns[0].leader = nns[2].addr
        try:
            names = await asyncio.gather(*(answered_by(c) for _ in range(16)))
            assert names == ["nn2"] * 16 and c.address == nns[2].addr
            assert c.leader_changes == 2, c.leader_changes  # dead -> nn0 (a standby) -> nn2
            assert nns[1].calls == 0
        finally:
            await c.close()
            for n in nns:
                await n.stop()
    run(main())
