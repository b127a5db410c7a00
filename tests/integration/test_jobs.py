"""Operator jobs through the admin API on a real cluster: a scrub job finds a flipped byte nobody reads (background
scrubbing is off) and reaches done; a rebalance job moves replicas onto a fourth DataNode that joined late, with
no block ever below its replication factor and every object intact."""
from __future__ import annotations

import os
import time

import pytest
from cluster import MAIN, Cluster
from epochfs.frontends.cli.admin import AdminClient
from test_recovery import _reads_back, corrupt_replica, settle_replication, wait_for

pytestmark = pytest.mark.integration

MiB = 1 << 20


@pytest.fixture(scope="module")
def jobs_cluster(tmp_path_factory):
    """Three DataNodes running (a fourth one's slot is free), background scrubbing off, repairs at most 4 in flight."""
    c = Cluster(tmp_path_factory.mktemp("jobs"), datanodes=4, block_size=MiB,
                nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10", "NN_REPAIR_INTERVAL_S": "0.2", "NN_REPAIR_MAX_INFLIGHT": "4",
                        "NN_REPAIR_BYTES_PER_S": str(16 * MiB)},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"})
    try:
        c.start_namenode()
        for i in (1, 2, 3):
            c.start_datanode(i)
        c.start_gateway()
        yield c
    finally:
        c.close()


def job(admin: AdminClient, job_id: str) -> dict:
    return next(j for j in admin.call("GET", "/jobs") if j["id"] == job_id)


def test_scrub_job_finds_a_flipped_byte_and_reaches_done(jobs_cluster):
    c = jobs_cluster
    admin = AdminClient(c.endpoint, MAIN[0], MAIN[1])
    s3 = c.s3()
    s3.create_bucket(Bucket="scrub")
    data = {f"k{i}": os.urandom(300_000) for i in range(5)}
    for k, v in data.items():
        s3.put_object(Bucket="scrub", Key=k, Body=v)
    blk, holder = corrupt_replica(c, "scrub", "k2", 1, chunk=0, at=10)
    time.sleep(1.0)
    assert c.nn.stats().read_repairs == 0  # nobody read it and the background scrubber is off

    started = admin.call("POST", "/jobs", {"kind": "scrub"})
    assert started["kind"] == "scrub" and started["state"] == "running"
    assert admin.call("POST", "/jobs", {"kind": "scrub"})["id"] == started["id"]  # one at a time
    done = wait_for(lambda: (j := job(admin, started["id"]))["state"] != "running" and j, 30, "the scrub job")
    assert done["state"] == "done" and done["progress"] == 1.0, done
    detail = done["detail"]
    assert detail["bad"] == 1 and detail["blocks"] >= 3 * len(data), detail
    assert sorted(detail["parts"]) == sorted(str(n) for n in c.node_ids().values())
    assert all(p["state"] == "done" for p in detail["parts"].values())
    wait_for(lambda: _reads_back(c, holder, blk.id) == data["k2"], 20, "the scrub job's repair")
    assert c.nn.stats().read_repairs == 1
    for k, v in data.items():
        assert s3.get_object(Bucket="scrub", Key=k)["Body"].read() == v


def test_rebalance_job_moves_replicas_onto_a_new_datanode(jobs_cluster):
    c = jobs_cluster
    admin = AdminClient(c.endpoint, MAIN[0], MAIN[1])
    s3 = c.s3()
    s3.create_bucket(Bucket="rebalance")
    data = {f"r{i}": os.urandom(MiB + i * 1000) for i in range(12)}  # two blocks each: a full one and a short one
    for k, v in data.items():
        s3.put_object(Bucket="rebalance", Key=k, Body=v)

    def blocks() -> list:
        return [b for k in data for b in c.nn.stat("rebalance", k).obj.blocks]

    settle_replication(c, blocks())
    c.start_datanode(4)
    new = c.node_ids()["dn4"]
    started = admin.call("POST", "/jobs", {"kind": "rebalance"})
    assert started["kind"] == "rebalance" and started["state"] == "running"
    deadline = time.monotonic() + 60
    while (j := job(admin, started["id"]))["state"] == "running":
        for b in blocks():  # copy first, then drop the old replica: never fewer than 3
            assert len(set(b.nodes)) == 3, b
        stats = c.nn.stats()
        assert stats.under_replicated == 0 and stats.copy_orders <= 4  # NN_REPAIR_MAX_INFLIGHT, of many blocks each
        k = f"r{int(time.monotonic() * 10) % len(data)}"
        assert s3.get_object(Bucket="rebalance", Key=k)["Body"].read() == data[k]
        assert time.monotonic() < deadline, f"rebalance did not finish: {j}"
        time.sleep(0.05)
    assert j["state"] == "done" and j["progress"] == 1.0 and j["detail"]["done"] == j["detail"]["total"] > 0, j
    on_new = [b for b in blocks() if new in b.nodes]
    assert len(on_new) >= 6 and j["detail"]["bytes_moved"] > 0
    load = {nid: 0 for nid in c.node_ids().values()}
    for b in every_block(c):
        for n in b.nodes:
            load[n] += b.size
    assert max(load.values()) - min(load.values()) <= 2 * MiB, load
    c.collect_garbage()  # the old copies are deleted: every node stores exactly what the metadata says
    stored = {c.node_ids()[name]: have for name, have in c.datanode_blocks().items()}
    for b in blocks():
        assert {n for n in stored if b.id in stored[n]} == set(b.nodes), b
    for k, v in data.items():
        assert s3.get_object(Bucket="rebalance", Key=k)["Body"].read() == v


def every_block(c: Cluster) -> list:
    s3 = c.s3()
    return [b for bucket in s3.list_buckets()["Buckets"]
            for o in s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
            for b in c.nn.stat(bucket["Name"], o["Key"]).obj.blocks]
