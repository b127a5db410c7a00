from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

import fsspec
import pytest

from epochfs.common import localread

sys.path.insert(0, str(Path(__file__).parent))
from cluster import MAIN, Cluster  # noqa: E402
from mounting import Mount  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def local_sockets():
    """The DataNodes' local sockets (common/localread.py) of every cluster the tests start, and of their readers
    (the tests' own clients and mounts, spawned with this environment), in a folder of the session's: a DataNode
    killed with -9 leaves its socket behind, and that must not stay in /run."""
    d = tempfile.mkdtemp(prefix="epochfs-sockets-")
    old = os.environ.get(localread.ENV_DIR)
    os.environ[localread.ENV_DIR] = d
    yield d
    if old is None:
        os.environ.pop(localread.ENV_DIR, None)
    else:
        os.environ[localread.ENV_DIR] = old
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("cluster")).start()
    yield c
    c.close()


@pytest.fixture
def bucket(cluster):
    name = f"t-{uuid.uuid4().hex[:12]}"
    cluster.s3().create_bucket(Bucket=name)
    return name


@pytest.fixture
def env(cluster, monkeypatch):
    """What `epochfs up` prints, so epochfs:// needs no storage options."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", cluster.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MAIN[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MAIN[1])
    fsspec.filesystem("epochfs").clear_instance_cache()
    yield
    fsspec.filesystem("epochfs").clear_instance_cache()


@pytest.fixture
def s3(cluster):
    return cluster.s3()


@pytest.fixture
def mnt(cluster, bucket, tmp_path):
    """The test's bucket mounted with short timeouts (tests/integration/mounting.py)."""
    m = Mount(cluster, bucket, tmp_path / "mnt", "--attr-timeout", "0.5", "--entry-timeout", "0.5",
              "--cache-dir", str(tmp_path / "cache"), log=tmp_path / "mount.log")
    yield m
    m.close()
