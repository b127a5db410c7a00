"""A simulated power cut loses nothing acknowledged (issue 16), embedded and HA: the NameNode's data folder on LazyFS
(github.com/dsrhaslab/lazyfs, the FUSE file system Jepsen uses: it keeps written data in its own cache until fsync,
and `lazyfs::clear-cache` drops what was never synced, as a power cut drops the page cache). Under a load of 16
concurrent writers the NameNode is killed (-9), LazyFS's unsynced data dropped, the NameNode restarted on what is
left: every object it acknowledged is there.

LazyFS is built outside the repository (never committed): clone it into /tmp, build libs/libpcache and lazyfs
(cmake, g++, libfuse3-dev; libspdlog-dev and libtoml11-dev where its CMake cannot download them), and point
EPOCHFS_LAZYFS at the `lazyfs` binary (default /tmp/lazyfs/lazyfs/build/lazyfs)."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cluster import SECRET, free_port  # noqa: E402
from ha import Etcd, HaNameNodes  # noqa: E402

from epochfs.common import errors  # noqa: E402
from epochfs.common import messages as m  # noqa: E402
from epochfs.common.clients import NameNodeClient  # noqa: E402
from epochfs.common.rpc import RpcClient  # noqa: E402

pytestmark = pytest.mark.integration
EMPTY = '"d41d8cd98f00b204e9800998ecf8427e"'


def lazyfs_binary() -> str:
    path = os.environ.get("EPOCHFS_LAZYFS", "/tmp/lazyfs/lazyfs/build/lazyfs")
    if not os.access(path, os.X_OK):
        pytest.skip(f"LazyFS not found at {path} (build github.com/dsrhaslab/lazyfs in /tmp and set EPOCHFS_LAZYFS)")
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        pytest.skip("no FUSE here (/dev/fuse, fusermount3)")
    return path


class LazyFS:
    """A LazyFS mount at `mnt` over the folder `root`; `clear_cache()` drops every write not fsynced."""

    def __init__(self, binary: str, base: Path) -> None:
        self.root, self.mnt = base / "lazyfs-root", base / "lazyfs-mnt"
        self.root.mkdir()
        self.mnt.mkdir()
        self.fifo, self.done = base / "faults.fifo", base / "faults-done.fifo"
        os.mkfifo(self.fifo)
        os.mkfifo(self.done)
        # LazyFS takes the argument after --config-path for an option when it contains "-o" (any case), as
        # pytest's /tmp/pytest-of-root/... does: the config then goes in a folder of its own without a hyphen
        self.config_dir = tempfile.mkdtemp(prefix="lazyfs", dir="/tmp")
        config = Path(self.config_dir) / "lazyfs.toml"
        config.write_text(f'[faults]\nfifo_path="{self.fifo}"\nfifo_path_completed="{self.done}"\n'
                          '[cache]\napply_eviction=false\n[cache.simple]\ncustom_size="1gb"\nblocks_per_page=1\n'
                          '[filesystem]\nlog_all_operations=false\nlogfile=""\n')
        self.log = open(base / "lazyfs.log", "wb")
        self.proc = subprocess.Popen([binary, str(self.mnt), "--config-path", str(config), "-o", "allow_other",
                                      "-o", "modules=subdir", "-o", f"subdir={self.root}", "-f"],
                                     stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.ismount(self.mnt):
            assert self.proc.poll() is None, (base / "lazyfs.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "LazyFS did not mount"
            time.sleep(0.1)

    def clear_cache(self) -> None:
        """Drop the unsynced data, and wait until LazyFS says it is done."""
        done = []
        reader = threading.Thread(target=lambda: done.append(open(self.done).readline()), daemon=True)  # LazyFS keeps it open
        reader.start()
        with open(self.fifo, "w") as f:
            f.write("lazyfs::clear-cache\n")
        reader.join(30)
        assert done and "clear-cache" in done[0], done

    def close(self) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, timeout=30, check=False)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.config_dir, ignore_errors=True)


@pytest.fixture
def lazyfs(tmp_path):
    fs = LazyFS(lazyfs_binary(), tmp_path)
    # the tool does what the test relies on: a write never fsynced is gone after clear-cache, a synced one stays
    (fs.mnt / "unsynced").write_bytes(b"x" * 10_000)
    with open(fs.mnt / "synced", "wb") as f:
        f.write(b"y" * 10_000)
        f.flush()
        os.fsync(f.fileno())
    fs.clear_cache()
    assert (fs.mnt / "synced").read_bytes() == b"y" * 10_000
    assert not (fs.mnt / "unsynced").exists() or (fs.mnt / "unsynced").read_bytes() != b"x" * 10_000
    yield fs
    fs.close()


def load(client: NameNodeClient, bucket: str, acked: list[str], stop: threading.Event, prefix: str) -> None:
    """16 concurrent writers of 0-byte objects until `stop`; each key is added to `acked` once its put returned."""
    async def go():
        n = iter(range(1 << 30))

        async def writer():
            while not stop.is_set():
                k = f"{prefix}/{next(n):07d}"
                try:
                    await client.put_object(bucket, k, m.ObjectRecord(size=0, etag=EMPTY, owner="alice"))
                except errors.DomainError:  # the NameNode went away: unacknowledged, and the writer stops
                    return
                acked.append(k)
        try:
            await asyncio.gather(*(writer() for _ in range(16)))
        finally:
            await client.close()
    asyncio.run(go())


def listed(client_factory, bucket: str) -> set[str]:
    async def go():
        c = client_factory()
        try:
            out, after = [], ""
            while True:
                page = await c.list_objects(bucket, after=after)
                out += [e.key for e in page.items]
                if not page.truncated:
                    return set(out)
                after = out[-1]
        finally:
            await c.close()
    return asyncio.run(go())


def test_embedded_namenode_power_cut_loses_nothing_acknowledged(lazyfs, tmp_path):
    http, rpc = free_port(), free_port()
    data = lazyfs.mnt / "nn"
    env = {**os.environ, "NN_HOST": "127.0.0.1", "NN_PORT": str(http), "NN_RPC_PORT": str(rpc),
           "NN_DATA_DIR": str(data), "NN_CLUSTER_SECRET": SECRET, "NN_FREE_GRACE_S": "0"}

    def start() -> subprocess.Popen:
        log = open(tmp_path / "nn.log", "ab")
        p = subprocess.Popen([sys.executable, "-m", "epochfs.namenode"], env=env, stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            assert p.poll() is None, (tmp_path / "nn.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{http}/healthz", timeout=1).status_code == 200:
                    return p
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the NameNode did not come up"
            time.sleep(0.1)

    def client() -> NameNodeClient:
        return NameNodeClient(RpcClient("127.0.0.1", rpc, SECRET, timeout=10))

    nn = start()
    try:
        async def mk():
            c = client()
            await c.bucket_create("cut", owner="alice")
            await c.close()
        asyncio.run(mk())
        acked: list[str] = []
        stop = threading.Event()
        t = threading.Thread(target=load, args=(client(), "cut", acked, stop, "w"))
        t.start()
        time.sleep(3)
        nn.send_signal(signal.SIGKILL)  # the power goes: the process first, then what it had not synced
        nn.wait()
        n = len(acked)
        lazyfs.clear_cache()
        stop.set()
        t.join(30)
        assert n > 100, f"only {n} writes acknowledged under load"
        nn = start()
        have = listed(client, "cut")
        lost = sorted(set(acked) - have)
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged objects lost, e.g. {lost[:5]}"
        print(f"\nembedded power cut: {len(acked)} acknowledged puts, none lost ({len(have)} listed)")
    finally:
        nn.send_signal(signal.SIGKILL)
        nn.wait()


@pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd binary (apt-get install etcd-server)")
def test_ha_active_namenode_power_cut_loses_nothing_acknowledged(lazyfs, tmp_path):
    """nn1 starts alone on LazyFS and becomes the active one; the two standbys on plain folders. Under load it is
    killed and its unsynced data dropped; the load moves to the new leader; nn1 restarts on what is left and rejoins
    as a standby with the same store as the others."""
    etcd = Etcd(tmp_path).start()
    nns = HaNameNodes(tmp_path, etcd)
    (lazyfs.mnt / "nn1").mkdir()
    os.symlink(lazyfs.mnt / "nn1", tmp_path / "nn1")
    try:
        nns.start(1)
        assert nns.active() == 1
        nns.start(2)
        nns.start(3)
        addrs = ",".join(nns.addr(i) for i in (1, 2, 3))

        def client() -> NameNodeClient:
            return NameNodeClient.connect(addrs, SECRET, timeout=10, retry_s=30)
        nns.call(1, lambda c: c.bucket_create("cut", owner="alice"))
        acked: list[str] = []
        stop = threading.Event()
        t = threading.Thread(target=load, args=(client(), "cut", acked, stop, "w"))
        t.start()
        time.sleep(3)
        nns.kill(1)
        n = len(acked)
        lazyfs.clear_cache()
        time.sleep(3)  # the load goes on through the new leader
        stop.set()
        t.join(60)
        assert n > 100, f"only {n} writes acknowledged under load before the cut"
        assert len(acked) > n, "no write acknowledged by the new leader"
        nns.start(1)
        a = nns.active(among=[2, 3])
        nns.caught_up(60)
        assert nns.status(1).role == "standby"
        have = listed(client, "cut")
        lost = sorted(set(acked) - have)
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged objects lost, e.g. {lost[:5]}"
        assert nns.dump(1) == nns.dump(a), "nn1's store after the power cut differs from the active one's"
        print(f"\nHA power cut of the active NameNode: {len(acked)} acknowledged puts ({n} before the cut), none lost")
    finally:
        nns.close()
        etcd.close()
