"""Issue 18 (hardening), repair: failed copies back off and are counted as waiting (with why), targets without room
get no copies, the under-replicated and lost counts are live, and small blocks travel many to a copy order."""
import logging

import anyio

from epochfs.common.kv import MemoryKV
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.repair import RepairWorker

KiB, MiB = 1 << 10, 1 << 20


def cluster(blocks: list[tuple[int, list[int]]], *, nodes: int = 5, dead: int = 3, full: tuple[int, ...] = (),
            size: int = 110 * KiB):
    """A metastore with one file per block ([id, holders]) and `nodes` registered DataNodes, `dead` silent and
    `full` ones with almost no free space."""
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    for bid, holders in blocks:
        m.put_object("b", f"k{bid}", {"size": size, "etag": '"e"', "blk": [[bid, size, 0, holders]]})
    members = Membership(m, timeout_s=10.0)
    for i in range(1, nodes + 1):
        members.register(f"u{i}", "127.0.0.1", 9000 + i, 0, 10**12, 10**12 - 1000 if i in full else 0)
    members.started -= 100  # settled
    members.nodes[dead].last_seen -= 100
    return m, members


def deliver(w: RepairWorker, sources=(1, 2, 4, 5)) -> dict[int, list]:
    """Each live node's heartbeat: the copy orders it is handed ([target, address, [block, ...]])."""
    return {n: w.on_heartbeat(n, [], []) for n in sources}


def test_a_refused_copy_backs_off_is_logged_and_counted_as_waiting_for_space(caplog):
    m, members = cluster([(10, [1, 2, 3]), (11, [2, 1, 3]), (12, [1, 3, 2])])
    w = RepairWorker(m, members, reserve_bytes=MiB)
    assert anyio.run(w.run_once).ok == 3
    orders = deliver(w)
    caplog.set_level(logging.WARNING, logger="epochfs.namenode.repair")
    for src, out in orders.items():
        failed = [[bid, target, "NodeFull"] for target, _, bids in out for bid in bids]
        w.on_heartbeat(src, [], failed)
    for _ in range(5):  # the next passes order nothing: the blocks wait for their retry time
        assert anyio.run(w.run_once).ok == 0
    st = w.status()
    assert not w.orders and st["waiting"] == {"no_space": 3} and st["under_replicated"] == 3
    assert any("no space" in r.getMessage() for r in caplog.records)
    for bid in (10, 11, 12):  # once the retry time has come, they are ordered again
        w.retry_at[bid] = 0.0
    assert anyio.run(w.run_once).ok == 3


def test_no_copy_is_ordered_to_a_node_without_room():
    m, members = cluster([(10, [1, 2, 3]), (11, [2, 1, 3])], full=(4, 5))
    w = RepairWorker(m, members, reserve_bytes=MiB)
    assert anyio.run(w.run_once).ok == 0 and not w.orders
    st = w.status()
    assert st["under_replicated"] == 2 and st["waiting"] == {"no_space": 2}


def test_counts_are_live_while_the_inflight_bound_is_reached():
    """One copy order at a time (of one block each): the sweep still counts every block of the dead node at once,
    and the block whose only holder is the dead node is lost, not 0 until the copies are done."""
    blocks = [(bid, [1, 2, 3]) for bid in range(100, 150)] + [(7, [3])]
    m, members = cluster(blocks)
    w = RepairWorker(m, members, max_inflight=1, batch_bytes=1)
    anyio.run(w.run_once)
    st = w.status()
    assert st["under_replicated"] == 51 and st["lost"] == 1 and st["repairs_in_flight"] == 1
    (src, out), = [(n, o) for n, o in deliver(w).items() if o]
    (target, _, bids), = out
    w.on_heartbeat(src, [[bids[0], target]], [])
    assert w.status()["under_replicated"] == 50  # a confirmed copy counts at once


def test_small_blocks_travel_many_to_a_copy_order_and_large_ones_few():
    small = [(bid, [1, 2, 3]) for bid in range(100, 300)]
    m, members = cluster(small, size=110 * KiB)
    w = RepairWorker(m, members, max_inflight=4, batch_bytes=8 * MiB)
    anyio.run(w.run_once)
    out = [o for os in deliver(w).values() for o in os]
    assert sum(len(bids) for _, _, bids in out) == 200 and len(out) <= 4
    assert all(len(bids) <= 8 * MiB // (110 * KiB) for _, _, bids in out)

    large = [(bid, [1, 2, 3]) for bid in range(100, 120)]
    m, members = cluster(large, size=4 * MiB)
    w = RepairWorker(m, members, max_inflight=4, batch_bytes=8 * MiB)
    anyio.run(w.run_once)
    out = [o for os in deliver(w).values() for o in os]
    assert len(out) == 4 and all(1 <= len(bids) <= 2 for _, _, bids in out)  # 8 MiB per order


def test_copies_ordered_to_a_node_count_against_its_room():
    m, members = cluster([(bid, [1, 2, 3]) for bid in range(1000, 1300)])
    room = 12 * MiB  # above the reserve: 111 blocks of 110 KiB
    members.nodes[4].used = members.nodes[4].capacity - (MiB + room)
    w = RepairWorker(m, members, reserve_bytes=MiB, max_inflight=64)
    anyio.run(w.run_once)
    to = [o.target for o in w.orders.values()]
    assert len(to) == 300 and 0 < to.count(4) <= room // (110 * KiB) + 1  # not ~150, half of them
