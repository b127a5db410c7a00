"""Failure detection and recovery through real processes: a kill -9'd DataNode is declared dead and its blocks are
re-replicated; a flipped byte is repaired after a read hits it, and the scrubber finds one that nobody reads."""
from __future__ import annotations

import os
import time

import pytest
from cluster import Cluster
from epochfs.common import errors
from epochfs.common.kv import RocksKV
from epochfs.datanode import keys as dnkeys

pytestmark = pytest.mark.integration

MiB = 1 << 20


def wait_for(cond, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        res = cond()
        if res:
            return res
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)


def fully_replicated(c: Cluster, block_lists: list, live: set[int]) -> bool:
    """Every block has 3 distinct live holders in the metadata, and each of them stores it."""
    stored = c.datanode_blocks()
    by_id = {nid: stored[name] for name, nid in c.node_ids().items()}
    for blk in block_lists:
        if len(set(blk.nodes)) != 3 or not set(blk.nodes) <= live:
            return False
        if any(blk.id not in by_id[n] for n in blk.nodes):
            return False
    return True


def settle_replication(c: Cluster, block_lists: list) -> None:
    live = set(c.node_ids().values())
    wait_for(lambda: c.replicate_once() or fully_replicated(c, block_lists, live), 20, "initial replication")


def flip_byte(c: Cluster, dn: str, block_id: int, chunk: int = 0, at: int = 1000) -> None:
    """Corrupt one byte of a stored chunk directly in the stopped DataNode's store: in its file if the block is
    large (FILED), else in its pack (PACKED)."""
    from epochfs.datanode.blockstore import CHUNK_SIZE, FILED, PACKED, block_file
    kv = RocksKV.open(c.root / dn / "blocks", bulk=True)
    try:
        meta = kv.get(dnkeys.meta(block_id))
    finally:
        kv.close()
    layout = meta[12:13]
    assert layout in (FILED, PACKED), "a block written now is in a file or a pack"
    files = c.root / dn / "blocks.files"
    if layout == FILED:
        path, base = block_file(files, block_id, int.from_bytes(meta[13:21], "big")), 0
    else:
        path, base = files / "packs" / str(int.from_bytes(meta[13:21], "big")), int.from_bytes(meta[21:29], "big")
    with open(path, "r+b") as f:
        f.seek(base + chunk * CHUNK_SIZE + at)
        byte = f.read(1)[0]
        f.seek(base + chunk * CHUNK_SIZE + at)
        f.write(bytes([byte ^ 0x40]))


def corrupt_replica(c: Cluster, bucket: str, key: str, replica: int, chunk: int, at: int = 1000,
                    check: bool = True) -> tuple[list, str]:
    """Flip a byte in one stored replica (0: the primary, read first) of the first block of `bucket/key`, once all
    its copies are in place; returns the block and the DataNode that holds the bad copy, which is up again (and,
    with `check`, known to fail its CRC check)."""
    blk = c.nn.stat(bucket, key).obj.blocks[0]
    settle_replication(c, [blk])
    holder = next(name for name, nid in c.node_ids().items() if nid == blk.nodes[replica])
    c.stop(holder)
    flip_byte(c, holder, blk.id, chunk=chunk, at=at)
    c.start_datanode(int(holder[2:]))
    if check:
        with pytest.raises(errors.CorruptBlock):
            c.read_replica(holder, blk.id)
    return blk, holder


def test_killed_datanode_is_declared_dead_and_its_blocks_re_replicated(tmp_path):
    c = Cluster(tmp_path, datanodes=4, block_size=MiB,
                nn_env={"NN_HEARTBEAT_TIMEOUT_S": "2", "NN_REPAIR_INTERVAL_S": "0.2", "NN_MIN_PART_SIZE": str(MiB)},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="data")
        objects = {f"small/{i}": os.urandom(100_000) for i in range(8)}
        objects |= {f"mid/{i}": os.urandom(MiB + MiB // 2) for i in range(8)}
        objects |= {f"big/{i}": os.urandom(6 * MiB + 123) for i in range(2)}
        for k, v in objects.items():
            s3.put_object(Bucket="data", Key=k, Body=v)
        # a noncurrent version and an unfinished multipart upload hold blocks too
        s3.create_bucket(Bucket="ver")
        s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
        old, new = os.urandom(MiB + 7), os.urandom(MiB + 9)
        v_old = s3.put_object(Bucket="ver", Key="k", Body=old)["VersionId"]
        s3.put_object(Bucket="ver", Key="k", Body=new)
        part1, part2 = os.urandom(MiB + MiB // 2), os.urandom(1000)
        up = s3.create_multipart_upload(Bucket="data", Key="mpu")["UploadId"]
        e1 = s3.upload_part(Bucket="data", Key="mpu", UploadId=up, PartNumber=1, Body=part1)["ETag"]
        total = sum(map(len, objects.values())) + len(old) + len(new) + len(part1)

        def block_lists():
            out = [b for k in objects for b in c.nn.stat("data", k).obj.blocks]
            out += c.nn.stat("ver", "k").obj.blocks
            out += c.nn.stat("ver", "k", v_old).obj.blocks
            return out

        before = block_lists()
        settle_replication(c, before)
        ids = c.node_ids()
        victim = "dn2"
        dead_id = ids[victim]
        on_victim = sum(dead_id in b.nodes for b in before)
        assert on_victim > 0

        t0 = time.monotonic()
        c.kill(victim)
        wait_for(lambda: not next(n for n in c.nn.nodes() if n.id == dead_id).alive, 10,
                 "the dead node to be declared dead", poll=0.05)
        t_detect = time.monotonic() - t0
        live = set(ids.values()) - {dead_id}
        wait_for(lambda: fully_replicated(c, block_lists(), live), 60, "full replication", poll=0.2)
        t_restore = time.monotonic() - t0
        stats = wait_for(lambda: (s := c.nn.stats()).under_replicated == 0 and
                         s.repairs_in_flight == 0 and s, 10, "the repair worker to see no under-replicated block")
        assert stats.dead_nodes == [dead_id] and stats.lost == 0 and stats.repaired >= on_victim
        print(f"\nrecovery: {total / MiB:.1f} MiB in {len(before)} blocks, {on_victim} on the killed node; "
              f"declared dead after {t_detect:.2f}s, full replication after {t_restore:.2f}s")

        for k, v in objects.items():
            assert s3.get_object(Bucket="data", Key=k)["Body"].read() == v, k
        assert s3.get_object(Bucket="ver", Key="k")["Body"].read() == new
        assert s3.get_object(Bucket="ver", Key="k", VersionId=v_old)["Body"].read() == old
        # the unfinished upload's part was repaired too: it completes and reads back after more parts arrive
        e2 = s3.upload_part(Bucket="data", Key="mpu", UploadId=up, PartNumber=2, Body=part2)["ETag"]
        s3.complete_multipart_upload(Bucket="data", Key="mpu", UploadId=up, MultipartUpload={"Parts": [
            {"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
        assert s3.get_object(Bucket="data", Key="mpu")["Body"].read() == part1 + part2
        mpu_blocks = c.nn.stat("data", "mpu").obj.blocks
        assert all(dead_id not in b.nodes for b in mpu_blocks[:2])

        # the dead node comes back: its replaced copies are garbage and get deleted
        c.start_datanode(2)
        replaced = {b.id for b in before if dead_id in b.nodes}
        wait_for(lambda: not (replaced & c.datanode_blocks()[victim]), 15, "the returning node to drop stale copies")
    finally:
        c.close()


@pytest.mark.parametrize("size", [600_000, 3 * MiB], ids=["batch-layout", "bulk-layout"])
def test_read_of_a_corrupt_replica_succeeds_and_repairs_it(tmp_path, size):
    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10"}, dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        data = os.urandom(size)  # one block of 256 KiB chunks: 600 KB through a write batch, 3 MiB as an ingested file
        s3.put_object(Bucket="bkt", Key="k", Body=data)
        blk, primary = corrupt_replica(c, "bkt", "k", 0, chunk=1)  # the primary: the replica read first

        assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == data  # served by another replica
        wait_for(lambda: _reads_back(c, primary, blk.id) == data, 10, "the bad replica to be repaired")
        stats = c.nn.stats()
        assert stats.read_repairs == 1 and stats.under_replicated == 0
        assert c.nn.stat("bkt", "k").obj.blocks[0].nodes == blk.nodes  # same replica set
    finally:
        c.close()


@pytest.mark.parametrize("where", ["within-a-block", "across-blocks"])
def test_ranged_read_through_a_corrupt_chunk_is_served_and_repairs_it(tmp_path, where):
    """A ranged read checks the CRCs of just the chunks it touches: it meets the flipped byte only when its range
    does, then gets the bytes from another replica and the bad one is repaired. Within a block the gateway reads the
    primary first; across blocks it reads both pieces from one holder of both in one call, the first block's primary
    when it holds the second too (gateway/cluster.read_joined), as here with three DataNodes."""
    chunk = 256 << 10
    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10"}, dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        data = os.urandom(5 * MiB)  # a 4 MiB block (bulk layout) and a 1 MiB one
        s3.put_object(Bucket="bkt", Key="k", Body=data)
        if where == "within-a-block":
            bad_chunk, lo, hi = 1, chunk + 10, 2 * chunk - 10
        else:  # the last chunk of the first block, read with the first of the second block
            bad_chunk, lo, hi = 15, 4 * MiB - 300_000, 5 * MiB - 300_000
        blk, holder = corrupt_replica(c, "bkt", "k", 0, chunk=bad_chunk)  # the primary, which is read first

        c.read_replica(holder, blk.id, chunk * (bad_chunk - 1), chunk)  # a good chunk reads
        with pytest.raises(errors.CorruptBlock):
            c.read_replica(holder, blk.id, chunk * bad_chunk + 5, 10)
        r = s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi - 1}")
        assert r["Body"].read() == data[lo:hi]
        wait_for(lambda: _reads_back(c, holder, blk.id) == data[:4 * MiB], 10, "the bad replica to be repaired")
        stats = c.nn.stats()
        assert stats.read_repairs == 1 and stats.under_replicated == 0
        assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == data
    finally:
        c.close()


def test_scrubber_finds_a_flipped_byte_nobody_reads(tmp_path):
    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10"},
                dn_env={"DN_SCRUB_BYTES_PER_S": str(64 * MiB), "DN_SCRUB_INTERVAL_S": "0.2"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        data = {f"k{i}": os.urandom(300_000) for i in range(5)}
        for k, v in data.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        # the scrubber may repair it before anyone could look: no check here
        blk, secondary = corrupt_replica(c, "bkt", "k3", 2, chunk=1, at=10, check=False)
        t0 = time.monotonic()
        wait_for(lambda: _reads_back(c, secondary, blk.id) == data["k3"], 20, "the scrubber's repair")
        print(f"\nscrubber: corrupt replica repaired {time.monotonic() - t0:.2f}s after the node was up")
        assert c.nn.stats().read_repairs == 1
        for k, v in data.items():
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == v
    finally:
        c.close()


def _reads_back(c: Cluster, dn: str, block_id: int) -> bytes | None:
    try:
        return c.read_replica(dn, block_id)
    except errors.CorruptBlock:
        return None
