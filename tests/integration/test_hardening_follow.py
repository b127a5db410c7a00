"""Issue 18 follow-ups: a DataNode whose RocksDB refuses writes gets no new blocks or repair copies, shows as
read-only in the admin API and still serves reads; a sync:N bucket is never acknowledged with fewer than N copies,
even by a gateway whose cached block leases predate the switch to sync:N."""
from __future__ import annotations

import io
import os
import subprocess

import botocore.exceptions
import pytest
from rich.console import Console

from cluster import MAIN, SECRET, Cluster, free_port, wait_until as _wait

pytestmark = pytest.mark.integration


def _fill(path) -> None:
    """Write a file at `path` until its filesystem is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (64 << 10))
        except OSError:
            pass


def test_datanode_whose_store_refuses_writes_is_read_only(tmp_path):
    """dn4's store lives on a small tmpfs that fills up, so RocksDB refuses its writes (ENOSPC on the file of an
    ingested block). dn4 says so in its heartbeat: new PUTs place no block there, the repair copies of a dead node's
    blocks go elsewhere, the admin API shows it read-only with the reason (health degraded), and the blocks it
    holds are still read from it. Restarted on a store with room again, it takes writes."""
    from epochfs.frontends.cli.admin import AdminClient, show_nodes

    mnt = tmp_path / "dn4"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", str(mnt)], check=True)
    c = Cluster(tmp_path, datanodes=4, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "3", "NN_REPAIR_INTERVAL_S": "0.2"},
                dn_env_for={4: {"DN_CAPACITY_BYTES": str(1 << 30)}})  # dn4 does not look full to placement
    try:
        c.start()
        admin = AdminClient(c.endpoint, MAIN[0], MAIN[1])
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        admin.call("PATCH", "/buckets/bkt", {"replication": 2})
        ids = c.node_ids()
        ro = ids["dn4"]
        before = {}
        for i in range(24):  # until dn4 holds a few blocks
            before[f"old{i}"] = os.urandom(3 << 20)
            s3.put_object(Bucket="bkt", Key=f"old{i}", Body=before[f"old{i}"])
        blk = {k: c.nn.stat("bkt", k).obj.blocks[0] for k in before}
        on_ro = [k for k in before if blk[k].nodes[0] == ro]
        assert on_ro

        _fill(mnt / "filler")
        for i in range(12):  # 3 MiB blocks are ingested as files: the full filesystem refuses them
            s3.put_object(Bucket="bkt", Key=f"mid{i}", Body=os.urandom(3 << 20))
        node = _wait(lambda: next((n for n in admin.call("GET", "/nodes")
                                   if n["id"] == ro and n["state"] == "read-only"), None), 30, "dn4 read-only")
        assert "space" in node["write_error"].lower() or "error" in node["write_error"].lower(), node
        assert admin.call("GET", "/summary")["health"] == "degraded"
        out = Console(file=io.StringIO(), width=250)
        out.print(show_nodes(admin))  # what `epochfs admin nodes` prints
        assert "read-only: " in out.file.getvalue(), out.file.getvalue()

        new = {}
        for i in range(16):
            new[f"new{i}"] = os.urandom(3 << 20)
            s3.put_object(Bucket="bkt", Key=f"new{i}", Body=new[f"new{i}"])
        placed = {k: c.nn.stat("bkt", k).obj.blocks[0].nodes for k in new}
        assert all(ro not in nodes for nodes in placed.values()), placed

        for k in on_ro:  # reads from it keep working
            assert c.read_replica("dn4", blk[k].id) == before[k]
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == before[k]

        # dn1 dies: its blocks' repair copies go to the other live node, never to dn4
        dead = ids["dn1"]
        c.stop("dn1")
        hit = [k for k, nodes in placed.items() if dead in nodes]
        assert hit

        def repaired():
            got = {k: c.nn.stat("bkt", k).obj.blocks[0].nodes for k in hit}
            return got if all(dead not in n and len(n) == 2 for n in got.values()) else None
        got = _wait(repaired, 60, "repairs of dn1's blocks")
        assert all(ro not in n for n in got.values()), got
        for k in hit:
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == new[k]

        # the operator frees space and restarts the node: it takes writes again
        (mnt / "filler").unlink()
        c.stop("dn4")
        c.start_datanode(4)
        _wait(lambda: next((n for n in admin.call("GET", "/nodes") if n["id"] == ro and n["state"] == "alive"),
                           None), 30, "dn4 back in service")
        assert not any(n["write_error"] for n in admin.call("GET", "/nodes"))
    finally:
        c.close()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_datanode_whose_engine_refused_a_write_on_a_full_disk_restarts_once_it_has_room(tmp_path):
    """dn3's store on a small tmpfs that fills up; deleting many of its blocks is one write batch that RocksDB can't
    append to its WAL, and after a failed WAL append RocksDB refuses every write until it is opened again, a disk
    given room again included. dn3 is read-only meanwhile (reads go on); once the filler is gone its probe finds
    its files writable and the engine still refusing, and the DataNode stops to be started again (EXIT_RESTART,
    for its supervisor: `epochfs up`, systemd, Kubernetes). Before, it stayed read-only until an operator
    restarted it. Started again (as its supervisor would), it carries out the deletions and takes new copies."""
    from epochfs.common.service import EXIT_RESTART
    from epochfs.frontends.cli.admin import AdminClient

    mnt = tmp_path / "dn3"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "30"})
    try:
        c.start()
        admin = AdminClient(c.endpoint, MAIN[0], MAIN[1])
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        dn3 = c.node_ids()["dn3"]
        bodies = {f"k{i}": os.urandom(1000) for i in range(400)}
        for k, body in bodies.items():
            s3.put_object(Bucket="bkt", Key=k, Body=body)
        ids = {k: c.nn.stat("bkt", k).obj.blocks[0].id for k in bodies}
        _wait(lambda: set(ids.values()) <= c.datanode_blocks()["dn3"] or c.replicate_once(), 60, "copies on dn3")

        _fill(mnt / "filler")
        gone = [k for i, k in enumerate(bodies) if i % 2]  # every other one: no pack empties (and frees its room)
        s3.delete_objects(Bucket="bkt", Delete={"Objects": [{"Key": k} for k in gone]})
        node = _wait(lambda: next((n for n in admin.call("GET", "/nodes")
                                   if n["id"] == dn3 and n["state"] == "read-only"), None), 30, "dn3 read-only")
        assert node["write_error"].startswith("IO error"), node
        for k in bodies.keys() - set(gone):  # read, from dn3 too
            assert c.read_replica("dn3", ids[k]) == bodies[k]
        assert c.procs["dn3"].poll() is None  # while the disk is full, a restart would not help: it stays

        (mnt / "filler").unlink()
        assert c.procs["dn3"].wait(timeout=30) == EXIT_RESTART
        log = (tmp_path / "logs" / "dn3.log").read_text()
        assert "the storage engine refuses every write since one failed" in log and "Traceback" not in log, log
        c.procs.pop("dn3")
        c.start_datanode(3)  # as `epochfs up` or systemd would
        _wait(lambda: next((n for n in admin.call("GET", "/nodes")
                            if n["id"] == dn3 and n["state"] == "alive" and not n["write_error"]), None),
              30, "dn3 in service again")
        _wait(lambda: not {ids[k] for k in gone} & c.datanode_blocks()["dn3"], 30, "the deletions carried out")
        s3.put_object(Bucket="bkt", Key="after", Body=b"stored")
        blk = c.nn.stat("bkt", "after").obj.blocks[0].id
        _wait(lambda: blk in c.datanode_blocks()["dn3"] or c.replicate_once(), 30, "a new copy on dn3")
        for k in bodies.keys() - set(gone):
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == bodies[k]
    finally:
        c.close()
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_sync_bucket_is_not_acknowledged_from_stale_leases_of_another_gateway(tmp_path):
    """Gateway A leases block allocations (with their acks) while bucket b is async; b is switched to sync:3
    through gateway B's admin API and a DataNode is stopped. A PUT through A, whose leases still say "one copy",
    must not be acknowledged with one copy: the NameNode refuses the commit (503, nothing visible). With all
    DataNodes back, a PUT through A is acknowledged with three copies on disk."""
    from epochfs.frontends.cli.admin import AdminClient

    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "30"}).start()
    try:
        gw2 = free_port()
        c._spawn("gw2", "epochfs.gateway", {
            "GW_HOST": "127.0.0.1", "GW_PORT": str(gw2), "GW_NAMENODE": f"127.0.0.1:{c.ports['nn'][1]}",
            "GW_CLUSTER_SECRET": SECRET, "GW_USERS": ":".join(MAIN)})
        c._wait_http(f"http://127.0.0.1:{gw2}/healthz", "gw2")
        once = c.s3()  # no retries: each refusal shows
        once.create_bucket(Bucket="bkt")
        once.put_object(Bucket="bkt", Key="warm", Body=b"w" * 1000)  # gateway A now holds leased allocations
        assert AdminClient(f"http://127.0.0.1:{gw2}", MAIN[0], MAIN[1]).call(
            "PATCH", "/buckets/bkt", {"write_policy": "sync:3"})["write_policy"] == "sync:3"

        c.stop("dn3")  # the NameNode still counts it alive: placed, but only two copies can be written
        for i in range(4):
            with pytest.raises(botocore.exceptions.ClientError) as e:
                once.put_object(Bucket="bkt", Key=f"k{i}", Body=os.urandom(1000))
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            with pytest.raises(botocore.exceptions.ClientError):
                once.head_object(Bucket="bkt", Key=f"k{i}")

        c.start_datanode(3)
        s3 = once
        for i in range(4):
            body = os.urandom(1000)
            s3.put_object(Bucket="bkt", Key=f"ok{i}", Body=body)
            blk = c.nn.stat("bkt", f"ok{i}").obj.blocks[0]
            held = [name for name, blocks in c.datanode_blocks().items() if blk.id in blocks]
            assert len(held) == 3, held  # three copies on disk when the PUT returned, no replicator pass asked
            assert s3.get_object(Bucket="bkt", Key=f"ok{i}")["Body"].read() == body
    finally:
        c.close()


def test_a_full_disk_is_503_and_the_cluster_takes_writes_again_once_it_has_room(tmp_path):
    """The whole cluster (NameNode and DataNodes) on one small tmpfs that fills up: PUTs and bucket creations are
    503 ServiceUnavailable (the DataNodes' store and the NameNode's RocksDB refuse their writes: no 500), nothing
    is half-written, and once the disk has room again every service takes writes without a restart: RocksDB
    refuses every write after a failed WAL append until it is opened again (the NameNode's StoreReopen), and a
    read-only DataNode gets no new block that would tell it otherwise (its probe, datanode/heartbeat.py). Before,
    the cluster stayed unwritable (the NameNode answered 500) until every service was restarted."""
    root = tmp_path / "fs"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", str(root)], check=True)
    (tmp_path / "logs").mkdir()
    (root / "logs").symlink_to(tmp_path / "logs")  # off the full disk: the logs checked below lose no line to it
    c = Cluster(root)
    try:
        c.start()
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="before", Body=b"kept")
        _fill(root / "filler")
        # writes meet the full disk (a few may still fit where RocksDB's WAL had room set aside): what is refused
        # is 503, what is acknowledged stays
        codes, acked, buckets, refused = set(), {}, set(), {"put": 0, "bucket": 0}
        for i in range(60):
            body = os.urandom(1000)
            for kind, call in (("put", lambda: s3.put_object(Bucket="bkt", Key=f"during{i}", Body=body)),
                               ("bucket", lambda: s3.create_bucket(Bucket=f"during{i}"))):
                try:
                    call()
                except botocore.exceptions.ClientError as e:
                    codes.add((e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]))
                    refused[kind] += 1
                    continue
                if kind == "put":
                    acked[f"during{i}"] = body
                else:
                    buckets.add(f"during{i}")
            if min(refused.values()) >= 3:
                break
        # (a refused CreateBucket is the NameNode's store refusing a write: the path StoreReopen recovers)
        assert min(refused.values()) >= 3 and codes == {(503, "ServiceUnavailable")}, (refused, codes)
        assert s3.get_object(Bucket="bkt", Key="before")["Body"].read() == b"kept"  # reads go on

        (root / "filler").unlink()

        def writes() -> bool:
            try:
                s3.put_object(Bucket="bkt", Key="after", Body=b"stored")
                s3.create_bucket(Bucket="after")
                return True
            except botocore.exceptions.ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e.response
                return False
        _wait(writes, 60, "writes taken again")
        assert s3.get_object(Bucket="bkt", Key="after")["Body"].read() == b"stored"
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="bkt")["Contents"]}
        assert keys == {"before", "after", *acked}, keys  # nothing of the refused writes
        for k, body in acked.items():
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == body
        assert {b["Name"] for b in s3.list_buckets()["Buckets"]} == {"bkt", "after", *buckets}
        for log in (root / "logs").glob("*.log"):
            text = log.read_text()
            assert "Traceback" not in text, (log, text[text.find("Traceback"):][:2000])
        # RocksDB may have resumed by itself first (its own recovery from a full disk): the StoreReopen's pass, every
        # 2 s, still opens it again and says so
        _wait(lambda: "the metadata store takes writes again" in (root / "logs" / "nn.log").read_text(), 10,
              "the NameNode's reopen")
    finally:
        c.close()
        subprocess.run(["umount", "-l", str(root)], check=False)
