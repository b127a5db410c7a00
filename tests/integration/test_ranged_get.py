"""Ranged GETs through a real cluster at the places where a cut block list or a one-call read could go wrong: block
and chunk boundaries, ranges over two and three blocks, first and last bytes, suffixes, open ends, HEAD."""
from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.integration

B = 4 << 20  # the cluster's block size
CHUNK = 256 << 10  # the DataNodes' chunk size
SIZE = 2 * B + 123_457  # three blocks, the last one short


@pytest.fixture(scope="module")
def obj(cluster):
    s3 = cluster.s3()
    s3.create_bucket(Bucket="ranges")
    data = os.urandom(SIZE)
    s3.put_object(Bucket="ranges", Key="big", Body=data)
    return data


SPANS = {  # Range header -> [start, end) served
    "first byte": ("bytes=0-0", 0, 1),
    "last byte": (f"bytes={SIZE - 1}-{SIZE - 1}", SIZE - 1, SIZE),
    "suffix of one byte": ("bytes=-1", SIZE - 1, SIZE),
    "suffix past the start": (f"bytes=-{SIZE + 10}", 0, SIZE),
    "suffix within the last block": ("bytes=-5000", SIZE - 5000, SIZE),
    "one byte each side of a block boundary": (f"bytes={B - 1}-{B}", B - 1, B + 1),
    "first byte of a block": (f"bytes={B}-{B}", B, B + 1),
    "exactly the second block": (f"bytes={B}-{2 * B - 1}", B, 2 * B),
    "1 MiB across a block boundary": (f"bytes={B - 300_000}-{B + 748_575}", B - 300_000, B + 748_576),
    "across a chunk boundary": (f"bytes={CHUNK - 1}-{CHUNK}", CHUNK - 1, CHUNK + 1),
    "whole chunks": (f"bytes={CHUNK}-{3 * CHUNK - 1}", CHUNK, 3 * CHUNK),
    "three blocks (streamed)": (f"bytes={B - 100}-{2 * B + 100}", B - 100, 2 * B + 101),
    "open end in the last block": (f"bytes={2 * B + 5}-", 2 * B + 5, SIZE),
    "end clipped to the object": (f"bytes={SIZE - 10}-{SIZE + 1000}", SIZE - 10, SIZE),
}


@pytest.mark.parametrize("name", list(SPANS))
def test_ranged_get(cluster, obj, name):
    spec, start, end = SPANS[name]
    r = cluster.s3().get_object(Bucket="ranges", Key="big", Range=spec)
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert r["ContentRange"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert r["ContentLength"] == end - start
    assert r["Body"].read() == obj[start:end]


def test_head_with_range(cluster, obj):
    r = cluster.s3().head_object(Bucket="ranges", Key="big", Range=f"bytes={B - 1}-{B}")
    assert (r["ContentLength"], r["ContentRange"]) == (2, f"bytes {B - 1}-{B}/{SIZE}")


def test_ranged_stat_carries_only_the_blocks_of_the_range(cluster, obj):
    """The NameNode's answer for a ranged GET does not grow with the object: the blocks of the range, where the first
    starts, and the holders of just those."""
    whole = cluster.nn.stat("ranges", "big").obj
    assert len(whole.blocks) == 3
    for rng, boff, idx in (((B - 1, B + 1), 0, [0, 1]), ((2 * B, None), 2 * B, [2]), ((-1, None), 2 * B, [2]),
                           ((0, 1), 0, [0]), ((SIZE + 5, None), None, [])):
        res = cluster.nn.stat("ranges", "big", range=rng)
        assert list(res.obj.blocks) == [whole.blocks[i] for i in idx], rng
        if boff is not None:
            assert res.obj.block_offset == boff
        assert set(map(int, res.addrs)) == {n for i in idx for n in whole.blocks[i].nodes}
        assert res.obj.etag == whole.etag and res.obj.size == SIZE
