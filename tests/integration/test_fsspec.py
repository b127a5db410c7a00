"""epochfs:// through fsspec against a real cluster: the entry point, listing, ranges, writes, copies, forks."""
from __future__ import annotations

import asyncio
import multiprocessing as mp
import os

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import fsspec
import httpx
import pytest
from cluster import MAIN

from epochfs.common import errors
from epochfs.common.client import WHOLE_GET_MAX

pytestmark = pytest.mark.integration


@pytest.fixture
def fs(env):
    return fsspec.filesystem("epochfs", skip_instance_cache=True)


def test_open_round_trip_through_entry_point(env, bucket, s3):
    with fsspec.open(f"epochfs://{bucket}/a/b.txt", "wb") as f:
        f.write(b"hello epochfs")
    assert s3.get_object(Bucket=bucket, Key="a/b.txt")["Body"].read() == b"hello epochfs"
    with fsspec.open(f"epochfs://{bucket}/a/b.txt", "rt") as f:
        assert f.read() == "hello epochfs"


def test_ls_info_find_glob(fs, bucket):
    for k in ("x/1.bin", "x/2.bin", "x/sub/3.bin", "y.txt"):
        fs.pipe(f"{bucket}/{k}", k.encode())
    assert bucket in fs.ls("", detail=False)
    assert fs.ls(bucket, detail=False) == [f"{bucket}/x", f"{bucket}/y.txt"]
    listing = {e["name"]: e for e in fs.ls(f"epochfs://{bucket}/x")}
    assert listing[f"{bucket}/x/1.bin"]["size"] == len("x/1.bin") and listing[f"{bucket}/x/sub"]["type"] == "directory"
    assert fs.info(f"{bucket}/x")["type"] == "directory"
    assert fs.info(f"{bucket}/y.txt")["size"] == 5
    assert fs.isdir(bucket) and fs.isfile(f"{bucket}/y.txt") and not fs.exists(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{bucket}/nope")
    with pytest.raises(FileNotFoundError):
        fs.ls("no-such-bucket-here")
    assert fs.find(bucket) == [f"{bucket}/{k}" for k in ("x/1.bin", "x/2.bin", "x/sub/3.bin", "y.txt")]
    assert f"{bucket}/x/sub" in fs.find(f"{bucket}/x", withdirs=True)
    assert fs.glob(f"{bucket}/x/*.bin") == [f"{bucket}/x/1.bin", f"{bucket}/x/2.bin"]
    assert fs.glob(f"epochfs://{bucket}/**/3.bin") == [f"{bucket}/x/sub/3.bin"]
    assert fs.du(bucket) == sum(len(k) for k in ("x/1.bin", "x/2.bin", "x/sub/3.bin", "y.txt"))


def test_cat_file_ranges(fs, bucket):
    data = bytes(range(256)) * 1000
    fs.pipe_file(f"{bucket}/r", data)
    assert fs.cat_file(f"{bucket}/r") == data
    assert fs.cat_file(f"{bucket}/r", start=10, end=20) == data[10:20]
    assert fs.cat_file(f"{bucket}/r", start=-100) == data[-100:]
    assert fs.cat_file(f"{bucket}/r", start=5, end=-5) == data[5:-5]
    assert fs.cat_file(f"{bucket}/r", start=len(data) + 10) == b""
    with fs.open(f"{bucket}/r", "rb", block_size=5 << 20) as f:
        f.seek(1000)
        assert f.read(24) == data[1000:1024]


def test_pipe_put_get(fs, bucket, tmp_path):
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(20 << 20))  # above the multipart threshold
    fs.put(str(src), f"{bucket}/big.bin")
    assert fs.size(f"{bucket}/big.bin") == 20 << 20
    fs.get(f"{bucket}/big.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    fs.pipe({f"{bucket}/p/1": b"one", f"{bucket}/p/2": b"two"})
    assert fs.cat(f"{bucket}/p/*") == {f"{bucket}/p/1": b"one", f"{bucket}/p/2": b"two"}
    with pytest.raises(FileExistsError):
        fs.pipe_file(f"{bucket}/p/1", b"again", mode="create")


def _sent_by_gateway(cluster) -> float:
    """Bytes of object GETs the gateway sent (from /metrics)."""
    for line in httpx.get(f"{cluster.endpoint}/metrics").text.splitlines():
        if line.startswith('epochfs_s3_sent_bytes_total{operation="GetObject"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_folder_get_reads_its_large_files_from_the_datanodes_in_the_version_found_then(cluster, fs, bucket, s3,
                                                                                        tmp_path):
    """fs.get of a folder: a large file (from WHOLE_GET_MAX bytes) comes straight from the DataNodes, not through
    the gateway; one overwritten after the listing comes whole in its new version (the listing's size is a hint,
    never a cut), and a small one is one GET."""
    big, newer = os.urandom(WHOLE_GET_MAX + (1 << 20)), os.urandom(2 * WHOLE_GET_MAX)
    s3.put_object(Bucket=bucket, Key="dl/big", Body=big)
    s3.put_object(Bucket=bucket, Key="dl/changed", Body=b"x" * (WHOLE_GET_MAX + 10))
    s3.put_object(Bucket=bucket, Key="dl/small", Body=b"small")
    assert len(fs.ls(f"{bucket}/dl")) == 3  # listed: get() below takes the sizes from here
    s3.put_object(Bucket=bucket, Key="dl/changed", Body=newer)
    before = _sent_by_gateway(cluster)
    fs.get(f"{bucket}/dl/", str(tmp_path / "out") + "/", recursive=True)
    assert (tmp_path / "out" / "big").read_bytes() == big
    assert (tmp_path / "out" / "changed").read_bytes() == newer
    assert (tmp_path / "out" / "small").read_bytes() == b"small"
    assert _sent_by_gateway(cluster) - before < 1 << 20  # the small file only


def _requests(cluster) -> dict[str, float]:
    """S3 requests the gateway answered, by operation (from /metrics)."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{cluster.endpoint}/metrics").text.splitlines():
        if line.startswith("epochfs_s3_requests_total{"):
            op = line.split('operation="', 1)[1].split('"', 1)[0]
            out[op] = out.get(op, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def test_a_folder_get_of_small_files_reads_them_in_batches_and_each_fails_alone(cluster, fs, bucket, s3, tmp_path):
    """fs.get of a folder of small files: the files listed as small are read together (batch reads, a few
    requests for all of them: no GetObject each); one deleted after the listing fails alone, with its own error."""
    files = {f"many/{i:03d}": os.urandom(1000 + 37 * i) for i in range(150)}
    fs.pipe({f"{bucket}/{k}": v for k, v in files.items()})
    assert len(fs.ls(f"{bucket}/many")) == 150
    before = _requests(cluster)
    fs.get(f"{bucket}/many/", str(tmp_path / "out") + "/", recursive=True)
    spent = {op: n - before.get(op, 0.0) for op, n in _requests(cluster).items() if n != before.get(op, 0.0)}
    assert "GetObject" not in spent and sum(spent.values()) <= 4, spent
    assert {f"many/{p.name}": p.read_bytes() for p in (tmp_path / "out").iterdir()} == files
    fs.ls(f"{bucket}/many")
    s3.delete_object(Bucket=bucket, Key="many/007")  # after the listing: still listed as small
    (tmp_path / "again").mkdir()
    with pytest.raises(FileNotFoundError):
        fs.get([f"{bucket}/many/{n}" for n in ("006", "007", "008")], str(tmp_path / "again") + "/")

    async def together():
        return await asyncio.gather(*(fs.getter.get(bucket, f"many/{n}", 2000) for n in ("006", "007", "008")),
                                    return_exceptions=True)
    got = fsspec.asyn.sync(fs.loop, together)
    assert got[0] == files["many/006"] and got[2] == files["many/008"] and isinstance(got[1], errors.NoSuchKey)


def test_rm_mv_copy(fs, bucket):
    fs.pipe({f"{bucket}/d/a": b"A", f"{bucket}/d/e/b": b"B", f"{bucket}/f": b"F"})
    fs.ls(f"{bucket}/d")  # fill the listing cache; writes must invalidate it
    fs.copy(f"{bucket}/f", f"{bucket}/d/f2")
    assert fs.cat(f"{bucket}/d/f2") == b"F" and f"{bucket}/d/f2" in fs.ls(f"{bucket}/d", detail=False)
    fs.mv(f"{bucket}/d", f"{bucket}/moved", recursive=True)
    assert fs.find(f"{bucket}/moved") == [f"{bucket}/moved/{k}" for k in ("a", "e/b", "f2")]
    assert not fs.exists(f"{bucket}/d")
    fs.rm_file(f"{bucket}/f")
    with pytest.raises(FileNotFoundError):
        fs.rm_file(f"{bucket}/f")
    fs.rm(f"{bucket}/moved", recursive=True)
    assert fs.ls(bucket) == []


# a CR (an XML parser reads it back as LF), control characters XML 1.0 can't hold, fsspec's glob characters
ODD_KEYS = ["cr\rlf\nx", "ctrl\x01\x1fx", "q?x=1&y=<2>", "star*brack[1]", "a b+c%41"]


def test_keys_of_any_characters_are_listed_read_and_removed_as_they_are(fs, bucket, s3):
    for k in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=f"odd/{k}", Body=k.encode())
    assert sorted(fs.ls(f"{bucket}/odd", detail=False)) == sorted(f"{bucket}/odd/{k}" for k in ODD_KEYS)
    for k in ODD_KEYS:
        assert fs.cat_file(f"{bucket}/odd/{k}") == k.encode()
    assert fs.cat(f"{bucket}/odd/star*") == {f"{bucket}/odd/star*brack[1]": b"star*brack[1]"}  # a glob
    fs.rm_file(f"{bucket}/odd/star*brack[1]")  # rm() would take it as a glob (fsspec's rule) and find nothing
    fs.rm([f"{bucket}/odd/{k}" for k in ODD_KEYS if "[" not in k])  # DeleteObjects; DELETE what XML can't name
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="odd/").get("Contents", [])] == []


def test_listings_without_encoding_type_give_a_cr_back_as_a_cr(cluster, bucket, s3):
    """S3's forms: CR as &#13; (raw, a parser reads LF: another key), other control characters as references."""
    for k in ODD_KEYS:
        s3.put_object(Bucket=bucket, Key=f"raw/{k}", Body=b"")
    url = f"{cluster.endpoint}/{bucket}?list-type=2&prefix=raw%2Fc"  # botocore would add encoding-type=url
    req = botocore.awsrequest.AWSRequest(method="GET", url=url)
    botocore.auth.S3SigV4Auth(botocore.credentials.Credentials(MAIN[0], MAIN[1]), "s3", "us-east-1").add_auth(req)
    r = httpx.get(url, headers=dict(req.headers))
    assert r.status_code == 200
    assert b"<Key>raw/cr&#13;lf\nx</Key>" in r.content and b"<Key>raw/ctrl&#1;&#31;x</Key>" in r.content
    boto_keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="raw/")["Contents"]]
    assert sorted(boto_keys) == sorted(f"raw/{k}" for k in ODD_KEYS)


def test_mkdir_creates_bucket(fs):
    name = f"mk-{os.urandom(4).hex()}"
    fs.mkdir(name)
    assert name in fs.ls("", detail=False) and fs.isdir(name)
    with pytest.raises(FileExistsError):
        fs.mkdir(name)
    fs.makedirs(f"{name}/deep/dir", exist_ok=True)
    fs.pipe(f"{name}/k", b"v")
    with pytest.raises(OSError):
        fs.rmdir(name)  # not empty
    fs.rm(f"{name}/k")
    fs.rmdir(name)
    assert not fs.exists(name)


@pytest.mark.parametrize("direct", [True, False])
def test_multipart_open_visible_only_on_close(env, bucket, s3, direct):
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True, direct_writes=direct)
    chunk = os.urandom(1 << 20)
    path = f"{bucket}/mp.bin"
    with fs.open(path, "wb") as f:
        for _ in range(20):
            f.write(chunk)
        # blocks already stored on the DataNodes (direct: 4 at a time), or parts already sent through the gateway
        if direct:
            fsspec.asyn.sync(fs.loop, f.writer._up.drain)  # the round stored while the next one fills
        assert f.writer.direct == direct and (f.writer._up.receipts if direct else f.writer.upload_id)
        assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
    head = s3.head_object(Bucket=bucket, Key="mp.bin")
    assert head["ContentLength"] == 20 << 20
    # direct: 5 blocks of 4 MiB, each a "part" of the ETag; the gateway: multipart parts of 8, 8 and 4 MiB
    assert head["ETag"].endswith('-5"' if direct else '-3"')
    assert fs.cat_file(path) == chunk * 20


@pytest.mark.parametrize("direct", [True, False])
def test_large_writes_go_to_the_upload_as_they_are_in_order_with_the_small_ones(env, bucket, s3, direct):
    """A write of a block or more skips fsspec's buffer (what is buffered goes first): the object is every write in
    order, also for views of typed memory (torch.save writes a tensor's bytes as one), whose buffers the caller may
    reuse at once; tell() counts bytes; nothing is visible before close."""
    import array
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True, direct_writes=direct)
    floats = array.array("f", os.urandom(9 << 20))  # 9 MiB of float32: len() counts items, not bytes
    big = os.urandom(5 << 20)
    scratch = bytearray(os.urandom(6 << 20))
    path = f"{bucket}/big-writes.bin"
    expect = []
    with fs.open(path, "wb") as f:
        for piece in (b"head", memoryview(floats), b"x" * 100, big, memoryview(scratch), b"tail"):
            assert f.write(piece) == memoryview(piece).nbytes
            expect.append(bytes(piece))
            if isinstance(piece, memoryview) and piece.obj is scratch:
                scratch[:] = bytes(len(scratch))  # the caller reuses its buffer right after the write
        assert f.tell() == sum(map(len, expect))
        assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
        assert f.writer is not None and f.writer.direct == direct
    assert fs.cat_file(path) == b"".join(expect)


def _child(path, q):
    import fsspec as f
    try:
        q.put(f.filesystem("epochfs").cat_file(path))
    except BaseException as e:  # report, never hang the parent
        q.put(repr(e))


def _child_same_instance(fs, path, q):
    try:
        q.put(fs.cat_file(path))
    except BaseException as e:
        q.put(repr(e))


def test_forked_children(env, bucket):
    fs = fsspec.filesystem("epochfs")
    fs.pipe(f"{bucket}/fork", b"from the parent")
    assert fs.cat(f"{bucket}/fork") == b"from the parent"  # the parent's loop and client are live now
    ctx = mp.get_context("fork")
    for target, args in ((_child, (f"{bucket}/fork",)), (_child_same_instance, (fs, f"{bucket}/fork"))):
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(*args, q))
        p.start()
        assert q.get(timeout=30) == b"from the parent"
        p.join(10)
        assert p.exitcode == 0
    assert fs.cat(f"{bucket}/fork") == b"from the parent"  # the parent still works


def test_stale_reads_msync_and_see_their_own_writes(env, bucket):
    """With stale_reads (embedded here: the one NameNode answers) the filesystem asks the log position before its
    first stale read and after each of its writes (msync), and fs.msync() gives it; listings see every write."""
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True, stale_reads=True)
    first = fs.msync()
    # the position never goes back (the shared cluster's background commands, a GC of blocks freed by an earlier
    # test's deletes, may move it on meanwhile)
    assert first > 0 and fs.msync() >= first
    for i in range(3):
        fs.pipe(f"{bucket}/ryw/{i}.bin", b"x" * i)
        assert fs.find(f"{bucket}/ryw") == [f"{bucket}/ryw/{j}.bin" for j in range(i + 1)]
        assert fs.client.stale_pos > first
        first = fs.client.stale_pos
    assert fs.cat_ranges([f"{bucket}/ryw/2.bin"], [0], [2]) == [b"xx"]
