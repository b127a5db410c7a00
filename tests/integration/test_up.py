"""`epochfs up`: prints exports a script can eval, serves S3, stops cleanly on SIGTERM, finds its data again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import boto3
import pytest
from cluster import ephemeral_low


def free_port() -> int:
    """A gateway port whose next 16 ports (the other services of `epochfs up`) are free too, below the ephemeral
    range (cluster.free_port says why)."""
    import random
    import socket
    while True:
        base = random.randint(10000, ephemeral_low() - 18)
        try:
            socks = []
            for p in range(base, base + 17):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()

pytestmark = pytest.mark.integration


def start_up(data_dir, port, env=None):
    p = subprocess.Popen([sys.executable, "-m", "epochfs.frontends.cli.main", "up", "--data-dir", str(data_dir),
                          "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, **(env or {})})
    line = p.stdout.readline()
    if not line.startswith("export AWS_ENDPOINT_URL="):
        p.kill()
        pytest.fail(f"epochfs up printed {line!r}; stderr: {p.stderr.read()}")
    exports = dict(kv.split("=", 1) for kv in line.split()[1:])
    return p, exports


def children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out


def client(exports):
    return boto3.client("s3", endpoint_url=exports["AWS_ENDPOINT_URL"], aws_access_key_id=exports["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=exports["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


def test_up_serves_stops_and_restarts_with_its_data(tmp_path):
    port = free_port()
    p, exports = start_up(tmp_path / "data", port)
    try:
        assert exports["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{port}"
        kids = children(p.pid)
        assert len(kids) == 5  # NameNode, 3 DataNodes, gateway
        s3 = client(exports)
        s3.create_bucket(Bucket="kept")
        s3.put_object(Bucket="kept", Key="a/b", Body=b"survives restarts")
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    for k in kids:
        assert not os.path.exists(f"/proc/{k}") or open(f"/proc/{k}/stat").read().split()[2] == "Z"

    p, again = start_up(tmp_path / "data", port)
    try:
        assert again == exports  # the same credentials
        assert client(again).get_object(Bucket="kept", Key="a/b")["Body"].read() == b"survives restarts"
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=30) == 0


def test_up_takes_the_root_key_from_the_environment(tmp_path):
    p, exports = start_up(tmp_path / "data", free_port(),
                          env={"AWS_ACCESS_KEY_ID": "MYROOTKEY", "AWS_SECRET_ACCESS_KEY": "my-root-secret"})
    try:
        assert exports["AWS_ACCESS_KEY_ID"] == "MYROOTKEY"
        assert exports["AWS_SECRET_ACCESS_KEY"] == "my-root-secret"
        client(exports).create_bucket(Bucket="mine")
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
