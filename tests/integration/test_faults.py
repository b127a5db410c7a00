"""Fault tests through real processes (kill -9): write policies and the async loss window, a DataNode killed under
load, a NameNode killed mid-upload, full DataNodes, decommission, and a returning node reconciled by block reports.
Each asserts that nothing acknowledged is lost or corrupted."""
from __future__ import annotations

import os
import threading
import time

import botocore.exceptions
import pytest
from cluster import Cluster, upload_until
from lostreply import start_behind_relay
from epochfs.common.blocks import crc32c
from test_recovery import fully_replicated, wait_for

pytestmark = pytest.mark.integration

MiB = 1 << 20
FAST = {"NN_HEARTBEAT_TIMEOUT_S": "2", "NN_REPAIR_INTERVAL_S": "0.2"}


def create_bucket(s3, name: str, policy: str | None = None) -> None:
    """CreateBucket, with epochfs's x-epochfs-write-policy header when `policy` is given."""
    def add(request, **_):
        request.headers["x-epochfs-write-policy"] = policy
    if policy:
        s3.meta.events.register("before-sign.s3.CreateBucket", add)
    try:
        s3.create_bucket(Bucket=name)
    finally:
        if policy:
            s3.meta.events.unregister("before-sign.s3.CreateBucket", add)


def error_code(e: botocore.exceptions.ClientError) -> tuple[int, str]:
    return e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]


def read_or_none(s3, bucket: str, key: str) -> bytes | None:
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except botocore.exceptions.ClientError:
        return None


def block_lists(c: Cluster, bucket: str, keys) -> list:
    return [b for k in keys for b in c.nn.stat(bucket, k).obj.blocks]


def test_async_loss_window_and_sync_policies(tmp_path):
    """Kill -9 a DataNode right after acknowledgements: in async mode the objects whose only copy was on it are
    unreadable (the measured loss window) until it returns; in sync:2 none is. sync:3 with a node down fails
    with 503 and leaves nothing visible."""
    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "30"}, dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3(max_pool_connections=16)
        create_bucket(s3, "fast")
        create_bucket(s3, "safe", "sync:2")
        create_bucket(s3, "strict", "sync:3")
        with pytest.raises(botocore.exceptions.ClientError) as bad:
            create_bucket(s3, "bogus", "sync:x")
        assert error_code(bad.value) == (400, "InvalidArgument")
        assert c.nn.bucket_info("safe").write_policy == "sync:2"

        victim = "dn1"
        results = {}
        for bucket in ("fast", "safe"):
            bodies = {f"o{i:04d}": os.urandom(2000 + i) for i in range(400)}
            stop = threading.Event()
            acked: dict[str, bytes] = {}
            t = threading.Thread(target=upload_until, args=(s3, bucket, bodies, stop, 12, acked))
            t.start()
            wait_for(lambda: len(acked) >= 150, 60, "uploads to get going", poll=0.005)
            c.kill(victim)  # kill -9 while acknowledgements stream in
            killed_at = len(acked)
            time.sleep(0.3)
            stop.set()
            t.join()
            lost = [k for k, v in acked.items() if read_or_none(s3, bucket, k) != v]
            results[bucket] = (len(acked), killed_at, lost)
            c.start_datanode(int(victim[2:]))  # the primary's disk is back: its queued pushes go out
            c.replicate_once()
            for k, v in acked.items():
                assert read_or_none(s3, bucket, k) == v, (bucket, k)
        n_async, _, lost_async = results["fast"]
        n_sync, _, lost_sync = results["safe"]
        print(f"\nasync: {len(lost_async)} of {n_async} acknowledged objects unreadable after kill -9 of a "
              f"DataNode; sync:2: {len(lost_sync)} of {n_sync}")
        assert lost_sync == []

        c.stop("dn3")
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.put_object(Bucket="strict", Key="k", Body=b"x" * 1000)
        assert error_code(e.value) == (503, "ServiceUnavailable")
        assert "replicas" in e.value.response["Error"]["Message"]
        assert read_or_none(s3, "strict", "k") is None
        assert s3.list_objects_v2(Bucket="strict").get("KeyCount") == 0
    finally:
        c.close()


def test_datanode_killed_during_concurrent_uploads_and_reads(tmp_path):
    # sync:2, the policy that promises an acknowledged write survives one failure; under async an object acked in
    # the last few milliseconds before the kill may exist only on the dead node (the loss window measured above)
    c = Cluster(tmp_path, datanodes=4, nn_env={**FAST, "NN_DEFAULT_WRITE_POLICY": "sync:2"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3(max_pool_connections=16)
        s3.create_bucket(Bucket="bkt")
        bodies = {f"k{i:04d}": os.urandom(1000 + (i * 37) % 7000) for i in range(1000)}
        acked: dict[str, bytes] = {}
        stop = threading.Event()
        bad_reads: list[str] = []

        def reader():
            while not stop.is_set():
                for k, v in list(acked.items())[-50:]:
                    if read_or_none(s3, "bkt", k) != v:
                        bad_reads.append(k)

        readers = [threading.Thread(target=reader)]
        for r in readers:
            r.start()
        up = threading.Thread(target=upload_until, args=(s3, "bkt", bodies, threading.Event(), 8, acked))
        up.start()
        wait_for(lambda: len(acked) >= 300, 120, "uploads to get going", poll=0.01)
        dead_id = c.node_ids()["dn2"]
        c.kill("dn2")
        up.join()
        stop.set()
        for r in readers:
            r.join()
        assert len(acked) >= 990, "a node death must not fail more than a few in-flight uploads"
        assert bad_reads == []
        for k, v in acked.items():
            assert read_or_none(s3, "bkt", k) == v, k
        live = set(c.node_ids().values())
        assert dead_id not in live
        wait_for(lambda: fully_replicated(c, block_lists(c, "bkt", acked), live), 90, "full replication", poll=0.5)
        jobs = {j.id: j for j in c.nn.jobs()}
        job = jobs[f"node-{dead_id}"]
        assert job.kind == "re-replication" and job.node == dead_id
    finally:
        c.close()


def test_namenode_killed_mid_upload_leaves_no_partial_objects(tmp_path):
    c = Cluster(tmp_path, block_size=MiB, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10"},
                gw_env={"GW_NAMENODE_RETRY_S": "15"}).start()
    try:
        s3 = c.s3(max_pool_connections=16, read_timeout=60)
        s3.create_bucket(Bucket="bkt")
        bodies = {f"k{i:03d}": os.urandom(MiB * 2 + i * 1001) for i in range(60)}  # three blocks each
        acked: dict[str, bytes] = {}
        up = threading.Thread(target=upload_until, args=(s3, "bkt", bodies, threading.Event(), 4, acked))
        up.start()
        wait_for(lambda: len(acked) >= 10, 60, "uploads to get going", poll=0.01)
        c.kill("nn")
        time.sleep(1.0)
        c.start_namenode()
        up.join()
        assert len(acked) >= 40
        visible = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket="bkt")
                   for o in p.get("Contents", [])]
        assert set(acked) <= set(visible)
        for k in visible:  # acknowledged or not: a visible object is whole
            assert read_or_none(s3, "bkt", k) == bodies[k], k
    finally:
        c.close()


def test_a_commit_whose_reply_is_lost_and_is_sent_again_keeps_its_blocks(tmp_path):
    """The NameNode commits an object and its answer is lost (killed before the reply went out, a dropped
    connection): the gateway's client sends the same commit again. That second commit must not let go of the blocks
    the first one committed, as a commit replacing an object lets go of the old object's blocks: the object would be
    listed with its blocks deleted (a GET answering 503). This is how a NameNode killed mid-upload left such objects
    (test_namenode_killed_mid_upload_leaves_no_partial_objects, 4 runs of 32). The same for an uploaded part,
    and for a commit sent again after another writer replaced the object (its blocks are garbage by then)."""
    c = Cluster(tmp_path, block_size=MiB)
    relay = start_behind_relay(c)
    try:
        s3 = c.s3(read_timeout=60)
        s3.create_bucket(Bucket="bkt")
        body = os.urandom(2 * MiB + 1001)  # three blocks
        relay.lose("put_object")
        s3.put_object(Bucket="bkt", Key="k", Body=body)
        assert relay.dropped == ["put_object"] and relay.calls["put_object"] == 2  # committed, then sent again

        up = s3.create_multipart_upload(Bucket="bkt", Key="mp")["UploadId"]
        part = os.urandom(5 * MiB + 7)
        relay.lose("mpu_put_part")
        etag = s3.upload_part(Bucket="bkt", Key="mp", UploadId=up, PartNumber=1, Body=part)["ETag"]
        assert relay.dropped[-1] == "mpu_put_part" and relay.calls["mpu_put_part"] == 2
        s3.complete_multipart_upload(Bucket="bkt", Key="mp", UploadId=up,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})

        c.collect_garbage()
        assert read_or_none(s3, "bkt", "k") == body
        assert read_or_none(s3, "bkt", "mp") == part
        stored = c.datanode_blocks()
        by_id = {nid: stored[name] for name, nid in c.node_ids().items()}
        for b in block_lists(c, "bkt", ["k", "mp"]):
            assert b.id in by_id[b.nodes[0]], b  # the primary's copy is there (the others may still be on the way)
    finally:
        c.close()
        relay.close()


def test_full_datanodes_take_no_more_and_writes_fail_cleanly(tmp_path):
    caps = {1: 6 * MiB, 2: 6 * MiB, 3: 6 * MiB, 4: MiB}
    c = Cluster(tmp_path, datanodes=4, block_size=MiB, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"},
                dn_env_for={i: {"DN_CAPACITY_BYTES": str(cap)} for i, cap in caps.items()}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        acked, failed = {}, None
        for i in range(200):
            body = os.urandom(256 << 10)
            try:
                s3.put_object(Bucket="bkt", Key=f"k{i}", Body=body)
                acked[f"k{i}"] = body
            except botocore.exceptions.ClientError as e:
                failed = (f"k{i}", e)
                break
        assert failed is not None and len(acked) >= 20  # 18 MiB / 3 replicas of 256 KiB, minus the reserve
        key, e = failed
        msg = e.response["Error"]["Message"]
        assert error_code(e) == (503, "ServiceUnavailable") and ("free space" in msg or "node full" in msg), msg
        assert read_or_none(s3, "bkt", key) is None
        for k, v in acked.items():
            assert read_or_none(s3, "bkt", k) == v
        c.replicate_once()
        for name in ("dn1", "dn2", "dn3", "dn4"):
            used = sum(b.size for k in acked for b in c.nn.stat("bkt", k).obj.blocks
                       if c.node_ids()[name] in b.nodes)
            assert used <= caps[int(name[2:])], name
        # every block's holders really store it: writes went elsewhere, never half-written
        stored = c.datanode_blocks()
        by_id = {nid: stored[name] for name, nid in c.node_ids().items()}
        for b in block_lists(c, "bkt", acked):
            assert len(b.nodes) == 3 and all(b.id in by_id[n] for n in b.nodes)
    finally:
        c.close()


def test_decommission_drains_a_node_without_under_replication(tmp_path):
    c = Cluster(tmp_path, datanodes=4, block_size=MiB,
                nn_env={**FAST, "NN_REPAIR_BYTES_PER_S": str(4 * MiB)}, dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        bodies = {f"k{i}": os.urandom(MiB // 2 + i) for i in range(24)}
        for k, v in bodies.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        live = set(c.node_ids().values())
        wait_for(lambda: c.replicate_once() or fully_replicated(c, block_lists(c, "bkt", bodies), live), 20,
                 "initial replication")
        leaving = c.node_ids()["dn1"]
        moved = sum(b.size for b in block_lists(c, "bkt", bodies) if leaving in b.nodes)
        t0 = time.monotonic()
        job = c.nn.decommission(leaving)
        assert job.kind == "decommission" and job.state == "running"

        def state():
            return next(n for n in c.nn.nodes() if n.id == leaving)

        assert state().state == "decommissioning"
        while state().state != "decommissioned":
            for b in block_lists(c, "bkt", bodies):  # never a moment with fewer than 3 replicas
                assert len(set(b.nodes)) == 3, b
            assert c.nn.stats().under_replicated == 0
            assert time.monotonic() - t0 < 60, "decommission did not finish"
            time.sleep(0.1)
        took = time.monotonic() - t0
        assert took >= (moved - 4 * MiB) / (4 * MiB) * 0.8  # paced by NN_REPAIR_BYTES_PER_S
        job = next(j for j in c.nn.jobs() if j.node == leaving)
        assert job.state == "done" and job.progress == 1.0 and job.detail["done"] == job.detail["total"] > 0
        assert all(leaving not in b.nodes for b in block_lists(c, "bkt", bodies))
        wait_for(lambda: not c.datanode_blocks()["dn1"], 15, "the decommissioned node to drop its copies")
        # placement skips it; a block from an allocation the gateway leased before the decommission is moved off
        s3.put_object(Bucket="bkt", Key="new", Body=b"n" * 5000)
        wait_for(lambda: leaving not in block_lists(c, "bkt", ["new"])[0].nodes, 15, "the new block to leave dn1")
        assert read_or_none(s3, "bkt", "new") == b"n" * 5000
        for k, v in bodies.items():
            assert read_or_none(s3, "bkt", k) == v
        print(f"\ndecommission: {moved / MiB:.1f} MiB moved in {took:.2f}s at 4 MiB/s")
    finally:
        c.close()


def test_returning_node_is_reconciled_and_short_blocks_topped_up(tmp_path):
    c = Cluster(tmp_path, nn_env=FAST, dn_env={"DN_SCRUB_BYTES_PER_S": "0", "DN_BLOCK_REPORT_INTERVAL_S": "0.5"}
                ).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        away = c.node_ids()["dn3"]
        c.stop("dn3")
        wait_for(lambda: away in c.nn.stats().dead_nodes, 10, "dn3 to be declared dead")
        bodies = {f"k{i}": os.urandom(50_000) for i in range(10)}
        for k, v in bodies.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        assert all(len(b.nodes) == 2 for b in block_lists(c, "bkt", bodies))  # only two nodes were up
        short = c.nn.stats().short_blocks
        assert short >= 10  # these and the gateway's other leased allocations (still pending)
        stray = 1 << 40  # a copy no file refers to
        c.start_datanode(3)
        _put_stray(c, "dn3", stray)
        live = set(c.node_ids().values())
        wait_for(lambda: fully_replicated(c, block_lists(c, "bkt", bodies), live), 30, "the top-up to 3 replicas")
        wait_for(lambda: stray not in c.datanode_blocks()["dn3"], 15, "the surplus copy to be deleted")
        stats = wait_for(lambda: (s := c.nn.stats()).short_blocks <= short - 10 and s, 10,
                         "the topped-up blocks' records to go")
        assert stats.surplus_deleted >= 1 and stats.topped_up + stats.repaired >= 10
        for k, v in bodies.items():
            assert read_or_none(s3, "bkt", k) == v
    finally:
        c.close()


def _put_stray(c: Cluster, dn: str, block_id: int) -> None:
    c.datanode(dn, lambda d: d.put_replica(block_id, crc32c(b"stray" * 100), b"stray" * 100))
