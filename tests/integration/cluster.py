"""A real epochfs cluster on loopback for tests: NameNode, DataNodes and gateway as separate processes."""
from __future__ import annotations

import asyncio
import base64
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import boto3
import botocore.exceptions
import httpx
from botocore.config import Config
from epochfs.common import ports
from epochfs.common.clients import DataNodeClient, NameNodeClient
from epochfs.common.rpc import RpcClient
from epochfs.frontends.cli.main import stop_all, wait_ready

MAIN = ("EPOCHMAINKEY0000000", "epochmainsecret000000000000000000000000", "main-user-id", "main",
        "main@example.com")
ALT = ("EPOCHALTKEY00000000", "epochaltsecret0000000000000000000000000", "alt-user-id", "alt", "alt@example.com")
SECRET = "test-cluster-secret"
KMS_KEYS = "testkey-1,testkey-2"  # the KMS key ids the gateway knows (as ceph/s3-tests names them)


def free_port(span: int = 1) -> int:
    """A port nobody listens on (and the next `span - 1` too), below the kernel's ephemeral range and not handed out
    before in this run (common/ports.py says why: a CI run lost a test to EADDRINUSE)."""
    return ports.free_block(span)


class Cluster:
    def __init__(self, root: Path, *, datanodes: int = 3, block_size: int = 4 << 20, nn_env: dict | None = None,
                 dn_env: dict | None = None, gw_env: dict | None = None,
                 dn_env_for: dict[int, dict] | None = None,
                 hosts: dict[str, tuple[str, list[str]]] | None = None, free_grace_s: str | None = "0") -> None:
        """`hosts`: service name ("nn", "gw", "dn1", ...) -> (the address it binds, advertises and is reached at, a
        command prefix such as `ip netns exec NS`); by default every service runs here on 127.0.0.1.
        `free_grace_s`: NN_FREE_GRACE_S, how long the blocks of a deleted or overwritten object stay readable; none
        by default, so tests see them go at once (None: the NameNode's own default)."""
        self.root = root
        self.n_dn = datanodes
        self.block_size = block_size
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports = {"nn": (free_port(), free_port()), "gw": free_port(),
                      **{f"dn{i}": (free_port(), free_port()) for i in range(1, datanodes + 1)}}
        grace = {} if free_grace_s is None else {"NN_FREE_GRACE_S": free_grace_s}
        self.extra = {"nn": {**grace, **(nn_env or {})}, "dn": dn_env or {}, "gw": gw_env or {}}
        self.dn_env_for = dn_env_for or {}  # DataNode number -> environment of that node only
        self.hosts = hosts or {}
        self.endpoint = f"http://{self.addr('gw')}:{self.ports['gw']}"
        (root / "logs").mkdir(parents=True, exist_ok=True)

    # ---------------------------------------------------------------- processes
    def addr(self, name: str) -> str:
        return self.hosts.get(name, ("127.0.0.1", []))[0]

    def _spawn(self, name: str, module: str, env: dict) -> None:
        log = open(self.root / "logs" / f"{name}.log", "ab")
        prefix = self.hosts.get(name, ("", []))[1]
        self.procs[name] = subprocess.Popen([*prefix, sys.executable, "-m", module], env={**os.environ, **env},
                                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)

    def start_namenode(self) -> None:
        http, rpc = self.ports["nn"]
        self._spawn("nn", "epochfs.namenode", {
            "NN_HOST": self.addr("nn"), "NN_PORT": str(http), "NN_RPC_PORT": str(rpc),
            "NN_DATA_DIR": str(self.root / "nn"),
            "NN_CLUSTER_SECRET": SECRET, "NN_BLOCK_SIZE": str(self.block_size), **self.extra["nn"]})
        self._wait_http(f"http://{self.addr('nn')}:{http}/healthz", "nn")

    def start_datanode(self, i: int) -> None:
        http, rpc = self.ports[f"dn{i}"]
        self._spawn(f"dn{i}", "epochfs.datanode", {
            "DN_HOST": self.addr(f"dn{i}"), "DN_PORT": str(http), "DN_RPC_PORT": str(rpc),
            "DN_DATA_DIR": str(self.root / f"dn{i}"), "DN_CLUSTER_SECRET": SECRET,
            "DN_NAMENODE": f"{self.addr('nn')}:{self.ports['nn'][1]}",
            "DN_HEARTBEAT_INTERVAL_S": "0.3", **self.extra["dn"], **self.dn_env_for.get(i, {})})
        self._wait_http(f"http://{self.addr(f'dn{i}')}:{http}/healthz", f"dn{i}",
                        lambda j: j.get("node_id") is not None)

    def start_gateway(self) -> None:
        users = ",".join(":".join(u) for u in (MAIN, ALT))
        self._spawn("gw", "epochfs.gateway", {
            "GW_HOST": self.addr("gw"), "GW_PORT": str(self.ports["gw"]),
            "GW_NAMENODE": f"{self.addr('nn')}:{self.ports['nn'][1]}",
            "GW_CLUSTER_SECRET": SECRET, "GW_USERS": users, "GW_SSE_MASTER_KEY_FILE": str(self._master_key()),
            "GW_SSE_KMS_KEYS": KMS_KEYS, **self.extra["gw"]})
        self._wait_http(f"{self.endpoint}/healthz", "gw")

    def _master_key(self) -> Path:
        """The gateway's SSE master key, made once per cluster (a restarted gateway reads its objects again)."""
        p = self.root / "gw-master.key"
        if not p.exists():
            p.write_text(base64.b64encode(os.urandom(32)).decode())
        return p

    def start(self) -> Cluster:
        self.start_namenode()
        for i in range(1, self.n_dn + 1):
            self.start_datanode(i)
        self.start_gateway()
        return self

    def _wait_http(self, url: str, name: str, check=lambda j: True, timeout: float = 30.0) -> None:
        def exited(n: str, p) -> str:
            return f"{n} exited: {(self.root / 'logs' / (n + '.log')).read_text()[-3000:]}"
        wait_ready(url, {name: self.procs[name]}, check, timeout, exited)

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop(self, name: str) -> None:
        p = self.procs.pop(name)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self) -> None:
        """Every process stopped at once, the gateway first and the NameNode last, as `epochfs up` stops them."""
        procs, self.procs = self.procs, {}
        stop_all(procs)

    # ---------------------------------------------------------------- clients
    def s3(self, user=MAIN, **cfg):
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=user[0],
                            aws_secret_access_key=user[1], region_name="us-east-1",
                            config=Config(retries={"max_attempts": 1}, **cfg))

    @property
    def nn(self) -> "SyncNameNode":
        """The NameNode's typed client, for a test's synchronous code: `cluster.nn.stats().garbage`."""
        return SyncNameNode(self.addr("nn"), self.ports["nn"][1])

    def datanode(self, target: str, call):
        """What `call(client)` returns with the DataNodeClient of DataNode `target`, e.g.
        c.datanode("dn1", lambda dn: dn.blocks())."""
        async def go():
            dn = DataNodeClient(RpcClient(self.addr(target), self.ports[target][1], SECRET))
            try:
                return await call(dn)
            finally:
                await dn.close()
        return asyncio.run(go())

    def read_replica(self, target: str, block_id: int, offset: int = 0, length: int = -1) -> bytes:
        """The block as DataNode `target` serves it (raises CorruptBlock if its copy fails the CRC check)."""
        return bytes(self.datanode(target, lambda dn: dn.get(block_id, offset, length)))

    def node_ids(self) -> dict[str, int]:
        """DataNode name ("dn1") -> its node id, for the running DataNodes."""
        return {name: httpx.get(f"http://{self.addr(name)}:{self.ports[name][0]}/healthz").json()["node_id"]
                for name in self.procs if name.startswith("dn")}

    def datanode_blocks(self) -> dict[str, set[int]]:
        return {f"dn{i}": set(self.datanode(f"dn{i}", lambda dn: dn.blocks())) for i in range(1, self.n_dn + 1)
                if f"dn{i}" in self.procs}

    def replicate_once(self) -> None:
        for i in range(1, self.n_dn + 1):
            if f"dn{i}" in self.procs:
                self.datanode(f"dn{i}", lambda dn: dn.replicate_once())

    def collect_garbage(self, timeout: float = 10.0) -> None:
        """Expire pending allocations now, then wait until every DataNode has applied its delete orders."""
        self.nn.gc_once()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.nn.stats().garbage == 0:
                return
            time.sleep(0.1)
        raise TimeoutError("garbage not collected")


def wait_until(cond, timeout: float, what: str):
    """Poll `cond` until it returns something true (returned), failing the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (res := cond()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return res


def upload_until(s3, bucket: str, bodies: dict[str, bytes], stop: threading.Event, threads: int = 8,
                 acked: dict | None = None) -> dict[str, bytes]:
    """PUT `bodies` from `threads` threads until done or `stop`; returns the acknowledged ones."""
    acked = {} if acked is None else acked
    items = iter(list(bodies.items()))
    lock = threading.Lock()

    def worker():
        while not stop.is_set():
            with lock:
                nxt = next(items, None)
            if nxt is None:
                return
            try:
                s3.put_object(Bucket=bucket, Key=nxt[0], Body=nxt[1])
                acked[nxt[0]] = nxt[1]
            except (botocore.exceptions.ClientError, botocore.exceptions.ConnectionError):
                pass

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return acked


class SyncNameNode:
    """NameNodeClient's methods, each run to completion on a connection of its own (tests are synchronous)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def __getattr__(self, name: str):
        method = getattr(NameNodeClient, name)

        def call(*args, **kwargs):
            async def go():
                client = NameNodeClient(RpcClient(self.host, self.port, SECRET))
                try:
                    return await method(client, *args, **kwargs)
                finally:
                    await client.close()
            return asyncio.run(go())
        return call
