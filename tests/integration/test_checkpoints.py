"""Checkpoints of a real (small) model on a live cluster: torch.save/torch.load through the mount, and
torch.distributed.checkpoint (DCP) with FileSystemWriter/Reader on the mount and FsspecWriter/Reader on epochfs://.

DCP's FsspecWriter.finish() writes `.metadata.tmp` and renames it to `.metadata` (fs.rename): through epochfs:// that
is one NameNode rename, so a reader finds the old `.metadata`, none, or the new one whole, never a copy in progress.
"""
from __future__ import annotations

import io
import os
import threading
import warnings

import fsspec
import pytest

from cluster import MAIN
from mounting import Mount, fs_requests, needs_fuse

torch = pytest.importorskip("torch")  # epochfs doesn't need torch; these tests need it (pip install torch)
nn = torch.nn
dcp = pytest.importorskip("torch.distributed.checkpoint")
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter  # noqa: E402

pytestmark = [pytest.mark.integration,
              pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
              pytest.mark.filterwarnings("ignore:Detected an existing checkpoint:UserWarning")]


def _trained(seed: int):
    """A model with a few kinds of layers and dtypes, and an AdamW that took one step (so it has state)."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Embedding(100, 32), nn.Flatten(), nn.Linear(4 * 32, 64), nn.LayerNorm(64), nn.ReLU(),
                          nn.Linear(64, 10))
    model.register_buffer("counts", torch.randint(0, 1 << 40, (17,), dtype=torch.int64))
    model.register_buffer("bf16", torch.randn(33, dtype=torch.bfloat16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 100, (8, 4))).square().mean().backward()
    opt.step()
    return model, opt


def _state(seed: int) -> dict:
    model, opt = _trained(seed)
    return {"model": model.state_dict(), "optim": opt.state_dict(), "step": seed}


def _tensors(obj, prefix=""):
    """(path, tensor) for every tensor in a nested state dict."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}/{i}")


def _assert_bitwise_equal(got: dict, want: dict) -> None:
    g, w = dict(_tensors(got)), dict(_tensors(want))
    assert g.keys() == w.keys() and len(w) > 10
    for k, t in w.items():
        assert g[k].dtype == t.dtype and g[k].shape == t.shape, k
        assert g[k].reshape(-1).view(torch.uint8).equal(t.reshape(-1).view(torch.uint8)), k  # bits, not values


# ------------------------------------------------------------------------------------------------ the mount
@needs_fuse
def test_torch_save_and_load_through_the_mount(mnt, s3, bucket):
    """torch.save to the mount, torch.load back: the same bits; S3 reads the very bytes torch wrote."""
    want = _state(1)
    (mnt.path / "ckpt").mkdir()
    path = mnt.path / "ckpt" / "step-1.pt"
    torch.save(want, path)
    got = torch.load(path, weights_only=True)
    _assert_bitwise_equal(got, want)
    assert got["step"] == 1 and got["optim"]["param_groups"] == want["optim"]["param_groups"]
    body = s3.get_object(Bucket=bucket, Key="ckpt/step-1.pt")["Body"].read()
    assert len(body) == os.path.getsize(path)
    _assert_bitwise_equal(torch.load(io.BytesIO(body), weights_only=True), want)
    torch.save(_state(2), path)  # saved over: the new state whole
    _assert_bitwise_equal(torch.load(path, weights_only=True), _state(2))


@needs_fuse
def test_dcp_file_system_writer_on_the_mount(mnt, s3, bucket):
    """DCP's FileSystemWriter (several files, fsync, rename of .metadata.tmp) on the mount; loaded in place into
    another model's state with FileSystemReader; saved over with a new state; the checkpoint is visible in S3."""
    want = _state(3)
    ckpt = mnt.path / "dcp" / "step-3"
    dcp.save(want, storage_writer=FileSystemWriter(ckpt, thread_count=2))
    names = sorted(os.listdir(ckpt))
    assert ".metadata" in names and ".metadata.tmp" not in names and sum(n.endswith(".distcp") for n in names) == 2
    got = _state(4)
    dcp.load(got, storage_reader=FileSystemReader(ckpt))
    _assert_bitwise_equal(got, want)
    assert got["step"] == 3
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="dcp/step-3/")["Contents"]}
    assert keys == {"dcp/step-3/"} | {f"dcp/step-3/{n}" for n in names}  # the mount's mkdir is a marker
    newer = _state(5)
    dcp.save(newer, storage_writer=FileSystemWriter(ckpt))
    got = _state(6)
    dcp.load(got, storage_reader=FileSystemReader(ckpt))
    _assert_bitwise_equal(got, newer)


# ------------------------------------------------------------------------------------------------ epochfs://
def test_dcp_fsspec_writer_on_epochfs(env, cluster, s3, bucket):
    """FsspecWriter/FsspecReader on epochfs://: makedirs, exists, open('wb') of each file, the .metadata rename in one
    NameNode step (no copy), loading in place; a second save over the same checkpoint replaces it."""
    url = f"epochfs://{bucket}/runs/a/step-7"
    want = _state(7)
    before = fs_requests(cluster).get("rename", 0)
    dcp.save(want, storage_writer=FsspecWriter(url, thread_count=2))
    assert fs_requests(cluster).get("rename", 0) - before == 1
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/a/step-7/")["Contents"])
    assert keys == ["runs/a/step-7/.metadata", "runs/a/step-7/__0_0.distcp", "runs/a/step-7/__0_1.distcp"]
    got = _state(8)
    dcp.load(got, storage_reader=FsspecReader(url))
    _assert_bitwise_equal(got, want)
    assert got["step"] == 7
    newer = _state(9)
    dcp.save(newer, storage_writer=FsspecWriter(url))
    got = _state(10)
    dcp.load(got, storage_reader=FsspecReader(url))
    _assert_bitwise_equal(got, newer)
    # DCP's own check-for-a-checkpoint: with overwrite=False a second save is refused before anything is written
    with pytest.raises(dcp.api.CheckpointException, match="already exists"):
        dcp.save(_state(11), storage_writer=FsspecWriter(url, overwrite=False))


def test_dcp_async_save_through_epochfs(env, bucket):
    """dcp.async_save with FsspecWriter: the state is staged when the call returns and written by a background
    thread while training goes on changing the model in place; the checkpoint holds the state as it was."""
    model, opt = _trained(16)
    live = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 16}
    want = _state(16)
    url = f"epochfs://{bucket}/async/step-16"
    fut = dcp.async_save(live, storage_writer=FsspecWriter(url))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the next training steps
    fut.result(timeout=120)
    got = _state(17)
    dcp.load(got, storage_reader=FsspecReader(url))
    _assert_bitwise_equal(got, want)


@needs_fuse
def test_dcp_saved_through_epochfs_loads_from_the_mount_and_back(env, cluster, bucket, tmp_path):
    """One checkpoint, two frontends: saved with FsspecWriter, loaded with FileSystemReader from the mount; saved
    on the mount, loaded with FsspecReader."""
    want = _state(12)
    dcp.save(want, storage_writer=FsspecWriter(f"epochfs://{bucket}/x/step-12"))
    m = Mount(cluster, bucket, tmp_path / "mnt", "--attr-timeout", "0.5", "--entry-timeout", "0.5",
              "--cache-dir", str(tmp_path / "cache"), log=tmp_path / "mount.log")
    try:
        got = _state(13)
        dcp.load(got, storage_reader=FileSystemReader(m.path / "x" / "step-12"))
        _assert_bitwise_equal(got, want)
        dcp.save(_state(14), storage_writer=FileSystemWriter(m.path / "y" / "step-14"))
    finally:
        m.close()
    got = _state(15)
    dcp.load(got, storage_reader=FsspecReader(f"epochfs://{bucket}/y/step-14"))
    _assert_bitwise_equal(got, _state(14))


def test_rename_is_never_seen_half_done(env, bucket):
    """A reader polling `.metadata` while a writer keeps writing `.metadata.tmp` (1.5 MiB, a multipart upload) and
    renaming it over `.metadata` (DCP's finish) sees one whole version every time, never a partial one, and never
    misses the file (the rename replaces it in one step)."""
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True)
    reader_fs = fsspec.filesystem("epochfs", skip_instance_cache=True, use_listings_cache=False)
    d = f"{bucket}/ckpt"
    versions = [bytes([i]) * (3 << 19) for i in range(6)]
    fs.pipe(f"{d}/.metadata", versions[0])
    done = threading.Event()
    seen, bad = set(), []

    def reader():
        while not done.is_set():
            try:
                body = reader_fs.cat_file(f"{d}/.metadata")
            except FileNotFoundError as e:
                bad.append(f"missing: {e}")
                continue
            if body not in versions:
                bad.append(f"{len(body)} bytes, not a version")
            seen.add(body[:1])

    t = threading.Thread(target=reader)
    t.start()
    try:
        for v in versions[1:]:
            with fs.open(f"{d}/.metadata.tmp", "wb", block_size=5 << 20) as f:
                f.write(v[:1 << 20])
                f.write(v[1 << 20:])
            fs.rename(f"{d}/.metadata.tmp", f"{d}/.metadata")
            assert not fs.exists(f"{d}/.metadata.tmp")
    finally:
        done.set()
        t.join()
    assert bad == [] and len(seen) >= 2
    assert fs.cat_file(f"{d}/.metadata") == versions[-1]


def test_mv_renames_in_one_step_where_it_can(env, cluster, s3, bucket):
    """fs.mv/rename: a file to a new name, over an existing file, into a directory, a whole directory (recursive);
    each is one FsRename with the same blocks (no copy). Elsewhere (another bucket, a directory not there yet) it
    copies then deletes. Errors: a missing source is FileNotFoundError, a directory into itself EINVAL."""
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True)

    def renames():
        return fs_requests(cluster).get("rename", 0)

    def blocks(key):
        return [b.id for b in cluster.nn.stat(bucket, key).obj.blocks]

    fs.pipe(f"{bucket}/d/a.bin", b"a" * 5000)
    fs.pipe(f"{bucket}/d/b.bin", b"b" * 7000)
    fs.pipe(f"{bucket}/e/keep.txt", b"k")
    ids, n = blocks("d/a.bin"), renames()
    fs.mv(f"{bucket}/d/a.bin", f"epochfs://{bucket}/d/c.bin")
    assert renames() - n == 1 and blocks("d/c.bin") == ids
    assert not fs.exists(f"{bucket}/d/a.bin") and fs.cat(f"{bucket}/d/c.bin") == b"a" * 5000
    fs.rename(f"{bucket}/d/c.bin", f"{bucket}/d/b.bin")  # over an existing file: replaced
    assert fs.cat(f"{bucket}/d/b.bin") == b"a" * 5000 and fs.ls(f"{bucket}/d", detail=False) == [f"{bucket}/d/b.bin"]
    assert s3.head_object(Bucket=bucket, Key="d/b.bin")["ContentLength"] == 5000
    fs.mv(f"{bucket}/d/b.bin", f"{bucket}/e")  # onto a directory: into it
    assert fs.cat(f"{bucket}/e/b.bin") == b"a" * 5000 and not fs.exists(f"{bucket}/d/b.bin")
    n = renames()
    fs.mv(f"{bucket}/e", f"{bucket}/f", recursive=True)  # a whole directory, one step
    assert renames() - n == 1
    assert fs.find(bucket) == [f"{bucket}/f/b.bin", f"{bucket}/f/keep.txt"]
    n = renames()
    fs.mv(f"{bucket}/f/keep.txt", f"{bucket}/new/dir/keep.txt")  # no such directory yet: copied, then deleted
    assert renames() == n and fs.cat(f"{bucket}/new/dir/keep.txt") == b"k" and not fs.exists(f"{bucket}/f/keep.txt")
    other = f"{bucket}-2"
    fs.mkdir(other)
    fs.mv(f"{bucket}/f/b.bin", f"{other}/b.bin")  # another bucket
    assert fs.cat(f"{other}/b.bin") == b"a" * 5000 and not fs.exists(f"{bucket}/f/b.bin")
    with pytest.raises(FileNotFoundError):
        fs.mv(f"{bucket}/nope.bin", f"{bucket}/new/nope.bin")
    with pytest.raises(OSError) as e:
        fs.mv(f"{bucket}/new", f"{bucket}/new/dir/inner", recursive=True)
    assert e.value.errno == 22
    assert fs.cat(f"{bucket}/new/dir/keep.txt") == b"k"


def test_mv_in_a_versioned_bucket_keeps_s3s_history(env, cluster, s3, bucket):
    """With versioning the rename would carry the source's versions to the destination and drop the replaced
    file's: there mv copies and deletes, so the destination gets a new version over its old one and the source a
    delete marker, as S3 has it."""
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="c/.metadata.tmp", Body=b"new")
    s3.put_object(Bucket=bucket, Key="c/.metadata", Body=b"old")
    n = fs_requests(cluster).get("rename", 0)
    fs.mv(f"{bucket}/c/.metadata.tmp", f"{bucket}/c/.metadata")
    assert fs_requests(cluster).get("rename", 0) == n
    listing = s3.list_object_versions(Bucket=bucket, Prefix="c/")
    versions = {(v["Key"], v["IsLatest"]): v["Size"] for v in listing["Versions"]}
    assert versions == {("c/.metadata", True): 3, ("c/.metadata", False): 3, ("c/.metadata.tmp", False): 3}
    assert [(d["Key"], d["IsLatest"]) for d in listing["DeleteMarkers"]] == [("c/.metadata.tmp", True)]
    assert fs.cat(f"{bucket}/c/.metadata") == b"new"


def test_dcp_through_epochfs_with_a_key_that_may_only_write(env, cluster, bucket):
    """A training job's key with write permission on its bucket only (not the owner's): DCP saves and loads; its
    mv can't ask whether the bucket keeps versions (only the owner may), so it copies and deletes."""
    from epochfs.frontends.cli.admin import AdminClient
    key = AdminClient(cluster.endpoint, MAIN[0], MAIN[1]).call(
        "POST", "/keys", {"name": "trainer", "buckets": {bucket: "write"}})
    opts = {"endpoint_url": cluster.endpoint, "key": key["access_key"], "secret": key["secret_key"]}
    url = f"epochfs://{bucket}/job/step-18"
    n = fs_requests(cluster).get("rename", 0)
    dcp.save(_state(18), storage_writer=FsspecWriter(url, **opts))
    assert fs_requests(cluster).get("rename", 0) == n
    fs = fsspec.filesystem("epochfs", skip_instance_cache=True, **opts)
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{bucket}/job/step-18", detail=False)) == \
        [".metadata", "__0_0.distcp"]
    got = _state(19)
    dcp.load(got, storage_reader=FsspecReader(url, **opts))
    _assert_bitwise_equal(got, _state(18))
