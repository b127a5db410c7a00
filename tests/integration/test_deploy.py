"""deploy/: env samples in step with the settings classes, manifests that parse and say what they should, and the
multi-host proof: each service in its own network namespace with its own address, configured only from the env
samples (addresses, data directories and credentials substituted), and an S3 round trip with boto3 across them."""
from __future__ import annotations

import configparser
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import httpx
import pytest
import yaml
from botocore.config import Config
from epochfs.datanode.config import DataNodeSettings
from epochfs.frontends.cli.main import wait_ready
from epochfs.gateway.config import GatewaySettings
from epochfs.namenode.config import NameNodeSettings
from netns import hosts_or_skip

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
SERVICES = {"namenode": NameNodeSettings, "datanode": DataNodeSettings, "gateway": GatewaySettings}


def read_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd's EnvironmentFile reads them (comments on their own lines)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            k, sep, v = line.partition("=")
            assert sep and "#" not in v, f"{path.name}: {line!r}"
            out[k.strip()] = v
    return out


@pytest.mark.parametrize("service", SERVICES)
def test_env_sample_lists_every_option_with_its_default(service):
    cls = SERVICES[service]
    env = read_env(DEPLOY / f"{service}.env.sample")
    prefix = cls.model_config["env_prefix"]
    assert set(env) == {prefix + n.upper() for n in cls.model_fields}
    lines = (DEPLOY / f"{service}.env.sample").read_text().splitlines()
    for name, field in cls.model_fields.items():
        key = prefix + name.upper()
        i = next(i for i, line in enumerate(lines) if line.startswith(key + "="))
        assert lines[i - 1].startswith("# "), f"{key} has no comment"
        parsed = cls.model_validate({name: env[key]}) if env[key] != "" else None
        if parsed is not None:
            assert getattr(parsed, name) == field.default or str(getattr(parsed, name)) == str(field.default), key


def test_compose_and_kubernetes_manifests():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert set(compose["services"]) == {"namenode", "datanode1", "datanode2", "datanode3", "gateway"}
    for name, svc in compose["services"].items():
        assert svc["command"][0] in SERVICES
        for f in svc.get("env_file", []):
            assert (DEPLOY / f"{f}.sample").exists()  # compose reads the operator's copy of the sample
    docs = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("StatefulSet", "epochfs-namenode"), ("StatefulSet", "epochfs-datanode"), ("Deployment", "epochfs-gateway"),
            ("Service", "epochfs-gateway"), ("Secret", "epochfs")} <= kinds
    for d in docs:
        if d["kind"] == "StatefulSet":
            assert d["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
            mounts = d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            assert mounts[0]["name"] == "data"
        if d["kind"] in ("StatefulSet", "Deployment"):
            c = d["spec"]["template"]["spec"]["containers"][0]
            assert c["args"][0] in SERVICES
            env = {e["name"] for e in c["env"]}
            prefix = SERVICES[c["args"][0]].model_config["env_prefix"]
            assert env - {"POD_NAME"} <= {prefix + n.upper() for n in SERVICES[c["args"][0]].model_fields}
    assert "ENTRYPOINT [\"epochfs\"]" in (DEPLOY / "Dockerfile").read_text()


@pytest.mark.parametrize("service", SERVICES)
def test_systemd_unit(service):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd" / f"epochfs-{service}.service")
    assert unit["Service"]["ExecStart"].endswith(f"epochfs {service}")
    assert unit["Service"]["EnvironmentFile"] == f"/etc/epochfs/{service}.env"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


# ---------------------------------------------------------------- multi-host, in network namespaces
SUBNET = "10.231.77"
HOSTS = {"namenode": 2, "datanode1": 3, "datanode2": 4, "datanode3": 5, "gateway": 6}
USER = ("NETNSADMINKEY0000", "netns-secret-000000000000")


@pytest.fixture
def hosts():
    with hosts_or_skip(SUBNET, HOSTS) as h:
        yield h


def _service_env(service: str, name: str, data: Path) -> dict[str, str]:
    """The env sample with this host's address, a data directory, the NameNode's address and credentials put in."""
    env = read_env(DEPLOY / f"{service}.env.sample")
    addr, nn = f"{SUBNET}.{HOSTS[name]}", f"{SUBNET}.{HOSTS['namenode']}"
    prefix = SERVICES[service].model_config["env_prefix"]
    env[prefix + "HOST"] = addr
    env[prefix + "DATA_DIR"] = str(data / name)
    env[prefix + "CLUSTER_SECRET"] = "netns-cluster-secret"
    if service != "namenode":
        env[prefix + "NAMENODE"] = f"{nn}:{read_env(DEPLOY / 'namenode.env.sample')['NN_RPC_PORT']}"
    if service == "datanode":
        env["DN_HEARTBEAT_INTERVAL_S"] = "0.3"
    if service == "gateway":
        env["GW_USERS"] = ":".join(USER)
    return env


@pytest.mark.integration
def test_multi_host_round_trip_in_network_namespaces(hosts, tmp_path):
    procs: dict[str, subprocess.Popen] = {}
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    try:
        for name in HOSTS:
            service = name.rstrip("0123456789")
            log = open(tmp_path / f"{name}.log", "wb")
            procs[name] = subprocess.Popen(
                [*hosts.exec_prefix(name), sys.executable, "-m", f"epochfs.{service}"],
                env={**base, **_service_env(service, name, tmp_path)}, stdout=log, stderr=log,
                stdin=subprocess.DEVNULL)
            if name == "namenode":
                wait_ready(f"http://{SUBNET}.{HOSTS['namenode']}:9870/healthz", procs)
        wait_ready(f"http://{SUBNET}.{HOSTS['namenode']}:9870/healthz", procs, lambda j: j.get("nodes") == 3)
        endpoint = f"http://{SUBNET}.{HOSTS['gateway']}:9000"
        wait_ready(f"{endpoint}/healthz", procs)

        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=USER[0], aws_secret_access_key=USER[1],
                          region_name="us-east-1", config=Config(retries={"max_attempts": 2}))
        s3.create_bucket(Bucket="netns")
        body = os.urandom(5 << 20)  # two blocks: placed on different hosts
        s3.put_object(Bucket="netns", Key="data/blob", Body=body)
        assert s3.get_object(Bucket="netns", Key="data/blob")["Body"].read() == body
        deadline = time.monotonic() + 20  # the secondaries' copies arrive asynchronously
        while True:
            nodes = httpx.get(f"{endpoint}/admin/v1/nodes", auth=USER).json()
            if all(n["blocks"] == 2 for n in nodes) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted(n["address"].split(":")[0] for n in nodes) == [f"{SUBNET}.{HOSTS[f'datanode{i}']}"
                                                                      for i in (1, 2, 3)]
        assert [n["blocks"] for n in nodes] == [2, 2, 2]  # 3 replicas of each block, one per host
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
