"""What a NameNode's membership tells of DataNodes it never heard from itself (a standby answering stale reads)."""
from __future__ import annotations

from epochfs.common.kv import MemoryKV
from epochfs.namenode import membership as mb
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore


def test_a_standby_gives_the_addresses_of_nodes_registered_after_it_started_without_a_scan_per_call(monkeypatch):
    """Nodes registered after the membership was loaded (through the log, on a standby) are found in the store,
    which is read again only when a node is missing or the copy is STORED_ADDRS_S old, not on every call."""
    m = MetaStore(MemoryKV())
    active = Membership(m, timeout_s=10.0)
    first = active.register("u1", "10.0.0.1", 9001, 0, 10**12, 0).id
    standby = Membership(m, timeout_s=10.0)  # loaded now: knows node `first`
    later = active.register("u2", "10.0.0.2", 9002, 0, 10**12, 0).id
    scans = []
    load = m.load_nodes
    monkeypatch.setattr(m, "load_nodes", lambda: scans.append(1) or load())
    want = {str(first): "10.0.0.1:9001", str(later): "10.0.0.2:9002"}
    assert standby.addrs([first, later]) == want and len(scans) == 1
    for _ in range(5):
        assert standby.addrs([first, later]) == want
    assert len(scans) == 1
    m.save_node(later, {**load()[later], "host": "10.0.0.9"})  # re-registered elsewhere: seen once the copy is old
    monkeypatch.setattr(mb, "STORED_ADDRS_S", 0.0)
    assert standby.addrs([later]) == {str(later): "10.0.0.9:9002"} and len(scans) == 2
    assert standby.addrs([first, 999]) == {str(first): "10.0.0.1:9001"}  # an unknown id: not there, no error
