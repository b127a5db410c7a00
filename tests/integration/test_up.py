"""`epochfs up`: prints exports a script can eval, serves S3, stops cleanly on SIGTERM, finds its data again."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import boto3
import pytest
from cluster import free_port

UP_PORTS = 17  # `epochfs up --port P` uses P to P + 16 (P + 26 with --ha)


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
    port = free_port(UP_PORTS)
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
    p, exports = start_up(tmp_path / "data", free_port(UP_PORTS),
                          env={"AWS_ACCESS_KEY_ID": "MYROOTKEY", "AWS_SECRET_ACCESS_KEY": "my-root-secret"})
    try:
        assert exports["AWS_ACCESS_KEY_ID"] == "MYROOTKEY"
        assert exports["AWS_SECRET_ACCESS_KEY"] == "my-root-secret"
        client(exports).create_bucket(Bucket="mine")
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0


def test_up_ha_runs_etcd_three_namenodes_and_stops_them_all(tmp_path):
    """`epochfs up --ha`: a 3-member etcd (Debian's etcd binary), 3 NameNodes given its endpoints, 3 DataNodes and
    the gateway given every NameNode; S3 works, `epochfs admin status` lists the 3 NameNodes, `epochfs down` stops
    all ten processes."""
    import json
    import shutil
    import time

    import httpx
    from epochfs.frontends.cli.main import cluster_ports
    if not shutil.which("etcd") and not os.path.exists("/usr/bin/etcd"):
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    data, port = tmp_path / "data", free_port(UP_PORTS + 10)
    cli = [sys.executable, "-m", "epochfs.frontends.cli.main"]
    r = subprocess.run([*cli, "up", "--ha", "--detach", "--data-dir", str(data), "--port", str(port)],
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr + (data / "up.out").read_text()
    exports = dict(kv.split("=", 1) for kv in r.stdout.strip().splitlines()[0].split()[1:])
    up_pid = int((data / "up.pid").read_text())
    ports = cluster_ports(port, ha=True)
    try:
        kids = children(up_pid)
        assert len(kids) == 10  # 3 etcd, 3 NameNodes, 3 DataNodes, gateway
        cmdlines = [open(f"/proc/{k}/cmdline").read().split("\0") for k in kids]
        etcds = [c for c in cmdlines if c[0].endswith("etcd")]
        assert len(etcds) == 3 and all(str(data) in " ".join(c) for c in etcds)
        for client_port, _ in ports["etcd"]:  # every member healthy: the cluster has its quorum
            assert httpx.get(f"http://127.0.0.1:{client_port}/health", timeout=5).json()["health"] == "true"
        endpoints = ",".join(f"http://127.0.0.1:{c}" for c, _ in ports["etcd"])
        nn_addrs = ",".join(f"127.0.0.1:{rpc}" for _, rpc in ports["nn"])
        envs = [dict(kv.split("=", 1) for kv in open(f"/proc/{k}/environ").read().split("\0") if "=" in kv)
                for k in kids]
        nn_envs = [e for e in envs if "NN_DATA_DIR" in e]
        assert sorted(e["NN_NAME"] for e in nn_envs) == ["nn1", "nn2", "nn3"]
        assert all(e["NN_ETCD_ENDPOINTS"] == endpoints and e["NN_ADVERTISE_HOST"] == "127.0.0.1" for e in nn_envs)
        assert len({e["NN_DATA_DIR"] for e in nn_envs}) == 3
        assert [e["DN_NAMENODE"] for e in envs if "DN_DATA_DIR" in e] == [nn_addrs] * 3
        assert [e["GW_NAMENODE"] for e in envs if "GW_PORT" in e] == [nn_addrs]

        s3 = client(exports)
        s3.create_bucket(Bucket="ha-up")
        s3.put_object(Bucket="ha-up", Key="k", Body=b"kept")
        assert s3.get_object(Bucket="ha-up", Key="k")["Body"].read() == b"kept"
        st = subprocess.run([*cli, "admin", "status"], env={**os.environ, **exports}, capture_output=True, text=True,
                            timeout=60)
        assert st.returncode == 0, st.stderr
        for _, rpc in ports["nn"]:
            assert f"127.0.0.1:{rpc}" in st.stdout
        roles = [n["role"] for n in httpx.get(f"{exports['AWS_ENDPOINT_URL']}/admin/v1/ha", timeout=30, auth=(
            exports["AWS_ACCESS_KEY_ID"], exports["AWS_SECRET_ACCESS_KEY"])).json()["namenodes"]]
        # each NameNode embedded (no HA in the NameNode yet), or one active and two standbys
        assert sorted(roles) in (["embedded"] * 3, ["active", "standby", "standby"]), roles
    finally:
        down = subprocess.run([*cli, "down", "--data-dir", str(data)], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    deadline = time.monotonic() + 30
    for k in kids:
        while os.path.exists(f"/proc/{k}") and open(f"/proc/{k}/stat").read().split()[2] != "Z":
            assert time.monotonic() < deadline, f"process {k} still runs after epochfs down"
            time.sleep(0.1)
    assert not (data / "up.pid").exists()
    json.loads((data / "cluster.json").read_text())  # the cluster's secret is kept for the next `up --ha`
    # the same data directory without --ha would show an empty namespace: refused, saying why
    r = subprocess.run([*cli, "up", "--data-dir", str(data), "--port", str(port)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and "started with --ha" in r.stderr and not (data / "namenode").exists()
