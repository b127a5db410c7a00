"""Core cluster behaviour through real processes: durability, replication, atomic replace, GC of failed uploads."""
from __future__ import annotations

import os
import socket
import time

import pytest
from botocore.exceptions import ClientError
from cluster import MAIN, Cluster

pytestmark = pytest.mark.integration


def test_blocks_replicate_to_three_nodes(cluster, s3, bucket):
    data = os.urandom(3 * 4 * 1024 * 1024 + 1000)  # 4 blocks of the default 4 MiB
    s3.put_object(Bucket=bucket, Key="striped", Body=data)
    obj = cluster.nn.stat(bucket, "striped").obj
    assert len(obj.blocks) == 4
    primaries = {blk.nodes[0] for blk in obj.blocks}
    assert len(primaries) >= 2, "blocks of one file are striped over several primaries"
    for blk in obj.blocks:
        assert len(set(blk.nodes)) == 3, "three distinct replicas"
    deadline = time.monotonic() + 10
    while True:
        cluster.replicate_once()
        stored = cluster.datanode_blocks()
        if all(all(blk.id in stored[f"dn{n}"] for n in blk.nodes) for blk in obj.blocks):
            break
        assert time.monotonic() < deadline, "replication did not finish"
        time.sleep(0.1)
    assert s3.get_object(Bucket=bucket, Key="striped")["Body"].read() == data


def test_metadata_survives_kill9(tmp_path):
    c = Cluster(tmp_path).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="durable")
        for i in range(20):
            s3.put_object(Bucket="durable", Key=f"k/{i}", Body=f"v{i}".encode())
        c.kill("nn")
        c.start_namenode()
        time.sleep(1.0)  # DataNodes heartbeat again
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="durable")["Contents"]]
        assert keys == sorted(f"k/{i}" for i in range(20))
        assert s3.get_object(Bucket="durable", Key="k/7")["Body"].read() == b"v7"
    finally:
        c.close()


def test_a_gateway_stops_within_seconds_while_its_namenode_is_down(tmp_path):
    """SIGTERM (systemd, Kubernetes, Ctrl-C) of a gateway holding allocated blocks: giving them back is best effort
    (the NameNode expires them), so a NameNode that is gone does not hold the stop for its 10 s failover retry."""
    c = Cluster(tmp_path).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="leased")
        for i in range(3):
            s3.put_object(Bucket="leased", Key=f"k{i}", Body=os.urandom(50_000))  # leases a batch of blocks
        c.kill("nn")
        t = time.monotonic()
        c.stop("gw")
        assert time.monotonic() - t < 4
    finally:
        c.close()


def test_disconnect_mid_upload_leaves_nothing(cluster, s3, bucket):
    """A client that hangs up half-way: no object, and the blocks already written are garbage-collected."""
    before = cluster.datanode_blocks()
    body = os.urandom(10 << 20)
    # a correctly signed request, cut off after 9 MiB (two full blocks reach the DataNodes)
    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials
    aws_req = botocore.awsrequest.AWSRequest(method="PUT", url=f"{cluster.endpoint}/{bucket}/cut",
                                             headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD",
                                                      "Content-Length": str(len(body))})
    botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(MAIN[0], MAIN[1]), "s3", "us-east-1").add_auth(aws_req)
    req = f"PUT /{bucket}/cut HTTP/1.1\r\nHost: 127.0.0.1:{cluster.ports['gw']}\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in aws_req.headers.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", cluster.ports["gw"])) as sock:
        sock.sendall(req.encode())
        sock.sendall(body[: 9 << 20])
        time.sleep(1.0)
    time.sleep(0.5)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=bucket, Key="cut")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    cluster.collect_garbage()
    after = cluster.datanode_blocks()
    referenced = set(cluster.nn.referenced())
    for dn, blocks in after.items():
        assert blocks - before[dn] <= referenced, f"{dn} kept blocks of the cut upload"


def test_overwrite_replaces_atomically_and_frees_old_blocks(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="obj", Body=b"a" * 5000)
    old = cluster.nn.stat(bucket, "obj").obj.blocks
    s3.put_object(Bucket=bucket, Key="obj", Body=b"b" * 7000)
    assert s3.get_object(Bucket=bucket, Key="obj")["Body"].read() == b"b" * 7000
    cluster.collect_garbage()
    stored = cluster.datanode_blocks()
    assert all(old[0].id not in blocks for blocks in stored.values())


def test_write_converges_after_secondary_restart(tmp_path):
    """A secondary that is down when a block is written gets it from the queued job once it is back."""
    c = Cluster(tmp_path).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="conv")
        c.stop("dn2")
        data = os.urandom(100_000)
        s3.put_object(Bucket="conv", Key="k", Body=data)
        blk = c.nn.stat("conv", "k").obj.blocks[0]
        assert len(blk.nodes) == 3 and 2 in blk.nodes
        assert s3.get_object(Bucket="conv", Key="k")["Body"].read() == data  # served by a live replica
        c.start_datanode(2)
        deadline = time.monotonic() + 10
        while blk.id not in c.datanode_blocks()["dn2"]:
            assert time.monotonic() < deadline, "the restarted secondary never got the block"
            c.replicate_once()
            time.sleep(0.1)
        assert all(blk.id in blocks for blocks in c.datanode_blocks().values())
    finally:
        c.close()
