"""Operator jobs: rebalance planning (pure), the rebalance job through the repair worker's order book, the scrub
job's heartbeat protocol, and the DataNode scrubber's full pass for a job."""
import anyio
import pytest

from epochfs.common import errors
from epochfs.common.blocks import block_nodes, crc32c
from epochfs.common.kv import MemoryKV
from epochfs.datanode import keys as dnkeys
from epochfs.datanode.blockstore import BlockStore
from epochfs.datanode.scrubber import Scrubber
from epochfs.namenode.jobs import OperatorJobs
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.placement import ClusterView, NodeView, rebalance_move
from epochfs.namenode.repair import RepairWorker

ROOM = 10**12


def view(*ids, full=()):
    return ClusterView(tuple(NodeView(i, True, 0 if i in full else ROOM) for i in ids))


# ---------------------------------------------------------------- planning (pure)
def test_move_goes_from_the_fullest_holder_to_the_emptiest_node_without_a_copy():
    load = {1: 300, 2: 300, 3: 300, 4: 0}
    assert rebalance_move(view(1, 2, 3, 4), load, [1, 2, 3], 100, 10) == (3, 4)  # ties: the highest id
    assert rebalance_move(view(1, 2, 3, 4), {1: 300, 2: 200, 3: 250, 4: 0}, [2, 1, 3], 100, 10) == (1, 4)


def test_no_move_when_balanced_full_or_not_narrowing():
    assert rebalance_move(view(1, 2, 3, 4), {1: 100, 2: 100, 3: 100, 4: 95}, [1, 2, 3], 1, 10) is None
    assert rebalance_move(view(1, 2, 3, 4, full=(4,)), {1: 300, 2: 300, 3: 300, 4: 0}, [1, 2, 3], 100, 10) is None
    assert rebalance_move(view(1, 2), {1: 150, 2: 50}, [1], 100, 10) is None  # would just swap the gap
    assert rebalance_move(view(1, 2, 3, 4), {1: 300, 2: 300, 4: 0}, [1, 2, 3], 100, 10) is None  # 3 takes no part


def test_moves_converge_to_within_the_slack():
    load = {1: 0, 2: 0, 3: 0, 4: 0}
    blocks = []
    for b in range(60):
        blocks.append({"size": 10, "nodes": [1, 2, 3]})
        for n in (1, 2, 3):
            load[n] += 10
    for _ in range(3):
        for blk in blocks:
            mv = rebalance_move(view(1, 2, 3, 4), load, blk["nodes"], blk["size"], 15)
            if mv:
                blk["nodes"] = [mv[1] if n == mv[0] else n for n in blk["nodes"]]
                load[mv[0]] -= 10
                load[mv[1]] += 10
    assert all(abs(v - 450) <= 15 for v in load.values()) and all(len(set(b["nodes"])) == 3 for b in blocks)


# ---------------------------------------------------------------- the rebalance job
def cluster(blocks: int = 12, nodes: int = 4):
    m = MetaStore(MemoryKV())
    m.create_bucket("b", "o")
    m.put_object("b", "x", {"size": blocks, "etag": '"e"',
                            "blk": [[100 + i, 1000, 0, [1, 2, 3]] for i in range(blocks)]})
    members = Membership(m, timeout_s=10.0)
    for i in range(1, nodes + 1):
        members.register(f"u{i}", "127.0.0.1", 9000 + i, 0, ROOM, 0)
    members.started -= 100
    return m, members


def confirm_all(repair: RepairWorker) -> None:
    for node in list(repair.members.nodes):
        for target, _, bids in repair.on_heartbeat(node, [], []):
            repair.on_heartbeat(node, [[bid, target] for bid in bids], [])


def per_node(m: MetaStore) -> dict[int, int]:
    out = {}
    for b in m.stat("b", "x")["blk"]:
        assert len(set(block_nodes(b))) == 3  # never under-replicated
        for n in block_nodes(b):
            out[n] = out.get(n, 0) + 1
    return out


def test_rebalance_moves_replicas_onto_a_new_node_copy_first():
    m, members = cluster()
    repair = RepairWorker(m, members, max_inflight=4)
    ops = OperatorJobs(m, members, repair, tolerance=0.05)
    job = ops.start("rebalance")
    assert job["kind"] == "rebalance" and job["state"] == "running" and ops.start("rebalance")["id"] == job["id"]
    for _ in range(20):
        anyio.run(ops.run_once)
        assert len(repair.batches) <= 4  # copy orders, each of up to batch_bytes
        assert per_node(m)[1] + per_node(m)[2] + per_node(m)[3] + per_node(m).get(4, 0) == 36  # moved only once confirmed
        confirm_all(repair)
        if ops.jobs_list()[0]["state"] == "done":
            break
    (job,) = ops.jobs_list()
    assert job["state"] == "done" and job["progress"] == 1.0 and job["done"] == job["total"] == 9
    assert per_node(m) == {1: 9, 2: 9, 3: 9, 4: 9}
    assert sum(len(m.garbage_for(n)) for n in (1, 2, 3)) == 9  # the old copies are deleted


def test_rebalance_of_a_balanced_cluster_is_done_at_once_and_waits_for_repairs():
    m, members = cluster(nodes=3)
    repair = RepairWorker(m, members)
    ops = OperatorJobs(m, members, repair)
    ops.start("rebalance")
    anyio.run(ops.run_once)
    assert ops.jobs_list()[0]["state"] == "done" and not repair.orders
    m2, members2 = cluster()
    repair2 = RepairWorker(m2, members2)
    repair2.under_replicated = 1
    ops2 = OperatorJobs(m2, members2, repair2)
    ops2.start("rebalance")
    anyio.run(ops2.run_once)
    assert not repair2.orders and ops2.jobs_list()[0]["state"] == "running"
    with pytest.raises(errors.InvalidInput):
        ops2.start("rebalance", node=1)
    with pytest.raises(errors.InvalidInput):
        ops2.start("defrag")


# ---------------------------------------------------------------- the scrub job
def test_scrub_job_is_ordered_in_heartbeats_until_every_node_reports_its_pass_done():
    m, members = cluster(nodes=3)
    ops = OperatorJobs(m, members, RepairWorker(m, members))
    job = ops.start("scrub")
    assert sorted(job["parts"]) == ["1", "2", "3"] and job["progress"] == 0.0
    assert ops.on_heartbeat(1, None) == job["id"]
    assert ops.on_heartbeat(1, {"job": "scrub-old", "done": True}) == job["id"]  # another job's pass: start over
    for n in (1, 2, 3):
        assert ops.on_heartbeat(n, {"job": job["id"], "bytes": 50, "total": 100, "blocks": 1, "bad": 0,
                                    "done": False}) is None
    (j,) = ops.jobs_list()
    assert j["state"] == "running" and j["done"] == 150 and j["total"] == 300 and j["progress"] == 0.5
    for n in (1, 2, 3):
        ops.on_heartbeat(n, {"job": job["id"], "bytes": 100, "total": 100, "blocks": 2, "bad": int(n == 2),
                             "done": True})
    (j,) = ops.jobs_list()
    assert j["state"] == "done" and j["progress"] == 1.0 and j["blocks"] == 6 and j["bad"] == 1
    assert ops.on_heartbeat(1, None) is None


def test_scrub_job_fails_when_a_node_dies_and_checks_its_node():
    m, members = cluster(nodes=3)
    ops = OperatorJobs(m, members, RepairWorker(m, members))
    with pytest.raises(errors.NotFound):
        ops.start("scrub", node=9)
    job = ops.start("scrub", node=2)
    assert list(job["parts"]) == ["2"]
    members.nodes[2].last_seen -= 100
    anyio.run(ops.run_once)
    (j,) = ops.jobs_list()
    assert j["state"] == "failed" and j["parts"]["2"]["state"] == "lost"
    with pytest.raises(errors.Conflict):
        ops.start("scrub", node=2)


def test_scrubber_runs_a_full_pass_for_a_job_even_when_background_scrubbing_is_off():
    s = BlockStore(MemoryKV(), chunk_size=1024)
    for bid in (1, 2, 3):
        data = bytes([bid]) * 3000
        s.put(bid, data, crc32c(data))
    raw = bytearray(s.kv.get(dnkeys.chunk(3, 2)))
    raw[10] ^= 1
    s.kv.put(dnkeys.chunk(3, 2), bytes(raw))

    sc = Scrubber(s, bytes_per_s=0)
    anyio.run(sc.run_once)
    assert sc.totals["blocks"] == 0  # off, and no job
    sc.start_job("scrub-1")
    anyio.run(sc.run_once)  # 4 MiB per pass: the whole store
    assert sc.job == {"job": "scrub-1", "bytes": 9000, "total": 9000, "blocks": 3, "bad": 1, "done": True}
    sc.start_job("scrub-1")  # the same job again: nothing restarts
    assert sc.job["done"]
