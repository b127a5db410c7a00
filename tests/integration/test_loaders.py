"""Training loaders on a live cluster: batch reads, manifests, PyTorch DataLoader workers, webdataset, s3fs."""
from __future__ import annotations

import asyncio
import hashlib
import io
import tarfile

import fsspec
import pytest

from cluster import ALT, MAIN
from epochfs.common import errors
from epochfs.common.client import S3Client
from epochfs.frontends.datasets import PrefixDataset, register_webdataset

pytestmark = pytest.mark.integration
N_FILES = 5000
SAMPLE = 2048


def content(name: str, size: int = SAMPLE) -> bytes:
    """A sample that names itself, so a reader can check every byte of whatever it was handed."""
    head = name.encode() + b"\0"
    return (head + hashlib.shake_128(head).digest(size))[:size]


def check(data: bytes) -> str:
    name = data.split(b"\0", 1)[0].decode()
    assert data == content(name, len(data)), name
    return name


@pytest.fixture
def fs(cluster):
    return fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                             skip_instance_cache=True)


@pytest.fixture(scope="module")
def dataset(cluster):
    """5,000 files of 2 KiB in 50 directories, written once for the module."""
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    fs.mkdir("loaders")
    names = [f"loaders/train/d{i % 50:02d}/{i:05d}.bin" for i in range(N_FILES)]
    fs.pipe({n: content(n) for n in names}, batch_size=64)
    return sorted(names)


def run(coro):
    return asyncio.run(coro)


async def _batch(endpoint, user, items):
    async with S3Client(endpoint, user[0], user[1]) as c:
        return await c.batch_get(items)


def test_batch_read_ranges_missing_keys_and_access(cluster, bucket, s3):
    s3.put_object(Bucket=bucket, Key="a.bin", Body=b"0123456789")
    s3.put_object(Bucket=bucket, Key="big.bin", Body=bytes(range(256)) * 40_000)  # 10 MB: three blocks
    s3.put_object(Bucket=bucket, Key="public.bin", Body=b"for all", ACL="public-read")
    out = run(_batch(cluster.endpoint, MAIN, [
        (bucket, "a.bin", None, None), (bucket, "a.bin", 2, 5), (bucket, "a.bin", -3, None),
        (bucket, "a.bin", 8, 100), (bucket, "a.bin", 20, 30), (bucket, "missing", None, None),
        (bucket, "big.bin", 4 << 20 - 10, (4 << 20) + 10), ("no-such-bucket-b", "k", None, None),
        (bucket, "big.bin", None, None)]))
    big = bytes(range(256)) * 40_000
    assert out[:5] == [b"0123456789", b"234", b"789", b"89", b""]
    assert isinstance(out[5], errors.NoSuchKey) and isinstance(out[7], errors.NoSuchBucket)
    assert out[6] == big[4 << 20 - 10:(4 << 20) + 10] and out[8] == big
    # another user: the private keys are denied one by one (a missing key too: it may not list the bucket), the
    # public-read one is served in the same batch
    out = run(_batch(cluster.endpoint, ALT, [(bucket, "a.bin", None, None), (bucket, "public.bin", None, None),
                                             (bucket, "missing", None, None)]))
    assert isinstance(out[0], errors.Unauthorized) and out[1] == b"for all" and isinstance(out[2], errors.Unauthorized)


def test_fsspec_cat_and_cat_ranges_use_one_batch(fs, bucket, monkeypatch):
    fs.pipe({f"{bucket}/x/{i}": content(f"x/{i}", 100 + i) for i in range(10)})
    sent = []
    send = fs.client._send
    monkeypatch.setattr(fs.client, "_send", lambda method, b="", k="", **kw: sent.append((method, k)) or
                        send(method, b, k, **kw))
    paths = [f"{bucket}/x/{i}" for i in range(10)]
    got = fs.cat(paths)
    assert [check(got[p]) for p in paths] == [f"x/{i}" for i in range(10)]
    assert sent == [("POST", "locate")]  # one gateway request; the bytes come from the DataNodes
    ranges = fs.cat_ranges(paths[:3] + [f"{bucket}/x/nope"], [0, 10, -4, 0], [5, 20, None, 1])
    assert ranges[:3] == [content("x/0", 100)[:5], content("x/1", 101)[10:20], content("x/2", 102)[-4:]]
    assert isinstance(ranges[3], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.cat([paths[0], f"{bucket}/x/nope"])
    assert list(fs.cat([paths[0], f"{bucket}/x/nope"], on_error="omit")) == [paths[0]]


def test_manifest_feeds_find_ls_info_until_a_write(fs, dataset, monkeypatch):
    sent = []
    send = fs.client._send
    monkeypatch.setattr(fs.client, "_send", lambda method, b="", k="", **kw: sent.append((method, k)) or
                        send(method, b, k, **kw))
    found = fs.find("loaders/train", detail=True)
    assert sorted(found) == dataset and all(e["size"] == SAMPLE and e["ETag"] for e in found.values())
    assert sent == [("GET", "manifest/loaders/train/")]
    assert len(fs.ls("loaders/train/d07")) == N_FILES // 50
    assert fs.ls("loaders/train", detail=False) == [f"loaders/train/d{i:02d}" for i in range(50)]
    assert fs.info("loaders/train/d07/00007.bin")["size"] == SAMPLE
    assert fs.info("loaders/train/d07")["type"] == "directory"
    assert len(sent) == 1  # all of it from the listing cache
    fs.pipe("loaders/train/d07/new.bin", b"new")
    try:
        assert "loaders/train/d07/new.bin" in fs.ls("loaders/train/d07", detail=False)
    finally:
        fs.rm("loaders/train/d07/new.bin")


def test_manifest_needs_list_permission(cluster, bucket, s3):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")

    async def go():
        async with S3Client(cluster.endpoint, ALT[0], ALT[1]) as c:
            return [p async for p in c.manifest(bucket)]
    with pytest.raises(errors.Unauthorized):
        run(go())


def _dataloader_names(ds, workers: int, context: str, batch_size: int = 64) -> list[str]:
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, batch_size=batch_size, shuffle=True, num_workers=workers, collate_fn=list,
                        multiprocessing_context=context, persistent_workers=False)
    return [check(data) for batch in loader for data in batch]


def test_dataloader_4_workers_reads_every_byte(cluster, dataset, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("AWS_ENDPOINT_URL", cluster.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MAIN[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MAIN[1])
    ds = PrefixDataset("epochfs://loaders/train")
    assert len(ds) == N_FILES
    names = _dataloader_names(ds, 4, "fork")
    assert sorted(names) == dataset


def test_dataloader_spawn_and_rank_sharding(cluster, dataset):
    pytest.importorskip("torch")
    opts = {"endpoint_url": cluster.endpoint, "key": MAIN[0], "secret": MAIN[1]}
    shards = [PrefixDataset("epochfs://loaders/train/d01", rank=r, world_size=3, storage_options=opts)
              for r in range(3)]
    assert sum(len(s) for s in shards) == N_FILES // 50
    assert not set(shards[0].paths) & set(shards[1].paths)
    names = _dataloader_names(shards[1], 2, "spawn", batch_size=8)
    assert sorted(names) == shards[1].paths


def _tar(samples: list[tuple[str, dict[str, bytes]]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for key, parts in samples:
            for ext, data in parts.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def shards(cluster):
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                           skip_instance_cache=True)
    fs.mkdir("shards")
    expected = {}
    for s in range(4):
        samples = []
        for i in range(50):
            key = f"s{s}/{i:03d}"
            samples.append((key, {"bin": content(key, 300 + i), "cls": str(i % 7).encode()}))
            expected[key] = samples[-1][1]
        fs.pipe(f"shards/train-{s:03d}.tar", _tar(samples))
    return expected


def test_webdataset_reads_epochfs_urls_with_2_workers(cluster, shards, monkeypatch):
    wds = pytest.importorskip("webdataset")
    from torch.utils.data import DataLoader
    monkeypatch.setenv("AWS_ENDPOINT_URL", cluster.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MAIN[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MAIN[1])
    register_webdataset()
    ds = wds.WebDataset("epochfs://shards/train-{000..003}.tar", shardshuffle=False,
                        workersplitter=wds.split_by_worker, nodesplitter=None)
    seen = {}
    for sample in DataLoader(ds, batch_size=None, num_workers=2):
        seen[sample["__key__"]] = {"bin": sample["bin"], "cls": sample["cls"]}
    assert seen == shards


def test_tar_shards_split_over_workers(cluster, shards):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader
    from epochfs.frontends.datasets import TarShards
    opts = {"endpoint_url": cluster.endpoint, "key": MAIN[0], "secret": MAIN[1]}
    ds = TarShards("epochfs://shards", storage_options=opts, shuffle=True)
    assert len(ds.urls) == 4
    seen = {s["__key__"]: {"bin": s["bin"], "cls": s["cls"]}
            for s in DataLoader(ds, batch_size=None, num_workers=2)}
    assert seen == shards
    other_rank = TarShards(ds.urls, storage_options=opts, rank=1, world_size=2)
    assert {s["__key__"][:2] for s in other_rank} == {"s1", "s3"}


def test_s3fs_round_trips_the_same_files(cluster, dataset, tmp_path):
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1], skip_instance_cache=True)
    sub = [n for n in dataset if n.startswith("loaders/train/d03/")]
    assert sorted(fs.find("loaders/train/d03")) == sub
    assert fs.info(sub[0])["size"] == SAMPLE
    got = fs.cat(sub)
    assert all(check(got[p]) == p for p in sub)
    assert fs.cat_file(sub[1], start=10, end=20) == content(sub[1])[10:20]
    fs.get("loaders/train/d03/", str(tmp_path / "d03"), recursive=True)
    assert sorted(p.name for p in (tmp_path / "d03").iterdir()) == [p.rsplit("/", 1)[1] for p in sub]
    fs.put(str(tmp_path / "d03"), "loaders/s3fs-copy", recursive=True)
    fs.copy(sub[0], "loaders/s3fs-copy/renamed.bin")
    epoch = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=MAIN[0], secret=MAIN[1],
                              skip_instance_cache=True)
    copied = epoch.find("loaders/s3fs-copy")
    assert len(copied) == len(sub) + 1
    assert all(check(d) for d in epoch.cat(copied).values())
    with fs.open("loaders/s3fs-copy/big.bin", "wb", block_size=5 << 20) as f:  # a multipart upload
        f.write(b"z" * (11 << 20))
    assert epoch.info("loaders/s3fs-copy/big.bin")["size"] == 11 << 20
    fs.rm("loaders/s3fs-copy", recursive=True)
    epoch.invalidate_cache()  # another client wrote: epochfs's listing cache only sees its own writes
    assert not epoch.exists("loaders/s3fs-copy/renamed.bin")
