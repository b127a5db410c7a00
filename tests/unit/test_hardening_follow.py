"""Issue 18 follow-ups: a read-only DataNode (its store refuses writes) gets no new copies from placement, repair or
read repair; a commit's new blocks must be acknowledged by as many copies as the bucket's write policy wants."""
import asyncio

import pytest

from epochfs.common import errors
from epochfs.common.kv import MemoryKV
from epochfs.common.messages import WrittenBlock
from epochfs.namenode.membership import Membership
from epochfs.namenode.metastore import MetaStore
from epochfs.namenode.placement import ClusterView, NodeView, choose_targets, plan_repairs, shortage
from epochfs.namenode.repair import RepairWorker

BIG = 10**12
RO = ClusterView(tuple(NodeView(i, True, BIG, read_only=i == 2) for i in range(1, 6)))


def test_placement_never_chooses_a_read_only_node():
    for seed in range(200):
        assert 2 not in choose_targets(RO, seed, seed % 5, 3)


def test_repair_never_targets_a_read_only_node_but_reads_from_it():
    v = ClusterView(tuple(NodeView(i, i != 1, BIG, read_only=i == 2) for i in range(1, 5)))
    for bid in range(100):
        rs = plan_repairs(v, bid, [1, 2, 3])
        assert [(r.source, r.target, r.replaces) for r in rs] == [(2, 4, 1)]
    assert shortage(v, [3, 4]) == "no_node"  # the read-only node is no place for a copy


def _cluster():
    m = MetaStore(MemoryKV())
    members = Membership(m, timeout_s=10.0)
    for i in range(1, 5):
        members.register(f"u{i}", "127.0.0.1", 1000 + i, 0, BIG, 0)
    return m, members


def test_heartbeat_write_error_makes_a_node_read_only_until_cleared():
    _, members = _cluster()
    st = members.nodes[3]
    members.heartbeat(3, 0, BIG, 0, {}, "IO error: No space left on device")
    assert members.state(st) == "read-only"
    assert {n.id for n in members.view().nodes if n.read_only} == {3}
    assert all(3 not in choose_targets(members.view(), s, 0, 3) for s in range(50))
    members.heartbeat(3, 0, BIG, 0, {})
    assert members.state(st) == "alive" and not any(n.read_only for n in members.view().nodes)


def test_read_repair_of_a_copy_on_a_read_only_node_goes_elsewhere():
    m, members = _cluster()
    w = RepairWorker(m, members)
    members.heartbeat(3, 0, BIG, 0, {}, "Corruption: block checksum mismatch")
    assert w._repush(members.view(), 7, 3, [1, 3, 2], b"h")
    (order,) = w.orders.values()
    assert (order.source, order.target, order.replaces) == (1, 4, 3)


def _written(bid: int, nodes: list[int], acks: int) -> WrittenBlock:
    """A 10-byte block as a commit names it: written to `nodes`, acknowledged by `acks` copies."""
    return WrittenBlock(id=bid, size=10, crc=0, nodes=tuple(nodes), acks=acks)


def test_commit_refuses_blocks_acknowledged_by_fewer_copies_than_the_policy_wants():
    m, members = _cluster()
    w = RepairWorker(m, members)
    assert w.admit([_written(7, [1, 2, 3], 3), 9], 3) == [[7, 10, 0, [1, 2, 3]], 9]
    assert w.admit([_written(7, [1, 2, 3], 1)], 1) == [[7, 10, 0, [1, 2, 3]]]
    with pytest.raises(errors.NotEnoughReplicas):
        w.admit([_written(7, [1, 2, 3], 3), _written(8, [1, 2, 3], 1)], 3)
    with pytest.raises(errors.NotEnoughReplicas):
        w.admit([WrittenBlock(id=7, size=10, crc=0, nodes=(1, 2, 3))], 2)  # no count: one copy


def test_commit_leaves_a_read_only_secondary_out_and_tops_the_block_up():
    m, members = _cluster()
    w = RepairWorker(m, members)
    members.heartbeat(2, 0, BIG, 0, {}, "IO error: No space left on device")
    assert w.admit([_written(7, [1, 2, 3], 1), _written(8, [2, 3, 4], 1)], 1) == [[7, 10, 0, [1, 3]],
                                                                                [8, 10, 0, [2, 3, 4]]]
    assert w.short == {7: 3}


def _rot(path, body: bytes) -> None:
    """Flip a byte of `body` where it lies in one of RocksDB's files under `path` (the store closed)."""
    f, raw, at = next((f, raw, raw.find(body[7000:7064])) for f in path.glob("*.sst")
                      if (raw := bytearray(f.read_bytes())).find(body[7000:7064]) >= 0)
    raw[at + 20] ^= 0xA5
    f.write_bytes(bytes(raw))


def test_a_store_refusing_writes_notes_why_for_the_heartbeat_and_still_serves_reads(tmp_path):
    """A real RocksDB whose compaction meets a rotten block refuses every later write: the put answers
    Unavailable and the store keeps the error (the heartbeat's write_error) while good blocks are still read."""
    import os

    from epochfs.common.blocks import crc32c
    from epochfs.common.kv import RocksKV, RocksSpace
    from epochfs.datanode import keys
    from epochfs.datanode.blockstore import BlockStore

    blobs = [os.urandom(120 << 10) for _ in range(6)]
    db = RocksKV.open(tmp_path / "b", bulk=True)
    for i, blob in enumerate(blobs):
        BlockStore(db).put(i, blob, crc32c(blob))
    db.flush_memtables()
    db.close()
    _rot(tmp_path / "b", blobs[2])
    db = RocksKV.open(tmp_path / "b", bulk=True)
    store = BlockStore(db)
    try:
        asyncio.run(store.store(2, blobs[2], crc32c(blobs[2])))  # rewritten in a newer file: the store still takes writes
        assert store.write_error == ""
        db.flush_memtables()
        db._db.get_column_family(RocksSpace.CHUNKS).compact_range(keys.CHUNKS, None)  # merging the files meets the rotten one: a background error
        blob = os.urandom(1000)
        with pytest.raises(errors.Unavailable):
            asyncio.run(store.store(77, blob, crc32c(blob)))
        assert "orruption" in store.write_error
        assert b"".join(store.read(5)) == blobs[5]
    finally:
        try:
            db.close()
        except Exception:  # noqa: BLE001 -- closing flushes, which the background error refuses too
            pass
