"""NameNode HA failover (issue 16): the active NameNode killed -9 under a write load of 16 concurrent clients, or
deposed (its lease revoked in etcd; or frozen by SIGSTOP past its lease): another takes over, nothing acknowledged
is lost, the deposed one rolls back what etcd never confirmed and rejoins as a standby with a store equal key by key.
Real etcd (three members), three real NameNode processes; the writers follow the leader themselves (NotLeader names
it)."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cluster import SECRET  # noqa: E402
from ha import Etcd, HaNameNodes  # noqa: E402

from epochfs.common import errors  # noqa: E402
from epochfs.common import messages as m  # noqa: E402
from epochfs.common.clients import NameNodeClient  # noqa: E402
from epochfs.common.rpc import RpcClient  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd binary")]

OBJ = m.ObjectRecord(size=0, etag='"d41d8cd98f00b204e9800998ecf8427e"', owner="alice")


@pytest.fixture
def ha(tmp_path):
    etcd = Etcd(tmp_path, n=3).start()
    nns = HaNameNodes(tmp_path, etcd).start()
    yield nns
    nns.close()
    etcd.close()


class Load:
    """16 writers in a thread of their own, each putting its own keys through whichever NameNode is active; records
    what was acknowledged and when each acknowledgement came."""

    def __init__(self, nns: HaNameNodes, bucket: str, writers: int = 16) -> None:
        self.nns, self.bucket, self.writers = nns, bucket, writers
        self.acked: dict[str, tuple[float, int]] = {}  # key -> (when, which NameNode acknowledged it)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run(nns.active())))

    async def _run(self, first: int) -> None:
        addrs = {self.nns.addr(i): i for i in self.nns.ports}
        clients = {i: NameNodeClient(RpcClient("127.0.0.1", self.nns.ports[i][1], SECRET, timeout=3.0,
                                               connect_timeout=1.0), follow=False) for i in self.nns.ports}
        # (pinned: an acknowledgement through clients[i] is NameNode i's, which the outage figure relies on)
        cur = [first]

        async def writer(w: int) -> None:
            n = 0
            while not self.stop.is_set():
                key = f"w{w:02d}-{n:06d}"
                i = cur[0]
                try:
                    await clients[i].put_object(self.bucket, key, OBJ)
                    self.acked[key] = (time.monotonic(), i)
                    n += 1
                except errors.NotLeader as e:
                    cur[0] = addrs.get(e.details.get("leader", ""), i % len(addrs) + 1)
                    await asyncio.sleep(0.05)
                except errors.Unavailable:
                    if cur[0] == i:
                        cur[0] = i % len(addrs) + 1
                    await asyncio.sleep(0.05)
                    n += 1  # the key may or may not have been applied: never reuse it

        await asyncio.gather(*(writer(w) for w in range(self.writers)))
        for c in clients.values():
            await c.close()

    def __enter__(self) -> "Load":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)

    def wait_acks(self, n: int, timeout: float = 30.0) -> None:
        self.nns.wait(lambda: len(self.acked) >= n, timeout, f"{n} acknowledged writes")


def present(nns: HaNameNodes, i: int, bucket: str, keys) -> list[str]:
    """The keys of `keys` that NameNode i does not have."""
    async def go(c):
        missing = []
        for k in keys:
            try:
                await c.stat(bucket, k)
            except errors.NoSuchKey:
                missing.append(k)
        return missing
    return nns.call(i, go, timeout=30)


def settle_equal(nns: HaNameNodes, a: int) -> None:
    nns.caught_up(timeout=40)
    want = nns.dump(a)
    for i in nns.procs:
        assert nns.dump(i) == want, f"nn{i}'s store differs from the active nn{a}'s"


def test_kill_9_of_the_active_loses_nothing_acknowledged(ha):
    a = ha.active()
    ha.call(a, lambda c: c.bucket_create("load", owner="alice"))
    outages = []
    with Load(ha, "load") as load:
        for _ in range(int(os.environ.get("EPOCHFS_HA_KILLS", "2"))):
            a = ha.active()
            load.wait_acks(len(load.acked) + 200)
            killed_at = time.monotonic()
            ha.kill(a)
            b = ha.active(timeout=30, among=[i for i in ha.ports if i != a and i in ha.procs])
            load.wait_acks(len(load.acked) + 100)
            outages.append(min(t for t, i in load.acked.values() if t > killed_at and i != a) - killed_at)
            ha.start(a)  # back as a standby
        acked = dict(load.acked)
    b = ha.active()
    assert present(ha, b, "load", sorted(acked)) == []
    settle_equal(ha, b)
    print(f"unavailability after kill -9 of the active NameNode (TTL {ha.ttl} s), kill to the first write a new "
          f"leader acknowledged: {', '.join(f'{o:.2f}' for o in outages)} s")
    assert max(outages) < 10


def lease_of_leader(ha: HaNameNodes) -> str:
    out = ha.etcd.ctl("get", f"{ha.prefix}/leader", "-w", "json").stdout
    return format(json.loads(out)["kvs"][0]["lease"], "x")


def test_a_leader_whose_lease_is_revoked_stops_rolls_back_and_rejoins_as_standby(ha):
    a = ha.active()
    ha.call(a, lambda c: c.bucket_create("load", owner="alice"))
    with Load(ha, "load") as load:
        load.wait_acks(300)
        ha.etcd.ctl("lease", "revoke", lease_of_leader(ha))
        b = ha.active(timeout=30, among=[i for i in ha.ports if i != a])
        load.wait_acks(len(load.acked) + 200)
        acked = dict(load.acked)
    assert b != a
    ha.wait(lambda: ha.status(a).role == "standby", 20, f"nn{a} standby")
    assert present(ha, b, "load", sorted(acked)) == []
    settle_equal(ha, b)
    logtext = (ha.root / "logs" / f"nn{a}.log").read_text()
    assert "deposed" in logtext and "unconfirmed commands; standby at seq" in logtext


def test_a_leader_frozen_past_its_lease_acknowledges_nothing_after_and_rejoins(ha):
    a = ha.active()
    ha.call(a, lambda c: c.bucket_create("load", owner="alice"))
    with Load(ha, "load") as load:
        load.wait_acks(300)
        ha.signal(a, signal.SIGSTOP)
        b = ha.active(timeout=30, among=[i for i in ha.ports if i != a])
        load.wait_acks(len(load.acked) + 200)
        ha.signal(a, signal.SIGCONT)  # it wakes up believing it leads, with commands in flight
        ha.wait(lambda: ha.status(a).role == "standby", 20, f"nn{a} standby")
        with pytest.raises(errors.NotLeader):
            ha.call(a, lambda c: c.put_object("load", "from-the-old-leader", OBJ))
        load.wait_acks(len(load.acked) + 100)
        acked = dict(load.acked)
    assert present(ha, b, "load", sorted(acked)) == []
    settle_equal(ha, b)
    assert present(ha, b, "load", ["from-the-old-leader"]) == ["from-the-old-leader"]


def test_a_client_of_all_namenodes_moves_on_from_a_stopped_active_one_within_seconds(ha):
    """The gateway's and the DataNodes' client (given every NameNode, the RPC timeout 30 s, retrying 10 s): the
    active NameNode stopped (SIGSTOP: its kernel keeps the connections, so no liveness probe fails them) for 15 s
    under 8 writers. Its calls under way are given up once another NameNode is active (NameNodeClient._watch) and
    sent again there: writes go on within seconds, where they waited for as long as it stayed stopped; nothing
    acknowledged is lost, and it rejoins as a standby."""
    a = ha.active()
    ha.call(a, lambda c: c.bucket_create("load", owner="alice"))
    acked: dict[str, float] = {}
    stop = threading.Event()

    async def run() -> None:
        c = NameNodeClient.connect(",".join(ha.addr(i) for i in ha.ports), SECRET, timeout=30.0, retry_s=10.0)

        async def writer(w: int) -> None:
            n = 0
            while not stop.is_set():
                key = f"w{w}-{n:06d}"
                n += 1
                try:
                    await c.put_object("load", key, OBJ)
                    acked[key] = time.monotonic()
                except errors.Unavailable:
                    await asyncio.sleep(0.05)
        await asyncio.gather(*(writer(w) for w in range(8)))
        await c.close()

    t = threading.Thread(target=lambda: asyncio.run(run()))
    t.start()
    try:
        ha.wait(lambda: len(acked) >= 300, 30, "300 acknowledged writes")
        stopped_at = time.monotonic()
        ha.signal(a, signal.SIGSTOP)
        try:
            ha.wait(lambda: any(w > stopped_at for w in list(acked.values())), 30, "a write acknowledged again")
            resumed = min(w for w in list(acked.values()) if w > stopped_at) - stopped_at
            ha.wait(lambda: time.monotonic() - stopped_at > 15, 30, "15 s")
        finally:
            ha.signal(a, signal.SIGCONT)
        ha.wait(lambda: ha.status(a).role == "standby", 20, f"nn{a} standby")
        n = len(acked)
        ha.wait(lambda: len(acked) >= n + 100, 30, "writes after it rejoined")
    finally:
        stop.set()
        t.join(60)
    b = ha.active()
    assert b != a
    assert present(ha, b, "load", sorted(acked)) == []
    print(f"writes acknowledged again {resumed:.2f} s after the active NameNode was stopped (TTL {ha.ttl} s)")
    assert resumed < 10, resumed  # (before: 15 s and more, the whole stop)


def test_a_campaign_committed_without_an_answer_still_makes_its_namenode_lead(tmp_path):
    """etcd committed a NameNode's leader key (its campaign, under its lease) but the answer never came (the call
    timed out): seen later, by a read or the watch, the key is its own and it leads. It followed the key as another's
    (itself), and with its lease kept alive the key stayed: no NameNode was ever active again. Here the key becomes
    the NameNode's while it follows another, by a put with its value and lease, as that create would have left it."""
    etcd = Etcd(tmp_path).start()
    nns = HaNameNodes(tmp_path, etcd, n=1)
    k_leader = f"{nns.prefix}/leader".encode()

    async def other_leads(cl):
        lease = await cl.grant(60)
        await cl.put(k_leader, json.dumps({"name": "other", "addr": "127.0.0.1:1", "http": "127.0.0.1:2"}).encode(),
                     lease)
    try:
        etcd.call(other_leads)
        nns.start(1)
        nns.wait(lambda: nns.status(1).leader == "127.0.0.1:1", 10, "nn1 following the other")
        rec = nns.wait(lambda: etcd.call(lambda cl: cl.get(f"{nns.prefix}/members/nn1".encode())), 10,
                       "nn1's member record")
        d = json.loads(rec.value)
        me = json.dumps({"name": d["name"], "addr": d["addr"], "http": d["http"]}).encode()
        etcd.call(lambda cl: cl.put(k_leader, me, rec.lease))
        assert nns.active(timeout=10, among=[1]) == 1
        nns.call(1, lambda c: c.bucket_create("ours", owner="alice"))
        assert nns.call(1, lambda c: c.put_object("ours", "k", OBJ)) is not None
    finally:
        nns.close()
        etcd.close()
