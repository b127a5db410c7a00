"""namenode/ha/etcd_journal.py's campaign: the leader key is only ever created under the lease the NameNode holds."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from epochfs.namenode.config import NameNodeSettings
from epochfs.namenode.ha.etcd_journal import EtcdJournal


class FakeEtcd:
    """No leader key; records the creates."""

    def __init__(self) -> None:
        self.creates: list[int] = []

    async def get(self, key):
        return None

    async def create(self, key, value, lease=0):
        self.creates.append(lease)
        return True


async def _campaign(lose_lease: bool) -> tuple[list[int], int]:
    meta = SimpleNamespace(seq=0, writable=None, journal=None)
    j = EtcdJournal(meta, NameNodeSettings(etcd_endpoints="http://127.0.0.1:1", cluster_secret="s", name="nn1"))
    j.etcd = FakeEtcd()
    j.lease = 0x10
    led = []

    async def idle():
        await asyncio.Event().wait()

    async def catch_up():
        if lose_lease:  # a call made meanwhile was answered LeaseNotFound (as _lease_lost leaves it)
            j.lease = 0
        return True

    async def lead():
        led.append(j.lease)
        await asyncio.Event().wait()

    j._keepalive, j._publish, j._catch_up_locked, j._lead = idle, idle, catch_up, lead
    task = asyncio.create_task(j.run())
    await asyncio.sleep(0.3)
    task.cancel()
    return j.etcd.creates, len(led)


def test_a_lease_lost_during_the_campaign_creates_no_leader_key():
    """Before: the create went out with lease 0, a leader key that never expires, followed by all for good."""
    creates, led = asyncio.run(_campaign(lose_lease=True))
    assert creates == [] and led == 0


def test_a_campaign_creates_the_key_under_its_lease():
    creates, led = asyncio.run(_campaign(lose_lease=False))
    assert creates == [0x10] and led == 1
