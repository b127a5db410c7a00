"""Issue 18 (hardening), repair, through real processes: near capacity the missing copies wait with backoff and show
in the admin summary (a sync:N bucket never acknowledges fewer than N), and the repair figures are live."""
from __future__ import annotations

import os
import threading
import time

import botocore.exceptions
import pytest
from cluster import MAIN, Cluster, upload_until
from epochfs.frontends.cli.admin import AdminClient
from test_recovery import wait_for

pytestmark = pytest.mark.integration

MiB = 1 << 20


def test_near_capacity_missing_copies_back_off_and_show_in_the_summary(tmp_path):
    """Two of three DataNodes have room for a few blocks only. Async writes are acknowledged with the copies that
    fit; the rest wait: the NameNode orders them again only after a growing wait (it retried ~16 times a second),
    logs why, and the admin summary counts them with the reason. A sync:2 bucket acknowledges no write with fewer
    than two copies: the others answer 503 and leave nothing visible."""
    small = {"DN_CAPACITY_BYTES": str(6 * MiB)}
    c = Cluster(tmp_path, block_size=MiB, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "5"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"}, dn_env_for={2: small, 3: small}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="async")
        acked = upload_until(s3, "async", {f"k{i}": os.urandom(200_000) for i in range(120)}, threading.Event(), 8)
        assert len(acked) == 120  # async: the primary's copy suffices to acknowledge
        time.sleep(3)  # past the first retries
        f0 = c.nn.stats().failed
        time.sleep(10)
        st = c.nn.stats()
        retries = st.failed - f0
        assert retries < 40, f"{retries} failed copy orders in 10 s: the NameNode retries without a pause"
        assert st.under_replicated > 0 and st.waiting.get("no_space", 0) > 0
        log = (c.root / "logs" / "nn.log").read_text()
        assert "no space on the target" in log
        s = AdminClient(c.endpoint, MAIN[0], MAIN[1]).call("GET", "/summary")
        assert s["health"] == "degraded" and s["waiting_for_copies"] > 0 and s["waiting_reasons"]["no_space"] > 0
        for k, v in list(acked.items())[:20]:
            assert s3.get_object(Bucket="async", Key=k)["Body"].read() == v

        s3.create_bucket(Bucket="sync2")
        c.nn.bucket_settings("sync2", write_policy="sync:2")
        refused = []
        for i in range(40):
            try:
                s3.put_object(Bucket="sync2", Key=f"s{i}", Body=os.urandom(200_000))
            except botocore.exceptions.ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e.response
                refused.append(f"s{i}")
        assert refused, "the full nodes took every block"
        stored = c.datanode_blocks()
        for i in range(40):
            if f"s{i}" in refused:
                with pytest.raises(botocore.exceptions.ClientError):
                    s3.head_object(Bucket="sync2", Key=f"s{i}")
                continue
            for blk in c.nn.stat("sync2", f"s{i}").obj.blocks:
                assert sum(blk.id in b for b in stored.values()) >= 2, f"s{i} acknowledged with one copy"
    finally:
        c.close()


def test_under_replicated_and_lost_are_counted_while_copies_are_out(tmp_path):
    """One copy order of one block at a time, so the restore takes a while: meanwhile `under_replicated` counts the
    dead node's blocks and `lost` those it held alone (a bucket with one replica), instead of 0 until the end."""
    c = Cluster(tmp_path, datanodes=4, block_size=MiB,
                nn_env={"NN_HEARTBEAT_TIMEOUT_S": "2", "NN_REPAIR_INTERVAL_S": "0.2", "NN_REPAIR_MAX_INFLIGHT": "1",
                        "NN_REPAIR_BATCH_BYTES": "1", "NN_REPAIR_BYTES_PER_S": "0"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="three")
        s3.create_bucket(Bucket="one")
        c.nn.bucket_settings("one", replication=1)
        for i in range(120):
            s3.put_object(Bucket="three", Key=f"k{i}", Body=os.urandom(30_000))
        for i in range(12):
            s3.put_object(Bucket="one", Key=f"k{i}", Body=os.urandom(30_000))
        c.replicate_once()
        wait_for(lambda: all(n.replication_lag.queued == 0 for n in c.nn.nodes()), 30,
                 "replication")
        ids = c.node_ids()
        alone = [c.nn.stat("one", f"k{i}").obj.blocks[0].nodes[0] for i in range(12)]
        victim = max(ids, key=lambda name: alone.count(ids[name]))
        dead = ids[victim]
        on_victim = sum(dead in c.nn.stat("three", f"k{i}").obj.blocks[0].nodes
                        for i in range(120))
        c.kill(victim)
        wait_for(lambda: dead in c.nn.stats().dead_nodes, 15, "the node to be declared dead")
        st = wait_for(lambda: (s := c.nn.stats()).under_replicated and s, 5, "a live count")
        job = next(j for j in c.nn.jobs() if j.node == dead)
        assert job.state == "running"  # the copies are still being made
        assert st.lost == alone.count(dead)
        assert st.under_replicated >= on_victim + alone.count(dead) - st.repaired - 2
    finally:
        c.close()
