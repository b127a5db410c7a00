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


def _ahead_cache(bs: int, maxblocks: int, piece: int = 700, fail: bool = False):
    """A cache given `buffers` (answers cut in pieces of `piece` bytes, as DataNode pieces are) and `ahead`
    (futures the test completes or fails: the background fetches it started)."""
    from concurrent.futures import Future
    calls: list[tuple[str, int, int]] = []
    flights: list[tuple[Future, int, int]] = []

    def buffers(start: int, end: int) -> list:
        calls.append(("sync", start, end))
        return [DATA[i:min(i + piece, end)] for i in range(start, end, piece)]

    def ahead(start: int, end: int) -> Future:
        calls.append(("ahead", start, end))
        f: Future = Future()
        flights.append((f, start, end))
        return f

    def fetch(start: int, end: int) -> bytes:
        raise AssertionError("the joined fetcher is not used when buffers are given")
    return BlockLRU(bs, fetch, len(DATA), maxblocks=maxblocks, buffers=buffers, ahead=ahead), calls, flights


def test_a_forward_reader_has_the_next_blocks_fetched_in_the_background_and_waits_only_for_them():
    c, calls, flights = _ahead_cache(1000, 8)
    assert c._fetch(0, 100) == DATA[:100]
    assert calls == [("sync", 0, 1000), ("ahead", 1000, 5000)], "twice `prefetch` blocks ahead"
    f, a, z = flights[-1]
    f.set_result([DATA[a:a + 300], DATA[a + 300:z]])  # its answer, in pieces that don't match the blocks
    assert c._fetch(100, 2500) == DATA[100:2500], "blocks 1-2 come from the background fetch"
    assert calls[2:] == [("ahead", 5000, 7000)], "no fetch of its own; the window ahead is filled up again"
    flights[-1][0].set_exception(OSError("DataNode gone"))
    assert c._fetch(4500, 5500) == DATA[4500:5500], "a failed background fetch is read again, in the reader's call"
    assert calls[3:] == [("sync", 5000, 6000), ("ahead", 6000, 10_000)]
    c.close()
    assert flights[-1][0].cancelled(), "closing the file cancels what is still being fetched"


def test_a_reader_that_jumps_around_starts_no_background_fetch_and_readinto_fills_from_the_pieces():
    c, calls, _ = _ahead_cache(1000, 4, piece=333)
    c._fetch(50_000, 50_010)   # a jump far from the front (the first read was not at the start)
    c._fetch(20_000, 20_010)   # behind the front
    assert [k for k, *_ in calls] == ["sync", "sync"]
    rnd = random.Random(5)
    for _ in range(2000):
        start = rnd.randrange(0, len(DATA))
        out = bytearray(rnd.choice([1, 333, 999, 1000, 2500, 5000]))
        n = c.readinto(start, memoryview(out))
        assert out[:n] == DATA[start:start + len(out)] and n == min(len(out), len(DATA) - start)
        assert len(c.blocks) <= c.maxblocks
        if c._flight is not None:  # finish background fetches as the loop would
            f, a, z = c._flight[2], c._flight[0] * 1000, min((c._flight[1] + 1) * 1000, len(DATA))
            if not f.done():
                f.set_result([DATA[a:z]])


def _land_all(flights) -> None:
    """Answer every background fetch still open, as the event loop would."""
    for f, a, z in flights:
        if not f.done():
            f.set_result([DATA[a:z]])


def test_a_reader_going_forward_in_several_places_has_each_run_read_ahead():
    """DCP's FsspecReader reads a file's tensors in its plan's order: the large ones front to back, sometimes
    skipping one it reads later, with the small ones (kept at the file's end) read between them. The first read
    two reads of the run fetch their blocks themselves (the second is the first to go on from one); every later
    block of the run comes from a background fetch, as far ahead as the reads are long."""
    c, calls, flights = _ahead_cache(1000, 8)
    tail = (90_000, 90_010)
    assert c._fetch(*tail) == DATA[90_000:90_010]        # the small items first: the front is the end at once
    pos = 0
    for size, skip in ((1500, 0), (2000, 0), (1700, 1200), (2500, 0), (1000, 1500), (2200, 0)):
        pos += skip
        _land_all(flights)
        assert c._fetch(pos, pos + size) == DATA[pos:pos + size]
        pos += size
        assert c._fetch(*tail) == DATA[90_000:90_010]
    syncs = [(a, z) for kind, a, z in calls if kind == "sync"]
    assert syncs == [(90_000, 91_000), (0, 2000), (2000, 4000)]
    assert [(a, z) for kind, a, z in calls if kind == "ahead" and a < 90_000] == [
        (4000, 8000), (8000, 11_000), (11_000, 13_000), (13_000, 16_000), (16_000, 18_000)]


def test_blocks_a_forward_reader_is_done_with_go_before_those_fetched_ahead():
    """A block fetched ahead while the reader went on elsewhere is still there when the reader comes back for
    it: the blocks it read to their end going forward are evicted first (not the least recently used)."""
    c, calls, flights = _ahead_cache(1000, 6)
    c._fetch(0, 1500)                       # fetches block 0 and starts 1-2 in the background
    _land_all(flights)
    pos = 4000                              # skips block 3 (skipped items are read later, as DCP does)
    for _ in range(8):
        c._fetch(pos, pos + 1000)
        _land_all(flights)
        pos += 1000
    calls.clear()
    assert c._fetch(1500, 3000) == DATA[1500:3000]
    assert [k for k, *_ in calls if k == "sync"] == [], "blocks 1-2 are still cached"


def test_blocks_read_whole_going_forward_are_not_fetched_ahead_again_until_the_reader_comes_back_for_one():
    c, calls, flights = _ahead_cache(1000, 4)
    for off in (5000, 6000, 7000, 8000, 9000):  # a run read block by block, whole: blocks 6-9 done with
        _land_all(flights)
        c._fetch(off, off + 1000)
    _land_all(flights)
    calls.clear()
    for off in (2000, 3000, 4000):  # a run further back reaches them: only block 4 is missing
        c._fetch(off, off + 1000)
        _land_all(flights)
    fetched = {b for _, a, z in calls for b in range(a // 1000, -(-z // 1000))}
    assert fetched == {2, 3, 4}, "blocks 6-9, read whole and evicted since, are not fetched again (5 is kept)"
    calls.clear()
    c._fetch(6500, 6600)                        # it came back for one after all
    _land_all(flights)
    c._fetch(7000, 8000)
    _land_all(flights)
    assert calls[0] == ("sync", 6000, 7000)
    assert any(kind == "ahead" for kind, *_ in calls), "what the reader is taken for is forgotten: read ahead again"
