"""A real HA metadata cluster on loopback for tests: etcd members (the Debian binary) and NameNodes in HA mode, as
separate processes, each NameNode reached directly with its own typed client (no DataNodes or gateway)."""
from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

from cluster import SECRET, Cluster, free_port
from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.kv import RocksKV
from epochfs.common.rpc import RpcClient
from epochfs.namenode.ha.etcd import Etcd as EtcdClient


def wait_stopped(pid: int, timeout: float = 5.0) -> None:
    """Wait until every thread of process `pid` is stopped (SIGSTOP takes effect a moment after it is sent)."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass  # a thread that ended meanwhile
        if states and all(s in "tT" for s in states):
            return
        assert time.monotonic() < deadline, f"process {pid} not stopped: {states}"
        time.sleep(0.01)


class Etcd:
    """n etcd members in one cluster, each killable and restartable."""

    def __init__(self, root: Path, n: int = 1) -> None:
        self.root, self.n = root, n
        self.ports = [(free_port(), free_port()) for _ in range(n)]
        self.procs: dict[int, subprocess.Popen] = {}
        self.cluster = ",".join(f"e{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(self.ports))
        (root / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def endpoints(self) -> str:
        return ",".join(f"http://127.0.0.1:{c}" for c, _ in self.ports)

    def endpoint(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i][0]}"

    def start(self, i: int | None = None) -> "Etcd":
        for j in ([i] if i is not None else range(self.n)):
            c, p = self.ports[j]
            log = open(self.root / "logs" / f"etcd{j}.log", "ab")
            self.procs[j] = subprocess.Popen(
                ["etcd", "--name", f"e{j}", "--data-dir", str(self.root / f"etcd{j}"),
                 "--listen-client-urls", f"http://127.0.0.1:{c}", "--advertise-client-urls", f"http://127.0.0.1:{c}",
                 "--listen-peer-urls", f"http://127.0.0.1:{p}", "--initial-advertise-peer-urls",
                 f"http://127.0.0.1:{p}", "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
                 "--heartbeat-interval", "50", "--election-timeout", "500", "--max-request-bytes", str(8 << 20)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.ctl("endpoint", "health", check=False).returncode == 0:
                return self
            time.sleep(0.2)
        raise TimeoutError("etcd not healthy")

    def ctl(self, *args: str, check: bool = True, members: list[int] | None = None) -> subprocess.CompletedProcess:
        """etcdctl against the running members (or those of `members`)."""
        eps = ",".join(f"127.0.0.1:{c}" for j, (c, _) in enumerate(self.ports)
                       if j in self.procs and (members is None or j in members))
        return subprocess.run(["etcdctl", "--endpoints", eps, "--command-timeout=3s", *args], capture_output=True,
                              text=True, check=check, env={**os.environ, "ETCDCTL_API": "3"})

    def status(self) -> dict[int, dict]:
        """Each running member's `etcdctl endpoint status` (its member_id, the raft leader's id...), by index."""
        sts = json.loads(self.ctl("endpoint", "status", "--write-out=json").stdout)
        port = {str(c): j for j, (c, _) in enumerate(self.ports)}
        return {port[st["Endpoint"].rsplit(":", 1)[1]]: st["Status"] for st in sts}

    def raft_leader(self) -> int | None:
        """The index of the member that leads etcd's raft (None: none known)."""
        return next((j for j, st in self.status().items() if st["leader"] == st["header"]["member_id"]), None)

    def step_down(self, i: int) -> None:
        """Make sure member i does not lead etcd's raft (its leadership moved to another member if it does)."""
        if self.raft_leader() != i:
            return
        target = next(st for j, st in self.status().items() if j != i)["header"]["member_id"]
        self.ctl("move-leader", f"{target:x}", members=[i])
        HaNameNodes.wait(lambda: self.raft_leader() not in (i, None), 10, f"etcd member {i} no longer leading")

    def kill(self, i: int) -> None:
        p = self.procs.pop(i)
        p.kill()
        p.wait()

    def call(self, fn):
        """fn(a NameNode's etcd client of every member: namenode/ha/etcd.py) run to completion."""
        async def go():
            cl = EtcdClient(self.endpoints)
            try:
                return await fn(cl)
            finally:
                await cl.close()
        return asyncio.run(go())

    def close(self) -> None:
        for i in list(self.procs):
            self.kill(i)


class HaNameNodes:
    """NameNodes nn1..nnN in HA mode over one etcd cluster."""

    def __init__(self, root: Path, etcd: Etcd, n: int = 3, *, ttl: float = 2.0, env: dict | None = None,
                 env_for: dict[int, dict] | None = None) -> None:
        """`env_for`: NameNode number -> environment of that one only (NN_ETCD_ENDPOINTS of one etcd member, say)."""
        self.root, self.etcd, self.n, self.ttl = root, etcd, n, ttl
        self.ports = {i: (free_port(), free_port()) for i in range(1, n + 1)}
        self.procs: dict[int, subprocess.Popen] = {}
        self.prefix = f"/t{os.getpid()}-{free_port()}"
        self.env = env or {}
        self.env_for = env_for or {}

    def start(self, i: int | None = None) -> "HaNameNodes":
        for j in ([i] if i is not None else range(1, self.n + 1)):
            http, rpc = self.ports[j]
            log = open(self.root / "logs" / f"nn{j}.log", "ab")
            self.procs[j] = subprocess.Popen(
                [sys.executable, "-m", "epochfs.namenode"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                env={**os.environ, "NN_HOST": "127.0.0.1", "NN_PORT": str(http), "NN_RPC_PORT": str(rpc),
                     "NN_DATA_DIR": str(self.root / f"nn{j}"), "NN_CLUSTER_SECRET": SECRET, "NN_NAME": f"nn{j}",
                     "NN_ETCD_ENDPOINTS": self.etcd.endpoints, "NN_ETCD_PREFIX": self.prefix,
                     "NN_LEASE_TTL_S": str(self.ttl), "NN_FREE_GRACE_S": "0", **self.env, **self.env_for.get(j, {})})
        for j in ([i] if i is not None else range(1, self.n + 1)):
            self.wait(lambda: self._healthy(j), 30, f"nn{j} up")
        return self

    def start_led_by_first(self) -> "HaNameNodes":
        """nn1 alone until it leads, then the others: a known active one."""
        self.start(1)
        assert self.active(among=[1]) == 1
        for j in range(2, self.n + 1):
            self.start(j)
        return self

    def _healthy(self, j: int) -> bool:
        if self.procs[j].poll() is not None:
            raise RuntimeError(f"nn{j} exited: {(self.root / 'logs' / f'nn{j}.log').read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{self.ports[j][0]}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def signal(self, i: int, sig: int) -> None:
        self.procs[i].send_signal(sig)

    def kill(self, i: int) -> None:
        p = self.procs.pop(i)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def close(self) -> None:
        for i, p in list(self.procs.items()):
            p.send_signal(signal.SIGCONT)
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    # ---------------------------------------------------------------- calls
    def addr(self, i: int) -> str:
        return f"127.0.0.1:{self.ports[i][1]}"

    def call(self, i: int, fn, timeout: float = 10.0):
        """fn(NameNodeClient of nn i) run to completion."""
        async def go():
            c = NameNodeClient(RpcClient("127.0.0.1", self.ports[i][1], SECRET, timeout=timeout), follow=False)
            try:
                return await fn(c)
            finally:
                await c.close()
        return asyncio.run(go())

    def status(self, i: int) -> m.HaState:
        return self.call(i, lambda c: c.rpc.request(m.HaStatus()))[0]

    def active(self, timeout: float = 20.0, among=None) -> int:
        """The number of the active NameNode (waits for one)."""
        def find():
            for i in (among or list(self.procs)):
                try:
                    if self.status(i).role == "active":
                        return i
                except errors.DomainError:
                    pass
            return 0
        return self.wait(find, timeout, "an active NameNode")

    def caught_up(self, timeout: float = 20.0) -> int:
        """Wait until every running NameNode applied the whole log; the log's end."""
        def done():
            sts = [self.status(i) for i in self.procs]
            end = max(s.log_end for s in sts)
            ok = all({mm.name: mm.applied for mm in s.members}.get(f"nn{i}", -1) >= end
                     for s, i in zip(sts, self.procs)) if sts else False
            return end if ok and end else 0
        return self.wait(done, timeout, "every NameNode applied the log")

    def dump(self, i: int) -> dict[bytes, bytes]:
        """NameNode i's whole store, key by key, read from a checkpoint it serves."""
        r = httpx.get(f"http://127.0.0.1:{self.ports[i][0]}/internal/checkpoint", headers={"x-epochfs-secret": SECRET},
                      timeout=60)
        r.raise_for_status()
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
                t.extractall(tmp, filter="data")
            kv = RocksKV.open(tmp)
            try:
                return dict(kv.scan(b""))
            finally:
                kv.close()

    @staticmethod
    def wait(cond, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while not (res := cond()):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)
        return res


class HaCluster(Cluster):
    """DataNodes and a gateway over an HA trio of NameNodes (started by the test), each given all three."""

    def __init__(self, root: Path, nns: HaNameNodes) -> None:
        addrs = ",".join(nns.addr(i) for i in sorted(nns.ports))
        super().__init__(root, dn_env={"DN_NAMENODE": addrs}, gw_env={"GW_NAMENODE": addrs})

    def start(self) -> "HaCluster":
        for i in range(1, self.n_dn + 1):
            self.start_datanode(i)
        self.start_gateway()
        return self
