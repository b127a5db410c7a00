"""The aws CLI (v1, default settings) against a real cluster: a tree of 1,000 small files and one 200 MiB file goes up
with `aws s3 sync`, is listed, comes back down with `aws s3 sync`, and must be identical byte for byte."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from cluster import MAIN

pytestmark = pytest.mark.integration

MIB = 1 << 20
N_SMALL = 1000
BIG_SIZE = 200 * MIB


def make_tree(root: Path, seed: int = 7) -> dict[str, str]:
    """1,000 small files (1 B - 20 KiB) in folders three levels deep, some names with spaces, and one 200 MiB file.
    Returns {relative path: sha256}."""
    rng = random.Random(seed)
    hashes = {}
    for i in range(N_SMALL):
        a, b, c = i % 5, (i // 5) % 4, (i // 20) % 3
        rel = Path(f"top {a}" if a % 2 else f"top{a}", f"mid-{b}", f"leaf {c}" if c == 1 else f"leaf{c}",
                  f"file {i}.bin" if i % 7 == 0 else f"file_{i}.dat")
        data = rng.randbytes(rng.randint(1, 20 * 1024))
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        hashes[rel.as_posix()] = hashlib.sha256(data).hexdigest()
    big = root / "big files" / "blob 200MiB.bin"
    big.parent.mkdir()
    h = hashlib.sha256()
    with open(big, "wb") as f:
        for _ in range(BIG_SIZE // (8 * MIB)):
            chunk = os.urandom(8 * MIB)
            h.update(chunk)
            f.write(chunk)
    hashes["big files/blob 200MiB.bin"] = h.hexdigest()
    return hashes


def tree_hashes(root: Path) -> dict[str, str]:
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                while chunk := f.read(8 * MIB):
                    h.update(chunk)
            out[p.relative_to(root).as_posix()] = h.hexdigest()
    return out


@pytest.fixture
def aws(cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=cluster.endpoint, AWS_ACCESS_KEY_ID=MAIN[0], AWS_SECRET_ACCESS_KEY=MAIN[1],
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=str(tmp_path / "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"), AWS_MAX_ATTEMPTS="1")

    def run(*args: str, timeout: float = 600) -> str:
        p = subprocess.run([sys.executable, "-m", "awscli", *args], env=env, capture_output=True, text=True,
                           timeout=timeout, cwd=tmp_path)
        assert p.returncode == 0, \
            f"aws {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p.stdout
    return run


def test_sync_round_trip(cluster, aws, tmp_path):
    tree, down = tmp_path / "tree", tmp_path / "down"
    expected = make_tree(tree)
    bucket = f"cli-{uuid.uuid4().hex[:12]}"

    aws("s3", "mb", f"s3://{bucket}")
    out = aws("s3", "sync", str(tree), f"s3://{bucket}/tree", "--no-progress")
    assert out.count("upload: ") == N_SMALL + 1

    listing = [line for line in aws("s3", "ls", "--recursive", f"s3://{bucket}/tree/").splitlines() if line.strip()]
    assert len(listing) == N_SMALL + 1
    names = sorted(line.split(None, 3)[3] for line in listing)
    assert names == sorted(f"tree/{k}" for k in expected)
    sizes = {line.split(None, 3)[3]: int(line.split(None, 3)[2]) for line in listing}
    assert sizes["tree/big files/blob 200MiB.bin"] == BIG_SIZE

    # the CLI uploads the big file in 8 MiB parts: S3's multipart ETag, md5 of the part md5s, "-25"
    s3 = cluster.s3()
    head = s3.head_object(Bucket=bucket, Key="tree/big files/blob 200MiB.bin")
    md5s = b""
    with open(tree / "big files" / "blob 200MiB.bin", "rb") as f:
        while chunk := f.read(8 * MIB):
            md5s += hashlib.md5(chunk).digest()
    assert head["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-{BIG_SIZE // (8 * MIB)}"'

    # a second sync finds nothing to do: sizes match and LastModified is not older than the local files
    assert "upload: " not in aws("s3", "sync", str(tree), f"s3://{bucket}/tree", "--no-progress")

    out = aws("s3", "sync", f"s3://{bucket}/tree", str(down), "--no-progress")
    assert out.count("download: ") == N_SMALL + 1
    assert tree_hashes(down) == expected
    assert "download: " not in aws("s3", "sync", f"s3://{bucket}/tree", str(down), "--no-progress")

    # a single file up and down with cp
    single = tree / "top 1" / "mid-0" / "leaf0" / "file_1.dat"
    aws("s3", "cp", str(single), f"s3://{bucket}/single/copy of file.dat", "--no-progress")
    aws("s3", "cp", f"s3://{bucket}/single/copy of file.dat", str(tmp_path / "single.out"), "--no-progress")
    assert (tmp_path / "single.out").read_bytes() == single.read_bytes()
    aws("s3", "cp", f"s3://{bucket}/tree/big files/blob 200MiB.bin", str(tmp_path / "big.out"), "--no-progress")
    assert tree_hashes(tmp_path)["big.out"] == expected["big files/blob 200MiB.bin"]

    out = aws("s3", "rm", "--recursive", f"s3://{bucket}/tree")
    assert out.count("delete: ") == N_SMALL + 1
    assert aws("s3", "ls", "--recursive", f"s3://{bucket}/").split(None, 3)[3].strip() == "single/copy of file.dat"
    aws("s3", "rm", f"s3://{bucket}/single/copy of file.dat")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    aws("s3", "rb", f"s3://{bucket}")
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]

    # every block of the deleted files is collected
    cluster.collect_garbage()
    referenced = set(cluster.nn.referenced())
    for dn, blocks in cluster.datanode_blocks().items():
        assert blocks <= referenced, f"{dn} kept {len(blocks - referenced)} blocks of deleted files"
