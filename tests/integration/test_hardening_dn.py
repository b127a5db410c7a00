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
from cluster import SECRET, Cluster

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
    assert "err" not in cluster.rpc(target, "stats" if target == "nn" else "blocks")  # still serving


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
    blk = cluster.rpc("nn", "stat", bucket=bucket, key="big")["obj"]["blk"][0]
    holder = next(name for name, nid in cluster.node_ids().items() if nid == blk[3][0])
    port = cluster.ports[holder][1]
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(frame({"op": "hello", "secret": SECRET}))
        s.recv(64)
        s.sendall(frame({"op": "get", "block_id": blk[0]}))
        s.recv(1024)  # the start of the reply, then leave with the rest unread
        time.sleep(0.05)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset, as a killed client
        s.close()
    assert cluster.read_replica(holder, blk[0]) == data  # keeps serving
    time.sleep(1.0)
    log = (cluster.root / "logs" / f"{holder}.log").read_text()
    assert "Future exception was never retrieved" not in log
    assert "Task exception was never retrieved" not in log
