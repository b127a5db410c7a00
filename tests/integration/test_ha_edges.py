"""The gateway given several NameNodes (HA, issue 16), against a real cluster: a standby (an RpcServer in this test
answering NotLeader to every namespace call, as namenode/ha's standbys do) is listed first, the real NameNode second.
The gateway follows the redirect, counts it in /metrics, shows both in /admin/v1/ha and `epochfs admin status`, and
answers 503 ServiceUnavailable (S3) / 503 (admin API), never 500, while no NameNode will serve; boto3 and the aws
CLI retry that 503 until the NameNode is back."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time

import botocore.exceptions
import httpx
import pytest

from cluster import MAIN, SECRET, Cluster, free_port, wait_until
from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.rpc import RpcServer

pytestmark = pytest.mark.integration


def all_requests(cls=m.Request) -> list[type]:
    """Every request of the contract (common/messages.py): not the ones tests define for themselves, which a
    whole-suite run may have imported (tests/unit/test_rpc_trio.py's Echo, twice under two module names)."""
    out = []
    for sub in cls.__subclasses__():
        if sub.__module__ == m.__name__:
            out.append(sub)
        out.extend(all_requests(sub))
    return out


class Standby:
    """A standby NameNode on its own event loop: NotLeader(leader=`leader`) to everything but ha_status."""

    def __init__(self) -> None:
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.leader = ""
        self.members: list[m.HaMember] = []
        self.calls = 0
        handlers = {t: self._not_leader for t in all_requests() if t is not m.HaStatus}
        handlers[m.HaStatus] = self._ha_status
        self.server = RpcServer(handlers, SECRET)
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self.server.start("127.0.0.1", self.port), self.loop).result(5)

    async def _not_leader(self, req, payload):
        self.calls += 1
        raise errors.NotLeader("this NameNode is a standby", leader=self.leader)

    async def _ha_status(self, req, payload):
        return m.HaState(mode="etcd", name="sb", role="standby", epoch=4, leader=self.leader, log_end=12,
                         members=self.members, etcd=[{"endpoint": "http://127.0.0.1:2379", "healthy": True,
                                                      "leader": True, "db_size": 20480, "revision": 99}])

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture(scope="module")
def ha(tmp_path_factory):
    sb = Standby()
    c = Cluster(tmp_path_factory.mktemp("ha-edges"))
    real = f"127.0.0.1:{c.ports['nn'][1]}"
    sb.leader = real
    sb.members = [m.HaMember(name="sb", addr=sb.addr, role="standby", applied=10),
                  m.HaMember(name="nn", addr=real, role="active", applied=12)]
    c.extra["gw"] = {"GW_NAMENODE": f"{sb.addr},{real}", "GW_NAMENODE_RETRY_S": "1.5"}
    c.start()
    yield c, sb, real
    c.close()
    sb.stop()


def metric(c: Cluster, name: str) -> float:
    for line in httpx.get(f"{c.endpoint}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def admin(c: Cluster, path: str) -> httpx.Response:
    return httpx.get(f"{c.endpoint}/admin/v1/{path}", auth=(MAIN[0], MAIN[1]), timeout=30)


def test_gateway_follows_the_redirect_and_reports_it(ha):
    c, sb, real = ha
    s3 = c.s3()
    s3.create_bucket(Bucket="ha-edges")
    s3.put_object(Bucket="ha-edges", Key="k", Body=b"v")
    assert s3.get_object(Bucket="ha-edges", Key="k")["Body"].read() == b"v"
    assert sb.calls >= 1  # the first call went to the standby, which sent it on
    assert metric(c, "epochfs_namenode_client_redirects_total") >= 1
    assert metric(c, "epochfs_namenode_client_moves_total") >= 1
    assert f'epochfs_gateway_namenode{{address="{real}"}} 1.0' in httpx.get(f"{c.endpoint}/metrics").text

    h = admin(c, "ha").json()
    assert h["mode"] == "etcd" and h["epoch"] == 4 and h["leader"] == real and h["log_end"] == 12
    by_addr = {n["address"]: n for n in h["namenodes"]}
    assert by_addr[real]["role"] == "active" and by_addr[real]["current"] and by_addr[real]["reachable"]
    assert by_addr[sb.addr]["role"] == "standby" and by_addr[sb.addr]["lag"] == 2
    assert h["etcd"][0]["healthy"] and h["gateway_redirects"] >= 1

    env = {**os.environ, "AWS_ENDPOINT_URL": c.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1]}
    out = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", "status"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "epoch 4" in out.stdout and "active" in out.stdout and "standby" in out.stdout
    assert "healthy" in out.stdout and "health" in out.stdout  # the summary table is there too


def test_no_namenode_serving_is_503_never_500_and_clients_retry_it(ha):
    c, sb, real = ha
    s3 = c.s3()
    s3.create_bucket(Bucket="ha-down")
    sb.leader = ""  # an election under way: the standby knows no leader ...
    c.stop("nn")  # ... and the old active one is gone
    try:
        for call in (lambda: s3.list_buckets(), lambda: s3.put_object(Bucket="ha-down", Key="x", Body=b"1"),
                     lambda: s3.get_object(Bucket="ha-down", Key="x"),
                     lambda: s3.list_objects_v2(Bucket="ha-down")):
            t0 = time.monotonic()
            with pytest.raises(botocore.exceptions.ClientError) as e:
                call()
            err = e.value.response
            assert err["ResponseMetadata"]["HTTPStatusCode"] == 503, err
            assert err["Error"]["Code"] == "ServiceUnavailable"
            assert time.monotonic() - t0 < 10  # within the gateway's retry time, not a hang
        r = admin(c, "nodes")
        assert r.status_code == 503, r.text
        h = admin(c, "ha").json()  # the status route still answers, naming who is unreachable
        assert {n["address"]: n["role"] for n in h["namenodes"]}[real] == "unreachable"

        # the aws CLI (default retries) during the failover: the NameNode comes back within its retries
        env = {**os.environ, "AWS_ENDPOINT_URL": c.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
               "AWS_SECRET_ACCESS_KEY": MAIN[1], "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "10"}
        cli = subprocess.Popen(["aws", "s3api", "put-object", "--bucket", "ha-down", "--key", "cli", "--body",
                                "/etc/hostname"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2.0)
        sb.leader = real
        c.start_namenode()
        out, err = cli.communicate(timeout=120)
        assert cli.returncode == 0, err
    finally:
        sb.leader = real
        if "nn" not in c.procs:
            c.start_namenode()
    wait_until(lambda: _ok(lambda: s3.head_object(Bucket="ha-down", Key="cli")), 30, "the object the CLI wrote")


def _ok(call) -> bool:
    try:
        call()
        return True
    except botocore.exceptions.ClientError:
        return False
