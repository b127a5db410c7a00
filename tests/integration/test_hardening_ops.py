"""Operations hardening (issue 18): `epochfs up` restarts a child that dies instead of stopping the cluster; the
well-known default cluster secret is refused beyond loopback; /metrics can require a token; deploy/ ships no
default credentials."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from cluster import Cluster, free_port as free_service_port
from epochfs.common.config import DEFAULT_SECRET
from epochfs.frontends.cli.main import cluster_ports, wait_ready
from test_up import children, client, free_port, start_up

pytestmark = pytest.mark.integration
CLI = [sys.executable, "-m", "epochfs.frontends.cli.main"]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def eventually(fn, timeout: float = 90.0):
    """fn() once it stops raising (a service coming back), or its last error after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def child_pids(up_pid: int) -> dict[str, int]:
    """`epochfs up`'s children by service name (namenode, datanodeN, gateway), from their environment."""
    out = {}
    for pid in children(up_pid):
        try:
            env = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in kv)
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                continue
        except (OSError, ValueError):
            continue
        if "GW_PORT" in env:
            out["gateway"] = pid
        elif "DN_DATA_DIR" in env:
            out[Path(env["DN_DATA_DIR"]).name] = pid
        elif "NN_DATA_DIR" in env:
            out["namenode"] = pid
    return out


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_up_restarts_each_child_killed_and_keeps_its_data(tmp_path):
    """kill -9 of a DataNode, then the gateway, then the NameNode: each comes back, S3 works again, what was written
    before is intact, the log says so, and `epochfs down` stops everything."""
    data, port = tmp_path / "data", free_port()
    r = subprocess.run([*CLI, "up", "--detach", "--data-dir", str(data), "--port", str(port)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    exports = dict(kv.split("=", 1) for kv in r.stdout.strip().splitlines()[0].split()[1:])
    up_pid = int((data / "up.pid").read_text())
    ports = cluster_ports(port)
    health = {"namenode": f"http://127.0.0.1:{ports['nn_http']}/healthz",
              "datanode1": f"http://127.0.0.1:{ports['dn'][0][0]}/healthz",
              "gateway": f"http://127.0.0.1:{ports['gateway']}/healthz"}
    try:
        s3 = client(exports)
        s3.create_bucket(Bucket="kept")
        s3.put_object(Bucket="kept", Key="before", Body=b"written before the faults")
        written = {"before": b"written before the faults"}
        for name in ("datanode1", "gateway", "namenode"):
            old = child_pids(up_pid)[name]
            os.kill(old, signal.SIGKILL)
            new = eventually(lambda: next(p for n, p in child_pids(up_pid).items() if n == name and p != old))
            assert not gone(up_pid), f"epochfs up stopped after {name} was killed"
            wait_ready(health[name], {}, timeout=60)
            wait_ready(health["namenode"], {}, lambda j: j.get("nodes", 0) >= 3, timeout=60)
            body = f"written after {name} came back".encode()
            eventually(lambda: s3.put_object(Bucket="kept", Key=f"after-{name}", Body=body))
            written[f"after-{name}"] = body
            for key, want in written.items():
                assert eventually(lambda: s3.get_object(Bucket="kept", Key=key)["Body"].read()) == want
            assert child_pids(up_pid)[name] == new
        log = (data / "up.out").read_text()
        for name in ("datanode1", "gateway", "namenode"):
            assert re.search(rf"{name} exited with code -9 .*restarting it in 0\.5 s", log), log
            assert re.search(rf"{name} restarted \(pid \d+\)", log), log
        assert "stopping the cluster" not in log
        kids = children(up_pid)
        assert len(kids) == 5
    finally:
        down = subprocess.run([*CLI, "down", "--data-dir", str(data)], capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stderr
    assert gone(up_pid)
    for k in kids:
        assert gone(k)


def test_up_logs_each_crash_backs_off_and_stops_while_a_restart_is_pending(tmp_path):
    """A DataNode that crashes at once on every start is logged each time with a growing delay, the rest of the
    cluster keeps serving, and SIGINT during a pending restart stops everything cleanly (exit 0, no child left)."""
    data, port = tmp_path / "data", free_port()
    p, exports = start_up(data, port)
    lines: list[str] = []

    def read_stderr():
        for line in p.stderr:
            lines.append(line)
    threading.Thread(target=read_stderr, daemon=True).start()
    kids = []
    try:
        s3 = client(exports)
        s3.create_bucket(Bucket="kept")
        s3.put_object(Bucket="kept", Key="k", Body=b"still here")
        kids = children(p.pid)
        # the DataNode's data directory becomes a plain file: each start fails at once
        os.rename(data / "datanode2", data / "datanode2.moved")
        (data / "datanode2").write_text("not a directory")
        os.kill(child_pids(p.pid)["datanode2"], signal.SIGKILL)

        def crashes() -> list[float]:
            return [float(m.group(1)) for line in list(lines)
                    if (m := re.search(r"datanode2 exited with code -?\d+.*restarting it in ([0-9.]+) s", line))]
        deadline = time.monotonic() + 120
        while len(crashes()) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        delays = crashes()
        assert delays[:4] == [0.5, 1.0, 2.0, 4.0], "".join(lines)
        assert p.poll() is None
        # the rest of the cluster serves meanwhile
        assert eventually(lambda: s3.get_object(Bucket="kept", Key="k")["Body"].read()) == b"still here"
        # a restart is pending (the next one in at least 4 s): stop now
        restarts_before = sum("datanode2 restarted" in line for line in lines)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    time.sleep(0.5)
    assert sum("datanode2 restarted" in line for line in lines) == restarts_before
    for k in kids:
        assert gone(k)


# ---------------------------------------------------------------- the default cluster secret

def _service_env(prefix: str, host: str, tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NN_", "DN_", "GW_"))}
    env.update({f"{prefix}HOST": host, f"{prefix}PORT": str(free_service_port()),
                f"{prefix}RPC_PORT": str(free_service_port()), f"{prefix}DATA_DIR": str(tmp_path / prefix)})
    env.update(extra)
    return env


@pytest.mark.parametrize("service,prefix", [("namenode", "NN_"), ("datanode", "DN_")])
@pytest.mark.parametrize("secret", [None, DEFAULT_SECRET, ""])
def test_default_secret_is_refused_beyond_loopback(tmp_path, service, prefix, secret):
    extra = {} if secret is None else {f"{prefix}CLUSTER_SECRET": secret}
    p = subprocess.Popen([sys.executable, "-m", f"epochfs.{service}"],
                         env=_service_env(prefix, "0.0.0.0", tmp_path, **extra), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail(f"the {service} kept running on 0.0.0.0 with the default cluster secret")
    assert p.returncode != 0
    assert f"{prefix}CLUSTER_SECRET" in err and "0.0.0.0" in err, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("service,prefix", [("namenode", "NN_"), ("datanode", "DN_"), ("gateway", "GW_")])
def test_default_secret_on_loopback_warns(tmp_path, service, prefix):
    extra = {"GW_USERS": "AKEY:asecret"} if service == "gateway" else {}
    env = _service_env(prefix, "127.0.0.1", tmp_path, **extra)
    log = tmp_path / "service.log"
    with open(log, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", f"epochfs.{service}"], env=env, stdout=f, stderr=f,
                             stdin=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{env[prefix + 'PORT']}/healthz", {service: p}, timeout=60)
        text = log.read_text()
        assert re.search(r"level=warning .*default cluster secret", text, re.I), text
        assert f"{prefix}CLUSTER_SECRET" in text
    finally:
        p.terminate()
        p.wait(timeout=30)


def test_up_generates_a_secret_so_nothing_warns(tmp_path):
    """`epochfs up` needs no configuration: its random per-data-dir secret is no default, so no service warns."""
    data = tmp_path / "data"
    p, _ = start_up(data, free_port())
    try:
        secret = __import__("json").loads((data / "cluster.json").read_text())["secret"]
        assert secret != DEFAULT_SECRET and len(secret) >= 32
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    for name in ("namenode", "datanode1", "gateway"):
        assert "default cluster secret" not in (data / "logs" / f"{name}.log").read_text()


# ---------------------------------------------------------------- /metrics behind a token

def test_metrics_token(tmp_path):
    token = "scrape-token-0123456789"
    c = Cluster(tmp_path, datanodes=1, nn_env={"NN_METRICS_TOKEN": token}, dn_env={"DN_METRICS_TOKEN": token},
                gw_env={"GW_METRICS_TOKEN": token})
    try:
        c.start()
        s3 = c.s3()
        s3.create_bucket(Bucket="secret-bucket-name")
        urls = {"namenode": f"http://127.0.0.1:{c.ports['nn'][0]}/metrics",
                "datanode": f"http://127.0.0.1:{c.ports['dn1'][0]}/metrics", "gateway": f"{c.endpoint}/metrics"}
        for name, url in urls.items():
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Bearer {token}x"}):
                r = httpx.get(url, headers=headers)
                assert r.status_code == 401, (name, headers, r.status_code)
                assert "epochfs_" not in r.text and "secret-bucket-name" not in r.text
                assert "bearer" in r.headers["www-authenticate"].lower()
            r = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and "epochfs_" in r.text, name
            assert httpx.get(url, auth=("prometheus", token)).status_code == 200, name
            assert httpx.get(url, auth=("prometheus", "nope")).status_code == 401, name
        assert "secret-bucket-name" in httpx.get(urls["namenode"], headers={"Authorization": f"Bearer {token}"}).text
        assert httpx.get(f"{c.endpoint}/healthz").status_code == 200  # health checks need no token
        s3.create_bucket(Bucket="metrics")  # signed requests still reach a bucket named like the route
        s3.put_object(Bucket="metrics", Key="k", Body=b"v")
        assert s3.get_object(Bucket="metrics", Key="k")["Body"].read() == b"v"
    finally:
        c.close()


def test_metrics_without_token_stays_open(cluster):
    assert httpx.get(f"{cluster.endpoint}/metrics").status_code == 200


# ---------------------------------------------------------------- deploy/: no shipped credentials

def test_deploy_reads_edited_env_files_and_ships_no_credentials():
    compose_text = (DEPLOY / "compose.yaml").read_text()
    compose = yaml.safe_load(compose_text)
    for name, svc in compose["services"].items():
        if name.startswith("etcd"):  # etcd's image, configured inline: no secrets (its clients are the NameNodes)
            assert "env_file" not in svc and svc["image"].startswith("quay.io/coreos/etcd:"), name
        else:
            service = svc["command"][0]
            assert svc["env_file"] == [f"{service}.env"], name  # the operator's copy, not the sample
            assert (DEPLOY / f"{service}.env.sample").exists()
        for k, v in (svc.get("environment") or {}).items():
            assert not k.endswith(("USERS", "CLUSTER_SECRET", "METRICS_TOKEN")), (name, k, v)
    assert "change-this" not in compose_text and DEFAULT_SECRET not in compose_text
    for f in (DEPLOY / "k8s").glob("*.yaml"):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc["kind"] == "Secret":
                for k, v in (doc.get("stringData") or {}).items():
                    assert v == "", (f.name, k)  # to be filled in (or created with kubectl), never a default
    assert "deploy/*.env" in (DEPLOY.parent / ".gitignore").read_text().split()
