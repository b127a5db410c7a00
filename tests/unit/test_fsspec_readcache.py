"""The read cache of epochfs:// files (frontends/fsspec_fs/readcache.py): the right bytes for any range, only the
blocks a read misses fetched, each run of them in one request, at most `maxblocks` kept."""
from __future__ import annotations

import random

from epochfs.frontends.fsspec_fs.readcache import BlockLRU

DATA = random.Random(1).randbytes(100_003)


def _cache(bs: int, maxblocks: int):
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        return DATA[start:end]
    return BlockLRU(bs, fetch, len(DATA), maxblocks=maxblocks), calls


def test_any_range_reads_the_bytes_it_names():
    for bs, maxblocks in ((1000, 2), (1000, 8), (4096, 3), (7, 2)):
        c, _ = _cache(bs, maxblocks)
        rnd = random.Random(bs)
        for _ in range(3000):
            start = None if rnd.random() < 0.2 else rnd.randrange(0, len(DATA) + 10)
            stop = None if rnd.random() < 0.1 else (start or 0) + rnd.choice([0, 1, 5, bs, 2 * bs + 3, 9 * bs, 50_000])
            assert c._fetch(start, stop) == DATA[start or 0:stop], (bs, maxblocks, start, stop)
            assert len(c.blocks) <= c.maxblocks


def test_a_zip_like_read_fetches_each_block_once():
    """Head, tail, then the body from the start (torch.load of one DCP item): the body's blocks are fetched
    once, the missing ones in one request; a read past the cache's size goes straight through."""
    c, calls = _cache(1000, 8)
    c._fetch(10_000, 10_004)        # the magic
    c._fetch(16_900, 16_990)        # the central directory
    c._fetch(10_000, 16_990)        # the records
    assert calls == [(10_000, 11_000), (16_000, 17_000), (11_000, 16_000)]
    calls.clear()
    assert c._fetch(0, 50_000) == DATA[:50_000] and calls == [(0, 50_000)]


def test_a_sequential_reader_fetches_two_blocks_at_a_time_and_the_oldest_go():
    c, calls = _cache(1000, 4)
    for off in range(0, 9000, 100):
        assert c._fetch(off, off + 100) == DATA[off:off + 100]
    assert calls == [(0, 1000), (1000, 3000), (3000, 5000), (5000, 7000), (7000, 9000)]
    assert sorted(c.blocks) == [5, 6, 7, 8]
