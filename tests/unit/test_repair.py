"""Repair planning (pure), the replica-set updates in the metadata, the NameNode's order book, and the scrubber."""
import anyio

from epochfs.common.blocks import block_id, block_nodes, crc32c
from epochfs.common.kv import MemoryKV
from epochfs.datanode import keys as dnkeys
from epochfs.datanode.blockstore import BlockStore
from epochfs.datanode.scrubber import MIN_BLOCK_COST, Scrubber
from epochfs.namenode import keys
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.placement import ClusterView, NodeView, Repair, plan_repairs, repair_source
from epochfs.namenode.repair import RepairWorker


def view(*nodes):
    return ClusterView(tuple(NodeView(i, alive, free) for i, alive, free in nodes))


FOUR_ONE_DEAD = view((1, True, 10**12), (2, True, 10**12), (3, False, 10**12), (4, True, 10**12))


# ---------------------------------------------------------------- planning (pure)
def test_dead_holder_is_replaced_by_the_node_without_a_copy():
    assert plan_repairs(FOUR_ONE_DEAD, 7, [1, 3, 2]) == [Repair(7, 1, 4, 3)]


def test_nothing_to_do_when_every_holder_lives():
    assert plan_repairs(FOUR_ONE_DEAD, 7, [1, 2, 4]) == []


def test_never_a_holder_dead_or_full_target():
    v = view((1, True, 10**12), (2, False, 10**12), (3, True, 10**12), (4, True, 0), (5, False, 10**12),
             (6, True, 10**12), (7, True, 10**12))
    for bid in range(200):
        (r,) = plan_repairs(v, bid, [1, 2, 3])
        assert r.target in (6, 7) and r.replaces == 2 and r.source in (1, 3)


def test_targets_spread_over_the_survivors():
    v = view(*[(i, i != 1, 10**12) for i in range(1, 9)])
    targets = {plan_repairs(v, bid, [1, 2, 3])[0].target for bid in range(100)}
    assert targets == {4, 5, 6, 7, 8}


def test_two_dead_holders_get_distinct_targets():
    v = view((1, True, 1), (2, False, 1), (3, False, 1), (4, True, 1), (5, True, 1))
    rs = plan_repairs(v, 11, [1, 2, 3])
    assert {r.replaces for r in rs} == {2, 3} and {r.target for r in rs} == {4, 5} and {r.source for r in rs} == {1}


def test_lost_block_or_no_room_plans_nothing():
    assert plan_repairs(view((1, False, 1), (2, True, 1)), 1, [1]) == []
    assert plan_repairs(view((1, True, 1), (2, False, 1), (3, True, 1)), 1, [1, 2, 3]) == []


def test_further_attempts_rotate_the_source():
    assert [plan_repairs(FOUR_ONE_DEAD, 7, [1, 3, 2], a)[0].source for a in range(3)] == [1, 2, 1]


def test_repair_source_prefers_the_replica_just_read():
    assert repair_source(FOUR_ONE_DEAD, [1, 2, 4], bad=1, good=4) == 4
    assert repair_source(FOUR_ONE_DEAD, [1, 2, 4], bad=1, good=3) == 2  # 3 is dead and no holder
    assert repair_source(FOUR_ONE_DEAD, [1, 3], bad=1) is None


# ---------------------------------------------------------------- metadata
def store_with_blocks():
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.put_object("b", "x", {"size": 2, "etag": '"e"', "blk": [[10, 1, 0, [1, 2, 3]], [11, 1, 0, [2, 3, 4]]]})
    up = m.create_upload("b", "y", {})
    m.put_part("b", "y", up, 1, {"size": 1, "etag": '"e"', "blk": [[12, 1, 0, [3, 1, 2]]]})
    return m


def test_scan_block_lists_pages_over_files_and_parts():
    m = store_with_blocks()
    first, nxt = m.scan_block_lists(b"", limit=1)
    assert [block_id(b) for _, blks in first for b in blks] == [10, 11] and nxt is not None
    rest, end = m.scan_block_lists(nxt, limit=10)
    assert [block_id(b) for _, blks in rest for b in blks] == [12] and end is None


def test_replace_replicas_in_one_batch_and_garbage_for_the_dead_copy():
    m = store_with_blocks()
    key, _ = m.find_block(10)
    assert m.replace_replicas([(10, 3, 5, key), (11, 3, 1, None), (12, 3, 4, None)]) == [True, True, True]
    blk = m.stat("b", "x")["blk"]
    assert block_nodes(blk[0]) == [1, 2, 5] and block_nodes(blk[1]) == [2, 1, 4]
    assert block_nodes(m.find_block(12)[1]) == [4, 1, 2]
    assert m.garbage_for(3) == [10, 11, 12]


def test_replace_replicas_of_a_deleted_block_makes_the_new_copy_garbage():
    m = store_with_blocks()
    assert m.replace_replicas([(99, 3, 5, None)]) == [False]
    assert m.garbage_for(5) == [99] and m.garbage_for(3) == []


# ---------------------------------------------------------------- the order book
def cluster_meta(dead: int | None = 3):
    m = store_with_blocks()
    members = Membership(m, timeout_s=10.0)
    for i in range(1, 6):
        members.register(f"u{i}", "127.0.0.1", 9000 + i, 0, 10**12, 0)
    members.started -= 100  # settled
    if dead is not None:
        members.nodes[dead].last_seen -= 100
    return m, members


def test_worker_orders_copies_through_heartbeats_and_updates_metadata():
    m, members = cluster_meta(dead=3)
    w = RepairWorker(m, members, max_inflight=16)
    stats = anyio.run(w.run_once)
    assert stats.ok == 3 and w.under_replicated == 3 and w.status()["dead_nodes"] == [3]
    assert anyio.run(w.run_once).ok == 0  # nothing planned twice
    orders = {n: w.on_heartbeat(n, [], []) for n in (1, 2)}
    sent = [(n, bid, t) for n, os in orders.items() for t, _, bids in os for bid in bids]
    assert len(sent) == 3 and all(t not in (3, n) for n, _, t in sent)
    for n, bid, t in sent:
        w.on_heartbeat(n, [[bid, t]], [])
    assert w.status()["repairs_in_flight"] == 0 and w.totals["repaired"] == 3
    for b in (10, 11, 12):
        nodes = block_nodes(m.find_block(b)[1])
        assert 3 not in nodes and len(set(nodes)) == 3
    anyio.run(w.run_once)
    assert w.under_replicated == 0


def test_worker_respects_the_inflight_limit_and_retries_failures():
    m, members = cluster_meta(dead=3)
    w = RepairWorker(m, members, max_inflight=1)
    assert anyio.run(w.run_once).ok == 1
    assert anyio.run(w.run_once).ok == 0
    (o,) = w.orders.values()
    w.on_heartbeat(o.source, [], [[o.block_id, o.target, "Unavailable"]])  # the freed slot goes to the next block
    assert w.attempts[o.block_id] == 1 and o.block_id not in w._by_block and len(w.orders) == 1
    assert w.retry_at[o.block_id] > 0 and w.status()["waiting"] == {}  # counted as waiting by the next sweep


def test_no_repair_before_the_namenode_settled():
    m, members = cluster_meta(dead=3)
    members.started += 100
    w = RepairWorker(m, members)
    assert anyio.run(w.run_once).ok == 0 and not w.orders


def test_read_repair_order_goes_to_the_bad_holder():
    m, members = cluster_meta(dead=None)
    w = RepairWorker(m, members)
    assert w.report_bad(10, node=1, good=3)
    assert w.on_heartbeat(3, [], []) == [[1, "127.0.0.1:9001", [10]]]
    assert not w.report_bad(10, node=5)  # not a holder
    w.on_heartbeat(3, [[10, 1]], [])
    assert block_nodes(m.find_block(10)[1]) == [1, 2, 3] and w.totals["read_repairs"] == 1


# ---------------------------------------------------------------- scrubber
def test_scrubber_finds_a_flipped_byte_notes_it_for_the_heartbeat_and_goes_on():
    s = BlockStore(MemoryKV(), chunk_size=1024)
    for bid in (1, 2, 3):
        data = bytes([bid]) * 3000
        s.put(bid, data, crc32c(data))
    raw = bytearray(s.kv.get(dnkeys.chunk(2, 1)))
    raw[100] ^= 1
    s.kv.put(dnkeys.chunk(2, 1), bytes(raw))
    sc = Scrubber(s, bytes_per_s=4 * MIN_BLOCK_COST, interval_s=1.0)  # small blocks count MIN_BLOCK_COST
    anyio.run(sc.run_once)  # the three blocks (3 x MIN_BLOCK_COST) in one pass
    assert sc.totals["corrupt"] == 1 and s.bad == {2}  # for the heartbeat to report (datanode/heartbeat.py)
    assert sc.totals["blocks"] == 3 and sc.totals["sweeps"] == 1  # went on past the bad block


def test_a_copy_confirmed_after_its_order_expired_is_garbage_unless_held():
    m, members = cluster_meta(dead=3)
    w = RepairWorker(m, members, order_timeout_s=5.0)
    anyio.run(w.run_once)
    o = w.orders[(10, 4)] if (10, 4) in w.orders else w.orders[(10, 5)]
    w._expire(o.batch.issued + 10)
    assert not w.orders and w.totals["expired"] == 3
    w.on_heartbeat(o.source, [[10, o.target], [10, 2]], [])
    assert m.garbage_for(o.target) == [10] and m.garbage_for(2) == []  # node 2 holds block 10: kept


# ---------------------------------------------------------------- write policy, draining, top-up, block reports
def test_write_policy_parses_async_and_sync_n():
    import pytest

    from epochfs.common import errors, write_policy
    assert write_policy.parse("async") == 1 and write_policy.parse("sync:2") == 2
    for bad in ("sync:0", "sync:17", "sync", "fast", ""):
        with pytest.raises(errors.InvalidInput):
            write_policy.parse(bad)


def test_draining_nodes_get_no_blocks_and_are_replaced_from_other_holders():
    from epochfs.namenode.placement import choose_targets
    v = ClusterView((NodeView(1, True, 10**12, draining=True), NodeView(2, True, 10**12),
                     NodeView(3, True, 10**12), NodeView(4, True, 10**12)))
    assert all(1 not in choose_targets(v, s, 0, 3) for s in range(50))
    (r,) = plan_repairs(v, 7, [1, 2, 3])
    assert r == Repair(7, 2, 4, 1) and not r.grow
    assert plan_repairs(v, 7, [1], 0)[0].source == 1  # the draining node is the only copy: it is the source


def test_short_block_grows_to_the_wanted_count():
    rs = plan_repairs(FOUR_ONE_DEAD, 7, [1, 2], wanted=3)
    assert [(r.target, r.replaces, r.grow) for r in rs] == [(4, None, True)]
    m = store_with_blocks()
    assert m.replace_replicas([(10, None, 5, None)]) == [True]
    assert block_nodes(m.find_block(10)[1]) == [1, 2, 3, 5]


def test_block_reports_act_on_what_two_reports_agree_on():
    m, members = cluster_meta(dead=None)
    w = RepairWorker(m, members)
    for _ in range(2):
        w.take_report(3, [10, 99])  # 99: no file refers to it; 12: node 3 should hold it but lacks it
        w._reconcile()
    assert m.garbage_for(3) == [99] and w.totals["surplus_deleted"] == 1
    assert (12, 3) in w.orders and w.orders[(12, 3)].replaces is None
    assert w.totals["topped_up"] == 2  # blocks 11 and 12 (node 3 holds both in the metadata)


def test_decommission_finishes_when_no_block_names_the_node():
    m, members = cluster_meta(dead=None)
    w = RepairWorker(m, members)
    job = w.decommission(2)
    assert job["total"] == 3 and members.state(members.nodes[2]) == "decommissioning"
    anyio.run(w.run_once)
    for o in list(w.orders.values()):
        assert o.replaces == 2 and o.target != 2
        w.on_heartbeat(o.source, [[o.block_id, o.target]], [])
    anyio.run(w.run_once)
    (job,) = [j for j in w.jobs_list() if j["kind"] == "decommission"]
    assert job["state"] == "done" and job["done"] == job["total"] == 3 and job["progress"] == 1.0
    assert members.state(members.nodes[2]) == "decommissioned" and sorted(m.garbage_for(2)) == [10, 11, 12]
