"""deploy/: env samples in step with the settings classes, manifests that parse and say what they should, and the
multi-host proof: each service in its own network namespace with its own address, configured only from the env
samples (addresses, data directories and credentials substituted), and an S3 round trip with boto3 across them."""
from __future__ import annotations

import configparser
import os
import shutil
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


# The NameNode's HA settings and their defaults, as docs/ha-design fixes them (issue 16). The NameNode's settings
# class gains them with namenode/ha; until then the sample lists them ahead of it (and the check below of every
# option's default covers them once the class has them).
NN_HA_SETTINGS = {"etcd_endpoints": "", "name": "", "advertise_host": "", "lease_ttl_s": "2.0",
                  "etcd_prefix": "/epochfs"}


@pytest.mark.parametrize("service", SERVICES)
def test_env_sample_lists_every_option_with_its_default(service):
    cls = SERVICES[service]
    env = read_env(DEPLOY / f"{service}.env.sample")
    prefix = cls.model_config["env_prefix"]
    ahead = set()
    if service == "namenode":
        for name, default in NN_HA_SETTINGS.items():
            assert env.get(f"NN_{name.upper()}") == default, name
        ahead = {f"NN_{n.upper()}" for n in NN_HA_SETTINGS if n not in cls.model_fields}
    assert set(env) - ahead == {prefix + n.upper() for n in cls.model_fields}
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
    services = compose["services"]
    assert set(services) == {"etcd1", "etcd2", "etcd3", "namenode1", "namenode2", "namenode3", "datanode1",
                             "datanode2", "datanode3", "gateway"}
    for name, svc in services.items():
        if name.startswith("etcd"):
            continue
        assert svc["command"][0] in SERVICES
        for f in svc.get("env_file", []):
            assert (DEPLOY / f"{f}.sample").exists()  # compose reads the operator's copy of the sample
    # etcd: 3 members that all name each other; the NameNodes list every member and have names of their own
    etcd = {n: services[n]["environment"] for n in ("etcd1", "etcd2", "etcd3")}
    peers = ",".join(f"{e['ETCD_NAME']}={e['ETCD_INITIAL_ADVERTISE_PEER_URLS']}" for e in etcd.values())
    assert all(e["ETCD_INITIAL_CLUSTER"] == peers for e in etcd.values())
    assert all(f"/{services[n]['volumes'][0].split(':')[1].strip('/')}" == e["ETCD_DATA_DIR"] for n, e in etcd.items())
    clients = ",".join(e["ETCD_ADVERTISE_CLIENT_URLS"] for e in etcd.values())
    nns = {n: services[n]["environment"] for n in ("namenode1", "namenode2", "namenode3")}
    assert all(e["NN_ETCD_ENDPOINTS"] == clients for e in nns.values())
    assert len({e["NN_NAME"] for e in nns.values()}) == 3
    rpc = read_env(DEPLOY / "namenode.env.sample")["NN_RPC_PORT"]
    everyone = ",".join(f"{e['NN_ADVERTISE_HOST']}:{rpc}" for e in nns.values())
    assert set(nns) == {e["NN_ADVERTISE_HOST"] for e in nns.values()}  # reachable by their service names
    for n in ("datanode1", "datanode2", "datanode3"):
        assert services[n]["environment"]["DN_NAMENODE"] == everyone
    assert services["gateway"]["environment"]["GW_NAMENODE"] == everyone
    docs = [d for f in sorted((DEPLOY / "k8s").glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {("StatefulSet", "epochfs-namenode"), ("StatefulSet", "epochfs-datanode"), ("Deployment", "epochfs-gateway"),
            ("Service", "epochfs-gateway"), ("Secret", "epochfs")} <= kinds
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert ("StatefulSet", "epochfs-etcd") in by_name
    for name in ("epochfs-etcd", "epochfs-namenode"):  # headless; members reach each other before they are ready
        svc = by_name[("Service", name)]["spec"]
        assert svc["clusterIP"] == "None" and svc["publishNotReadyAddresses"] is True
        assert by_name[("StatefulSet", name)]["spec"]["replicas"] == 3
        assert by_name[("StatefulSet", name)]["spec"]["serviceName"] == name

    def env_of(kind_name):
        c = by_name[kind_name]["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in c["env"]}
    etcd_env = env_of(("StatefulSet", "epochfs-etcd"))
    assert etcd_env["ETCD_INITIAL_CLUSTER"] == ",".join(
        f"epochfs-etcd-{i}=http://epochfs-etcd-{i}.epochfs-etcd:2380" for i in range(3))
    nn_env = env_of(("StatefulSet", "epochfs-namenode"))
    assert nn_env["NN_ETCD_ENDPOINTS"] == ",".join(f"http://epochfs-etcd-{i}.epochfs-etcd:2379" for i in range(3))
    assert nn_env["NN_NAME"] == "$(POD_NAME)" and nn_env["NN_ADVERTISE_HOST"] == "$(POD_NAME).epochfs-namenode"
    everyone = ",".join(f"epochfs-namenode-{i}.epochfs-namenode:9871" for i in range(3))
    assert env_of(("StatefulSet", "epochfs-datanode"))["DN_NAMENODE"] == everyone
    assert env_of(("Deployment", "epochfs-gateway"))["GW_NAMENODE"] == everyone
    for d in docs:
        if d["metadata"]["name"] == "epochfs-etcd":
            continue
        if d["kind"] == "StatefulSet":
            assert d["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
            mounts = d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            assert mounts[0]["name"] == "data"
        if d["kind"] in ("StatefulSet", "Deployment"):
            c = d["spec"]["template"]["spec"]["containers"][0]
            assert c["args"][0] in SERVICES
            env = {e["name"] for e in c["env"]}
            prefix = SERVICES[c["args"][0]].model_config["env_prefix"]
            ha = {f"NN_{n.upper()}" for n in NN_HA_SETTINGS} if prefix == "NN_" else set()
            assert env - {"POD_NAME"} - ha <= {prefix + n.upper() for n in SERVICES[c["args"][0]].model_fields}
    assert "ENTRYPOINT [\"epochfs\"]" in (DEPLOY / "Dockerfile").read_text()


@pytest.mark.parametrize("service", SERVICES)
def test_systemd_unit(service):
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd" / f"epochfs-{service}.service")
    assert unit["Service"]["ExecStart"].endswith(f"epochfs {service}")
    assert unit["Service"]["EnvironmentFile"] == f"/etc/epochfs/{service}.env"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_etcd_unit_and_env_sample():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(DEPLOY / "systemd" / "epochfs-etcd.service")
    assert unit["Service"]["ExecStart"] == "/usr/bin/etcd"  # Debian's etcd-server
    assert unit["Service"]["EnvironmentFile"] == "/etc/epochfs/etcd.env"
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    nn = configparser.ConfigParser(strict=False, interpolation=None)
    nn.read(DEPLOY / "systemd" / "epochfs-namenode.service")
    assert "epochfs-etcd.service" in nn["Unit"]["After"]
    env = read_env(DEPLOY / "etcd.env.sample")
    assert env["ETCD_INITIAL_CLUSTER"].count("=http://") == 3 and env["ETCD_NAME"] in env["ETCD_INITIAL_CLUSTER"]
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(etcd):
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    flags = subprocess.run([etcd, "--help"], capture_output=True, text=True, timeout=30)
    for key in env:  # etcd reads ETCD_X for its flag --x: each variable is one etcd 3.4 knows
        assert f"--{key[5:].lower().replace('_', '-')} " in flags.stdout + flags.stderr, key


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
