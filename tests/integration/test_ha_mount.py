"""A write-back mount through a NameNode failover: tar-like creates (batched, fsynced) go on while the active
NameNode is killed with -9; every file whose fsync returned is there afterwards, once, with its bytes, and no file is
reported unsaved. A batch create the killed NameNode had logged but not answered reaches the new leader again
(the gateway's client sends it again) and is answered as made, not refused. Real etcd (three members), three
NameNode processes, DataNodes, the gateway and a FUSE mount."""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ha import Etcd, HaCluster, HaNameNodes  # noqa: E402
from mounting import Mount, needs_fuse  # noqa: E402

pytestmark = [pytest.mark.integration, needs_fuse,
              pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd binary")]


def test_write_back_creates_survive_a_kill_9_of_the_active_namenode(tmp_path):
    etcd = Etcd(tmp_path, n=3).start()
    nns = HaNameNodes(tmp_path, etcd)
    c = m = None
    try:
        nns.start_led_by_first()
        c = HaCluster(tmp_path, nns).start()
        s3 = c.s3()
        s3.create_bucket(Bucket="wback")
        m = Mount(c, "wback", tmp_path / "mnt", "--writeback", "--cache-dir", str(tmp_path / "cache"),
                  log=tmp_path / "mnt.log")
        (m.path / "d").mkdir()
        written: dict[str, bytes] = {}
        errs: list[BaseException] = []
        stop = threading.Event()

        def unpack() -> None:
            try:
                while not stop.is_set() or len(written) < 400:
                    i = len(written)
                    name, data = f"d/f{i:05d}", os.urandom(500 + i % 4000)
                    fd = os.open(m.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    try:
                        os.write(fd, data)
                        os.fchmod(fd, 0o644)
                        if i % 10 == 9:
                            os.fsync(fd)  # waits for its create: EIO if the mount holds it unsaved
                    finally:
                        os.close(fd)
                    written[name] = data
            except BaseException as e:  # noqa: BLE001 -- reported by the test
                errs.append(e)

        worker = threading.Thread(target=unpack)
        worker.start()
        time.sleep(3)
        a = nns.active()
        at = len(written)
        nns.kill(a)
        nns.active(timeout=30, among=[i for i in nns.ports if i != a and i in nns.procs])
        time.sleep(3)
        stop.set()
        worker.join(120)
        assert not worker.is_alive() and errs == [], errs
        m.close()  # a clean unmount: every closed file is made
        log = (tmp_path / "mnt.log").read_text()
        m = None
        listed = set()
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="wback", Prefix="d/"):
            listed |= {o["Key"] for o in page.get("Contents", []) if not o["Key"].endswith("/")}
        assert listed == set(written)
        for key in list(written)[::23]:
            assert s3.get_object(Bucket="wback", Key=key)["Body"].read() == written[key]
        assert "not saved" not in log
        print(f"{len(written)} files written through a write-back mount, nn{a} killed after {at}: all made once")
    finally:
        if m is not None:
            m.close()
        if c is not None:
            c.close()
        nns.close()
        etcd.close()
