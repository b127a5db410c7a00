"""`epochfs cp` and `epochfs sync` as a user runs them, against a live cluster."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest

from cluster import MAIN

pytestmark = pytest.mark.integration


@pytest.fixture
def epochfs(cluster):
    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1]}

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", *args], env=env,
                           capture_output=True, text=True, timeout=120)
        assert (p.returncode == 0) == ok, p.stderr
        return p
    return run


def _gets(cluster) -> float:
    """GetObject requests the gateway answered (from /metrics)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in httpx.get(f"{cluster.endpoint}/metrics").text.splitlines()
               if line.startswith('epochfs_s3_requests_total{operation="GetObject"'))


def _tree(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_cp_and_sync_round_trip(cluster, epochfs, bucket, s3, tmp_path):
    src = tmp_path / "src"
    for i in range(40):
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"{i}.bin").write_bytes(os.urandom(1000 + i))
    (src / "big.bin").write_bytes(os.urandom(17 << 20))  # above the multipart threshold
    # straight to the DataNodes: 40 small files in batches, the big one as a stream of blocks
    assert "41 copied, 0 unchanged (41 of 41 uploads straight to the DataNodes)" in \
        epochfs("cp", str(src), f"epochfs://{bucket}/data").stderr
    keys = {o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in p["Contents"]}
    assert keys == {f"data/{k}" for k in _tree(src)}

    # nothing changed: sync copies nothing; then one file changes size and one is new
    assert "0 copied, 41 unchanged" in epochfs("sync", str(src), f"s3://{bucket}/data").stderr
    (src / "d1" / "1.bin").write_bytes(b"changed")
    (src / "new.txt").write_text("new")
    assert "2 copied, 40 unchanged" in epochfs("sync", str(src), f"epochfs://{bucket}/data").stderr
    assert s3.get_object(Bucket=bucket, Key="data/d1/1.bin")["Body"].read() == b"changed"

    # back down: cp a prefix, then sync skips what the download left (its mtimes are the objects'); the small files
    # come in batch reads, the big one from the DataNodes: no GetObject at all
    out = tmp_path / "out"
    gets = _gets(cluster)
    epochfs("sync", f"epochfs://{bucket}/data", str(out))
    assert _tree(out) == _tree(src)
    assert _gets(cluster) == gets
    assert "0 copied, 42 unchanged" in epochfs("sync", f"epochfs://{bucket}/data", str(out)).stderr
    epochfs("cp", f"epochfs://{bucket}/data/new.txt", str(tmp_path / "one.txt"))
    assert (tmp_path / "one.txt").read_text() == "new"
    # -r / --recursive, as cp and aws s3 cp are typed, copy the folder as without them
    assert "42 copied" in epochfs("cp", "-r", f"epochfs://{bucket}/data", str(tmp_path / "again")).stderr
    assert _tree(tmp_path / "again") == _tree(src)
    assert "0 copied, 42 unchanged" in \
        epochfs("sync", "--recursive", str(src), f"epochfs://{bucket}/data").stderr


def test_clear_errors(epochfs, bucket, tmp_path):
    p = epochfs("cp", str(tmp_path / "missing"), f"epochfs://{bucket}/x", ok=False)
    assert "no such file or directory" in p.stderr and "Traceback" not in p.stderr
    p = epochfs("cp", f"epochfs://{bucket}/nothing-here", str(tmp_path / "x"), ok=False)
    assert "no such object or prefix" in p.stderr
    p = epochfs("cp", str(tmp_path), str(tmp_path / "y"), ok=False)
    assert "one of SRC and DST must be local" in p.stderr
    (tmp_path / "f").write_text("x")
    p = epochfs("cp", str(tmp_path / "f"), "epochfs://no-such-bucket-cli/f", ok=False)
    assert "epochfs://no-such-bucket-cli: no such bucket (epochfs mb epochfs://no-such-bucket-cli makes it)" in p.stderr
    p = epochfs("cp", "epochfs://no-such-bucket-cli/f", str(tmp_path / "g"), ok=False)
    assert "epochfs://no-such-bucket-cli: no such bucket" in p.stderr and "Traceback" not in p.stderr
    # a bucket name S3 refuses: which rule it breaks
    assert "2 characters: a bucket name has 3 to 63" in epochfs("mb", "epochfs://ml", ok=False).stderr
    assert "lowercase letters, digits" in epochfs("mb", "epochfs://My_Data", ok=False).stderr


def test_ls_rm_mb_rb_print_as_aws_s3_does(cluster, epochfs, tmp_path):
    """`epochfs ls` prints what `aws s3 ls` prints for the same bucket (its oracle, against the same gateway);
    rm, mb and rb do what they say, and refuse what would surprise."""
    bucket = f"t-ls-{os.urandom(4).hex()}"
    assert epochfs("mb", f"epochfs://{bucket}").stdout == f"make_bucket: {bucket}\n"
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "c.txt").write_text("hi")
    (src / "a" / "big.bin").write_bytes(os.urandom(3 << 20))
    (src / "top.txt").write_text("x")
    epochfs("cp", "-q", str(src), f"epochfs://{bucket}/set")
    aws_env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
               "AWS_SECRET_ACCESS_KEY": MAIN[1], "AWS_DEFAULT_REGION": "us-east-1", "TZ": "UTC"}

    def aws_ls(*args: str) -> str:
        return subprocess.run(["aws", "s3", "ls", *args], env=aws_env, capture_output=True, text=True,
                              timeout=120, check=True).stdout

    assert bucket in epochfs("ls").stdout.split()
    pairs = [([f"epochfs://{bucket}"], [f"s3://{bucket}"]), ([f"epochfs://{bucket}/set/"], [f"s3://{bucket}/set/"]),
             ([f"epochfs://{bucket}/set"], [f"s3://{bucket}/set"]),
             (["-r", f"epochfs://{bucket}"], ["--recursive", f"s3://{bucket}"])]
    for ours, theirs in pairs:
        expected = aws_ls(*theirs)
        assert expected and epochfs("ls", *ours).stdout == expected, ours
    assert "PRE a/" in epochfs("ls", f"epochfs://{bucket}/set/").stdout
    assert "3.0 MiB set/a/big.bin" in epochfs("ls", "-r", "-H", f"epochfs://{bucket}").stdout

    # rm: one object; a folder only with -r; a missing object is an error, as rm of a missing file
    assert epochfs("rm", f"epochfs://{bucket}/set/top.txt").stdout == f"delete: epochfs://{bucket}/set/top.txt\n"
    assert "no such object" in epochfs("rm", f"epochfs://{bucket}/set/top.txt", ok=False).stderr
    assert "a folder; give -r" in epochfs("rm", f"epochfs://{bucket}/set/a", ok=False).stderr
    assert "deleted 2 objects" in epochfs("rm", "-r", f"epochfs://{bucket}/set/a").stdout
    assert epochfs("ls", "-r", f"epochfs://{bucket}").stdout == ""
    # rb: an empty bucket; one with objects only with --force
    epochfs("cp", "-q", str(src), f"epochfs://{bucket}/again")
    assert "not empty" in epochfs("rb", f"epochfs://{bucket}", ok=False).stderr
    assert "remove_bucket" in epochfs("rb", "--force", f"epochfs://{bucket}").stdout
    assert "no such bucket" in epochfs("ls", f"epochfs://{bucket}", ok=False).stderr
    p = epochfs("ls", str(tmp_path), ok=False)
    assert "not a bucket path" in p.stderr and "Traceback" not in p.stderr


def test_a_file_that_cannot_be_copied_does_not_stop_the_others(epochfs, bucket, s3, tmp_path):
    """As `aws s3 cp`: what is no regular file is left out with a warning (a FIFO's read would wait forever, a
    dangling link), a file that can't be named as a key or read fails alone (its batch's other files go), every
    other file is copied; exit 1 when a file failed, 2 when some were only left out."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"f{i}").write_text(str(i))
    os.mkfifo(src / "fifo")
    (src / "dangling").symlink_to(tmp_path / "nothing")
    (src / "link").symlink_to(src / "f0")  # links are followed, as aws does
    (src / "loop").symlink_to(src / "loop")
    (src / "unreadable").symlink_to("/proc/self/mem")  # a regular file whose read fails (EIO), in f0's batch
    with open(os.fsencode(src) + b"/not-utf8-\xff", "wb") as f:  # Linux names are bytes; keys are UTF-8
        f.write(b"x")

    def keys(prefix: str) -> set[str]:
        return {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])}

    p = epochfs("cp", str(src), f"epochfs://{bucket}/part", ok=False)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert keys("part/") == {"part/f0", "part/f1", "part/f2", "part/link"}
    assert s3.get_object(Bucket=bucket, Key="part/link")["Body"].read() == b"0"
    err = p.stderr
    assert "warning: skipping" in err and f"{src}/fifo: not a regular file" in err, err
    assert f"{src}/dangling: no such file" in err, err
    assert f"failed: {src}/unreadable: [Errno 5]" in err and f"failed: {src}/loop" in err, err
    assert "the name is not UTF-8" in err, err
    assert "3 of 7 files failed, 4 copied" in err, err

    for name in ("loop", "unreadable"):
        (src / name).unlink()
    os.unlink(os.fsencode(src) + b"/not-utf8-\xff")
    p = epochfs("sync", str(src), f"epochfs://{bucket}/part", ok=False)
    assert p.returncode == 2, p.stderr
    assert "0 copied, 4 unchanged, 2 left out (no regular files)" in p.stderr, p.stderr
    # one such file named alone is an error, not an empty copy
    p = epochfs("cp", str(src / "fifo"), f"epochfs://{bucket}/fifo", ok=False)
    assert p.returncode == 1 and "not a regular file or a folder" in p.stderr, p.stderr
    assert keys("fifo") == set()


def test_sync_delete_mirrors_a_folder_both_ways(epochfs, bucket, s3, tmp_path):
    """`sync --delete` makes the destination hold what the source holds: objects (or files) the source lacks go,
    only below the destination, and only once every copy succeeded; a single file refuses it."""
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    for name in ("a", "b", "d/c"):
        (src / name).write_text(name)
    s3.put_object(Bucket=bucket, Key="beside/x", Body=b"not below the destination")
    epochfs("sync", str(src), f"epochfs://{bucket}/set")
    (src / "b").unlink()
    (src / "d" / "c").unlink()
    (src / "new").write_text("new")
    out = epochfs("sync", "--delete", str(src), f"epochfs://{bucket}/set").stderr
    assert "1 copied, 1 unchanged, 2 deleted" in out, out
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"set/a", "set/new", "beside/x"}
    # back down into a folder holding a file the prefix does not have
    down = tmp_path / "down"
    down.mkdir()
    (down / "stale").write_text("stale")
    out = epochfs("sync", "--delete", f"epochfs://{bucket}/set", str(down)).stderr
    assert "2 copied, 0 unchanged, 1 deleted" in out, out
    assert sorted(p.name for p in down.iterdir()) == ["a", "new"]
    # without --delete nothing goes; a single file can't mean "below"
    (src / "a").unlink()
    assert "0 copied, 1 unchanged" in epochfs("sync", str(src), f"epochfs://{bucket}/set").stderr
    assert "set/a" in {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]}
    p = epochfs("sync", "--delete", str(src / "new"), f"epochfs://{bucket}/set/", ok=False)
    assert "single file" in p.stderr
    assert {o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]} == {"set/a", "set/new", "beside/x"}


def test_cp_through_standard_input_and_output(cluster, epochfs, bucket, s3):
    """`-` is standard input (upload) or output (download) for cp, as for `aws s3 cp`: bytes through a pipe, whole,
    multipart when large, and nothing but the bytes on standard output."""
    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1]}
    cli = [sys.executable, "-m", "epochfs.frontends.cli.main", "cp"]
    for key, data in (("small", b"piped\n"), ("large", os.urandom(19 << 20))):  # large: three 8 MiB parts
        subprocess.run([*cli, "-", f"epochfs://{bucket}/{key}"], input=data, env=env, check=True, timeout=120,
                       capture_output=True)
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data
        out = subprocess.run([*cli, f"epochfs://{bucket}/{key}", "-"], env=env, check=True, timeout=120,
                             capture_output=True)
        assert out.stdout == data
    assert re.fullmatch(r'"[0-9a-f]{32}-\d+"', s3.head_object(Bucket=bucket, Key="large")["ETag"])  # multipart
    assert "full key" in epochfs("cp", "-", f"epochfs://{bucket}/dir/", ok=False).stderr
    p = epochfs("cp", f"epochfs://{bucket}/nope", "-", ok=False)
    assert p.stdout == "" and p.stderr == f"epochfs cp: epochfs://{bucket}/nope: no such object\n"
    assert "goes with cp" in epochfs("sync", "-", f"epochfs://{bucket}/x", ok=False).stderr
