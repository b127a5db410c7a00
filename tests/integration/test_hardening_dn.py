"""Hardening of the DataNode and the internal RPC (issue 18), through real processes on loopback: frames announced
by an unauthenticated peer are refused before anything is buffered, a client leaving mid-read leaves no stray
errors, and a replica corrupted inside RocksDB's own files is read around, reported, repaired and counted by a
scrub job."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

import orjson
import pytest
from cluster import SECRET, Cluster, wait_until as _wait

pytestmark = pytest.mark.integration

MiB = 1 << 20


def rss(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS")


def frame(head: dict, payload_len: int = 0) -> bytes:
    j = orjson.dumps(head)
    return struct.pack(">II", len(j), payload_len) + j


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Does the peer close the connection within `timeout` (whatever we keep sending meanwhile)?"""
    sock.settimeout(timeout)
    try:
        return sock.recv(1 << 16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("target", ["nn", "dn1"])
def test_unauthenticated_gigabyte_frame_is_refused_before_buffering(cluster, target):
    pid = cluster.procs[target].pid
    port = cluster.ports[target][1]
    before = rss(pid)
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as s:
        # no hello, no secret: a request frame announcing a 1 GiB payload, then as much of it as the server takes
        s.sendall(frame({"op": "put", "block_id": 1, "crc": 0}, 1 << 30))
        s.settimeout(5)
        chunk = bytes(1 << 20)
        try:
            while sent < 256 * MiB:
                s.sendall(chunk)
                sent += len(chunk)
        except (ConnectionResetError, BrokenPipeError, socket.timeout):
            pass
        assert sent < 256 * MiB, "the server kept reading the payload of an unauthenticated frame"
    grown = rss(pid) - before
    assert grown < 8 * MiB, f"{target} grew by {grown >> 20} MiB from one unauthenticated connection"
    if target == "nn":
        assert cluster.nn.stats().garbage >= 0  # still serving
    else:
        assert isinstance(cluster.datanode(target, lambda dn: dn.blocks()), list)  # still serving


@pytest.mark.parametrize("target", ["nn", "dn1"])
def test_silent_or_oversized_hello_is_closed(cluster, target):
    port = cluster.ports[target][1]
    with socket.create_connection(("127.0.0.1", port)) as s:  # says nothing at all
        assert closed_by_peer(s, 20), "a connection that never says hello stays open"
    with socket.create_connection(("127.0.0.1", port)) as s:  # a hello whose JSON is announced as 60 MiB
        s.sendall(struct.pack(">II", 60 * MiB, 0))
        assert closed_by_peer(s, 5)


def test_client_leaving_mid_read_leaves_no_unretrieved_future(cluster, bucket, s3):
    data = os.urandom(4 * MiB)  # one bulk block, read in one 4 MiB reply
    s3.put_object(Bucket=bucket, Key="big", Body=data)
    blk = cluster.nn.stat(bucket, "big").obj.blocks[0]
    holder = next(name for name, nid in cluster.node_ids().items() if nid == blk.nodes[0])
    port = cluster.ports[holder][1]
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(frame({"op": "hello", "secret": SECRET}))
        s.recv(64)
        s.sendall(frame({"op": "get", "block_id": blk.id}))
        s.recv(1024)  # the start of the reply, then leave with the rest unread
        time.sleep(0.05)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, as a killed client
        s.close()
    assert cluster.read_replica(holder, blk.id) == data  # keeps serving
    time.sleep(1.0)
    log = (cluster.root / "logs" / f"{holder}.log").read_text()
    assert "Future exception was never retrieved" not in log
    assert "Task exception was never retrieved" not in log


# ---------------------------------------------------------------- corruption inside the store's files
def _store_flip(c: Cluster, dn: str, bodies: list[bytes]) -> None:
    """With DataNode `dn` stopped: have its RocksDB write everything to SST files (recovered from the WAL and
    flushed), then flip bytes in the middle of each body where it lies in those files or in the node's packs
    (small blocks written since 2026-11-27), as a rotting disk would."""
    from epochfs.common.kv import RocksKV
    kv = RocksKV.open(c.root / dn / "blocks", bulk=True)
    kv.flush_memtables()
    kv.close()
    ssts = sorted((c.root / dn / "blocks").glob("*.sst")) + sorted((c.root / dn / "blocks.files" / "packs").iterdir())
    for body in bodies:
        needle = body[5000:5064]
        for f in ssts:
            raw = bytearray(f.read_bytes())
            at = raw.find(needle)
            if at >= 0:
                raw[at + 10:at + 14] = bytes(b ^ 0x5A for b in raw[at + 10:at + 14])
                f.write_bytes(bytes(raw))
                break
        else:
            raise AssertionError("a body is not in any SST or pack file")


def _replica_ok(c: Cluster, dn: str, block_id: int, data: bytes) -> bool:
    from epochfs.common import errors
    try:
        return c.read_replica(dn, block_id) == data
    except errors.DomainError:
        return False


def test_store_corruption_is_a_bad_replica_read_around_reported_repaired_and_scrubbed(tmp_path):
    """Small objects (one 110 KiB block each, in the DataNodes' packs) with their bytes flipped inside one
    DataNode's files, so that its chunk CRC32Cs fail (RocksDB's `Corruption: block checksum mismatch` where a
    store still has them in SST files): S3 GETs
    and direct (tokened) reads get the right bytes from other replicas, each bad copy is reported and repaired back
    to three good ones, and a scrub job checks every block and counts the bad ones instead of stopping at them."""
    from epochfs.common.blocks import pick_replica
    from epochfs.common.client import S3Client
    from epochfs.frontends.cli.admin import AdminClient
    from cluster import MAIN

    c = Cluster(tmp_path, nn_env={"NN_HEARTBEAT_TIMEOUT_S": "10", "NN_REPAIR_INTERVAL_S": "0.2"},
                dn_env={"DN_SCRUB_BYTES_PER_S": "0"}).start()
    try:
        s3 = c.s3()
        s3.create_bucket(Bucket="bkt")
        data = {f"k{i:02d}": os.urandom(110 << 10) for i in range(40)}
        for k, v in data.items():
            s3.put_object(Bucket="bkt", Key=k, Body=v)
        blks = {k: c.nn.stat("bkt", k).obj.blocks[0] for k in data}
        _wait(lambda: c.replicate_once() or all(
            all(b.id in held for held in c.datanode_blocks().values()) for b in blks.values()), 30, "replication")
        ids = c.node_ids()
        victim = "dn1"
        vid = ids[victim]
        addrs = {str(n): f"127.0.0.1:{c.ports[name][1]}" for name, n in ids.items()}
        s3_read = [k for k in data if blks[k].nodes[0] == vid][:3]  # the gateway reads the primary first
        direct = [k for k in data if k not in s3_read and
                  pick_replica(blks[k].id, blks[k].nodes, addrs) == addrs[str(vid)]][:2]  # a direct read goes there
        scrubbed = [k for k in data if k not in s3_read + direct][:3]  # nobody reads these
        assert len(s3_read) == 3 and len(direct) == 2 and len(scrubbed) == 3
        c.stop(victim)
        _store_flip(c, victim, [data[k] for k in s3_read + direct + scrubbed])
        c.start_datanode(1)
        for k in s3_read + direct + scrubbed:
            assert not _replica_ok(c, victim, blks[k].id, data[k])  # the store refuses it: the corruption is real

        for k in s3_read:
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == data[k]

        async def direct_reads():
            async with S3Client(c.endpoint, MAIN[0], MAIN[1]) as cl:
                plan = await cl.locate([("bkt", k, None, None) for k in direct])
                pieces = [p for item in plan.items for p in item.pieces]
                assert [pick_replica(p.id, p.nodes, plan.addrs) for p in pieces] == [addrs[str(vid)]] * len(direct)
                return [bytes(b) for b in await cl.read_pieces(pieces, plan.addrs, plan.grant)]
        assert asyncio.run(direct_reads()) == [data[k] for k in direct]

        for k in s3_read + direct:  # reported (by the gateway; by the DataNode for direct reads) and repaired
            _wait(lambda: _replica_ok(c, victim, blks[k].id, data[k]), 30, f"the repair of {k}")
        for k in scrubbed:
            assert not _replica_ok(c, victim, blks[k].id, data[k])  # nobody read these: still bad

        admin = AdminClient(c.endpoint, MAIN[0], MAIN[1])
        started = admin.call("POST", "/jobs", {"kind": "scrub"})
        done = _wait(lambda: next((j for j in admin.call("GET", "/jobs") if j["id"] == started["id"]
                                   and j["state"] != "running"), None), 60, "the scrub job")
        assert done["state"] == "done", done
        part = done["detail"]["parts"][str(vid)]
        assert part["blocks"] == len(data) and part["bad"] == len(scrubbed), part
        assert done["detail"]["blocks"] == 3 * len(data) and done["detail"]["bad"] == len(scrubbed), done["detail"]
        for k in scrubbed:
            _wait(lambda: _replica_ok(c, victim, blks[k].id, data[k]), 30, f"the scrub's repair of {k}")
        for k, v in data.items():  # three good copies of everything, in the same replica sets
            blk = c.nn.stat("bkt", k).obj.blocks[0]
            assert len(set(blk.nodes)) == 3
            for name, nid in ids.items():
                if nid in blk.nodes:
                    assert _replica_ok(c, name, blk.id, v), (k, name)
            assert s3.get_object(Bucket="bkt", Key=k)["Body"].read() == v
    finally:
        c.close()
