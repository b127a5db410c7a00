import asyncio
import os

import anyio
import pytest

from epochfs.common import errors
from epochfs.common.blocks import crc32c
from epochfs.common.kv import MemoryKV, RocksBulk, RocksKV, RocksSpace, prefix_end
from epochfs.datanode import keys
from epochfs.datanode.blockstore import (BULK, BULK_MIN, CHUNK_SIZE, FILE_DIRS, FILED, PACKED, SPACED, ZEROED,
                                        BlockStore, Purger, block_file)
from epochfs.datanode.scrubber import Scrubber


def joined(bufs) -> bytes:
    return b"".join(bytes(b) for b in bufs)


def seq_chunk(seq: int, index: int) -> bytes:
    """The key of chunk `index` of the small block copy stored as number `seq` (the chunks key space)."""
    return keys.seq_chunks(seq) + index.to_bytes(4, "big")


def test_put_read_and_replication_jobs_in_one_batch():
    s = BlockStore(MemoryKV())
    data = b"x" * 1000
    s.put(5, data, crc32c(data), [(2, "127.0.0.1:2"), (3, "127.0.0.1:3")])
    assert joined(s.read(5)) == data and joined(s.read(5, 10, 5)) == data[10:15]
    assert sorted((t, b) for t, b, _ in s.due_replications(10)) == [(2, 5), (3, 5)]
    s.complete(2, 5)
    assert [(t, b) for t, b, _ in s.due_replications(10)] == [(3, 5)]


def test_wrong_crc_on_put_is_refused():
    s = BlockStore(MemoryKV())
    with pytest.raises(errors.CorruptBlock):
        s.put(1, b"abc", 12345)
    assert not s.has(1)


def test_flipped_byte_is_detected_on_read_of_its_chunk_only():
    kv = MemoryKV()
    s = BlockStore(kv, chunk_size=4)
    data = b"abcdefghij"  # chunks abcd efgh ij
    s.put(1, data, crc32c(data))
    raw = bytearray(kv.get(keys.chunk(1, 1)))
    raw[-1] ^= 0xFF
    kv.put(keys.chunk(1, 1), bytes(raw))
    assert joined(s.read(1, 0, 4)) == b"abcd" and joined(s.read(1, 8)) == b"ij"
    with pytest.raises(errors.CorruptBlock):
        s.read(1, 2, 3)


def test_ranges_across_chunks():
    s = BlockStore(MemoryKV(), chunk_size=7)
    data = bytes(range(256)) * 3
    s.put(9, data, crc32c(data))
    for off, n in [(0, -1), (0, 7), (3, 11), (6, 1), (7, 7), (700, 100), (767, 1), (768, 5)]:
        assert joined(s.read(9, off, n)) == (data[off:] if n < 0 else data[off:off + n]), (off, n)
    crc, chunks = s.read_raw(9)
    assert crc == crc32c(data) and joined(chunks) == data


def test_wrong_combined_crc_is_refused_for_multi_chunk_blocks():
    s = BlockStore(MemoryKV(), chunk_size=3)
    with pytest.raises(errors.CorruptBlock):
        s.put(2, b"abcdefgh", crc32c(b"abcdefgX"))
    assert not s.has(2) and s.used == 0


def test_delete_drops_block_and_jobs():
    s = BlockStore(MemoryKV())
    s.put(1, b"abc", crc32c(b"abc"), [(2, "a:1")])
    s.delete([1])
    assert not s.has(1) and s.due_replications(10) == [] and s.used == 0


def test_deleted_block_is_remembered_so_a_late_replica_push_is_dropped():
    s = BlockStore(MemoryKV())
    s.put(7, b"abc", crc32c(b"abc"))
    assert not s.recently_deleted(7)
    s.delete([7])
    assert s.recently_deleted(7) and not s.has(7)


# ---------------------------------------------------------------- the old bulk layout (one ingested SST per block)
def bulk_keys(kv) -> list[bytes]:
    return [k for k, _ in kv.bulk.scan(keys.CHUNKS)]


def pending(kv) -> list[bytes]:
    return list(kv.scan_keys(keys.PENDING, prefix_end(keys.PENDING)))


def _old_bulk(kv, bid: int, data: bytes, chunk_size: int) -> None:
    """Store a block as a store did in its bulk key space before block files (layout BULK), in the generation
    RocksBulk.target names: its CRC-prefixed chunks ingested, then its meta."""
    gen = kv.bulk.target()
    kv.bulk.ingest([(keys.chunk(bid, i), crc32c(data[o:o + chunk_size]).to_bytes(4, "big") + data[o:o + chunk_size])
                    for i, o in enumerate(range(0, len(data), chunk_size))], gen)
    kv.put(keys.meta(bid), len(data).to_bytes(8, "big") + crc32c(data).to_bytes(4, "big") + BULK +
           (gen.to_bytes(4, "big") if gen else b""))


def test_a_block_in_the_old_bulk_layout_is_read_deleted_and_purged_and_a_store_without_files_batches_all():
    kv = MemoryKV(bulk=True)
    big, small = bytes(range(23)), b"tiny"
    _old_bulk(kv, 1, big, 4)
    s = BlockStore(kv, chunk_size=4, bulk_min=10)
    assert s.count == 1 and s.used == 23
    s.put(2, small, crc32c(small))
    s.put(3, big, crc32c(big))  # no files folder: a large block goes through the batch
    assert bulk_keys(kv) == [keys.chunk(1, i) for i in range(6)] and kv.get(keys.chunk(1, 0)) is None
    assert kv.chunks.get(seq_chunk(1, 0)) is not None and kv.chunks.get(seq_chunk(2, 5)) is not None
    assert pending(kv) == []
    for off, n in [(0, -1), (3, 9), (20, 3), (22, 10)]:
        want = big[off:] if n < 0 else big[off:off + n]
        assert joined(s.read(1, off, n)) == want and joined(s.read(3, off, n)) == want
    s.delete([1, 2])
    assert not s.has(1) and s.used == 23 and s.count == 1 and pending(kv) == [keys.pending(1)]
    assert s.purge(limit=1) == 1 and bulk_keys(kv) == [] and pending(kv) == [] and s.purge() == 0


def test_a_corrupt_bulk_chunk_fails_its_read_and_the_scrubber_finds_it():
    kv = MemoryKV(bulk=True)
    data = bytes(range(12))
    _old_bulk(kv, 3, data, 4)
    s = BlockStore(kv, chunk_size=4, bulk_min=10)
    raw = bytearray(kv.bulk.get(keys.chunk(3, 2)))
    raw[-1] ^= 1
    kv.bulk.ingest([(keys.chunk(3, 2), bytes(raw))])
    assert joined(s.read(3, 0, 8)) == data[:8]
    with pytest.raises(errors.CorruptBlock):
        s.read(3, 8)
    sc = Scrubber(s, bytes_per_s=1 << 20)
    sc.scan(1 << 20)
    assert s.bad == {3} and sc.totals["sweeps"] == 1


def test_an_ingest_without_its_meta_is_dropped_on_restart():
    """What a crash between the ingest and the meta's batch left: chunks under a pending marker, purged."""
    kv = MemoryKV(bulk=True)
    kv.put(keys.pending(4), b"")
    kv.bulk.ingest([(keys.chunk(4, 0), b"\0\0\0\0orphan")])
    s = BlockStore(kv, chunk_size=4, bulk_min=10)
    anyio.run(Purger(s).run_once)
    assert bulk_keys(kv) == [] and pending(kv) == [] and not s.has(4)


def test_a_block_in_the_old_bulk_layout_written_again_leaves_nothing_there(tmp_path):
    kv = MemoryKV(bulk=True)
    data = bytes(range(16))
    _old_bulk(kv, 5, data, 4)
    s = BlockStore(kv, chunk_size=4, bulk_min=10)
    s.put(5, data, crc32c(data))  # a repair push
    s.purge()
    assert bulk_keys(kv) == [] and joined(s.read(5)) == data and s.count == 1 and s.used == 16


def test_bulk_blocks_in_rocksdb_survive_reopen_and_deletes_free_their_files(tmp_path):
    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    blocks = {bid: os.urandom(BULK_MIN + bid * 1000) for bid in (1, 2, 3)}
    for bid, data in blocks.items():
        _old_bulk(kv, bid, data, CHUNK_SIZE)
    s = BlockStore(kv)
    small = os.urandom(1000)
    s.put(9, small, crc32c(small))
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv)
    for bid, data in blocks.items():
        assert joined(s.read(bid)) == data
        assert joined(s.read(bid, CHUNK_SIZE - 5, 1 << 20)) == data[CHUNK_SIZE - 5:CHUNK_SIZE - 5 + (1 << 20)]
    def ssts() -> list[str]:
        return sorted(p.name for p in path.glob("*.sst"))

    before = ssts()
    s.delete([2])
    assert s.purge() == 1 and len(ssts()) == len(before) - 1, "the deleted block's file is gone at once"
    assert not s.has(2) and joined(s.read(1)) == blocks[1] and joined(s.read(3)) == blocks[3]
    assert joined(s.read(9)) == small and s.count == 3
    # a crash between an ingest and its meta: the next open drops the orphan
    kv.put(keys.pending(7), b"")
    kv.bulk.ingest([(keys.chunk(7, 0), b"\0\0\0\0orphan")])
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv)
    assert s.purge() == 1 and kv.bulk.get(keys.chunk(7, 0)) is None and kv.get(keys.pending(7)) is None
    assert joined(s.read(3)) == blocks[3]
    kv.close()


def _held(obj, name: str):
    """Hold every call of `obj.<name>` (put_async's worker thread: a bulk ingest, a file write) until `release` is
    set; `entered` is set once one waits."""
    import threading
    entered, release = threading.Event(), threading.Event()
    real = getattr(obj, name)

    def held(*args, **kw):
        entered.set()
        assert release.wait(10)
        real(*args, **kw)
    setattr(obj, name, held)
    return entered, release


async def _until(event) -> None:
    while not event.is_set():
        await asyncio.sleep(0.005)


def test_puts_of_one_large_block_take_turns_and_count_it_once(tmp_path):
    kv, s = _filed(tmp_path)
    a, b = os.urandom(BULK_MIN), os.urandom(BULK_MIN)
    entered, release = _held(s, "_write_large")
    order = []

    async def put(bid, data):
        await s.put_async(bid, data, crc32c(data))
        order.append(bid if data is not b else -bid)

    async def main():
        first = asyncio.ensure_future(put(1, a))
        await _until(entered)
        second = asyncio.ensure_future(put(1, b))  # a retry of the same block with other bytes: after the first
        third = asyncio.ensure_future(put(2, a))
        await asyncio.sleep(0.05)
        assert order == [] and s._storing.keys() == {1, 2}  # the second put of 1 waits, outside
        release.set()
        await asyncio.gather(first, second, third)
    asyncio.run(main())
    assert order.index(1) < order.index(-1), "the second put of block 1 waited for the first"
    assert joined(s.read(1)) == b and joined(s.read(2)) == a
    assert s.count == 2 and s.used == 2 * BULK_MIN and s._storing == {}
    kv.close()


def test_a_corrupt_large_block_in_a_batch_is_that_blocks_error_and_the_others_are_stored(tmp_path):
    kv, s = _filed(tmp_path)
    big, bad, small = os.urandom(BULK_MIN), os.urandom(BULK_MIN), os.urandom(1000)
    errs = asyncio.run(s.store_many([(1, memoryview(big), crc32c(big), []), (2, memoryview(bad), 123, []),
                                     (3, memoryview(small), crc32c(small), [(4, "127.0.0.1:4")])]))
    assert errs == {1: "CorruptBlock"}
    assert joined(s.read(1)) == big and joined(s.read(3)) == small and not s.has(2)
    assert [(t, bid) for t, bid, _ in s.due_replications(10)] == [(4, 3)]
    kv.close()


def test_bulk_blocks_in_several_generations_are_each_read_and_purged_where_they_are(tmp_path, monkeypatch):
    """The bulk space grew in generations (column families) of FILES_PER_GEN files: a block is read from the one its
    meta names, across a reopen (which finds every generation); a block written again (now to a file) has its old
    copy purged from its generation, and a deleted block's file goes from its own."""
    monkeypatch.setattr(RocksBulk, "FILES_PER_GEN", 3)
    path = tmp_path / "db"
    kv = RocksKV.open(path, bulk=True)
    blocks = {i: os.urandom(10 + i) for i in range(1, 8)}  # 3 chunks each: one file per block
    for i in range(1, 6):
        _old_bulk(kv, i, blocks[i], 4)
    assert [_gens(kv, g) for g in range(2)] == [[1, 2, 3], [4, 5]]
    kv.close()
    kv = RocksKV.open(path, bulk=True)  # every generation found again, the newest with room for one more file
    for i in (6, 7):
        _old_bulk(kv, i, blocks[i], 4)
    assert [_gens(kv, g) for g in range(3)] == [[1, 2, 3], [4, 5, 6], [7]]
    s = BlockStore(kv, chunk_size=4, bulk_min=8, files=tmp_path / "files")
    assert all(joined(s.read(i)) == blocks[i] and joined(s.read(i, 5, 4)) == blocks[i][5:9] for i in blocks)
    s.put(2, blocks[2], crc32c(blocks[2]))  # a copy written again (a repair): to a file
    s.delete([5])
    assert s.purge() == 2
    assert [_gens(kv, g) for g in range(3)] == [[1, 3], [4, 6], [7]]
    assert all(joined(s.read(i)) == blocks[i] for i in blocks if i != 5) and not s.has(5)
    kv.close()


def _gens(kv, gen: int) -> list[int]:
    """The blocks whose chunks are in bulk generation `gen`."""
    return sorted({int.from_bytes(k[1:9], "big") for k, _ in kv.bulk.scan(keys.CHUNKS, gen=gen)})


@pytest.mark.parametrize("where", ["bulk-space", "chunks-space", "main-space"])
def test_a_missing_chunk_fails_only_the_reads_that_need_it(tmp_path, where):
    """Reads of several chunks go through one ordered scan: a hole in it is NoSuchBlock, not a short answer.
    main-space: a small block stored before the chunks space (its chunks beside the metas)."""
    kv = RocksKV.open(tmp_path / "db", bulk=True)
    chunks = kv.chunks
    try:
        if where == "main-space":
            kv.chunks = None
        data = bytes(range(30))  # chunks 0..7, the last one short
        if where == "bulk-space":
            _old_bulk(kv, 9, data, 4)
        s = BlockStore(kv, chunk_size=4, bulk_min=1000)
        if where != "bulk-space":
            s.put(9, data, crc32c(data))
        kv.chunks = chunks
        assert joined(s.read(9, 3, 20)) == data[3:23] and joined(s.read(9)) == data
        if where == "bulk-space":
            kv.bulk.drop(keys.chunk(9, 5), keys.chunk(9, 6))
        else:
            with kv.batch() as b:
                if where == "chunks-space":  # the store's first small block: copy number 1
                    b.delete(seq_chunk(1, 5), column_family=chunks.handle)
                else:
                    b.delete(keys.chunk(9, 5))
        assert joined(s.read(9, 0, 20)) == data[:20] and joined(s.read(9, 24, 6)) == data[24:]
        for off, n in ((18, 4), (10, 20), (0, -1), (21, 1)):
            with pytest.raises(errors.NoSuchBlock):
                s.read(9, off, n)
    finally:
        kv.close()


def test_store_many_stores_blocks_and_jobs_in_one_batch_and_refuses_a_bad_one_alone(tmp_path):
    kv = RocksKV.open(tmp_path / "db", bulk=True)
    s = BlockStore(kv, files=tmp_path / "files")
    small = [os.urandom(n) for n in (0, 1, 1000, CHUNK_SIZE + 5)]
    big = os.urandom(BULK_MIN)  # to a file, in the same call
    blocks = [(10 + i, d, crc32c(d), [(2, "h:2")]) for i, d in enumerate(small)]
    blocks.insert(2, (99, b"corrupt", crc32c(b"other"), [(2, "h:2")]))
    blocks.append((50, big, crc32c(big), [(3, "h:3")]))
    errs = asyncio.run(s.store_many(blocks, jobs_due_in=5.0))
    assert errs == {2: "CorruptBlock"} and not s.has(99)
    for i, d in enumerate(small):
        assert joined(s.read(10 + i)) == d
    assert joined(s.read(50)) == big
    assert s.count == 5 and s.used == sum(map(len, small)) + len(big)
    assert sorted((t, b) for t, b, _ in s.due_replications(100, now=float("inf"))) == \
        [(2, 10), (2, 11), (2, 12), (2, 13), (3, 50)]
    assert s.due_replications(100) == []  # delayed: the primary pushes from memory first
    kv.close()


def test_a_store_written_with_crc32c_table_checksums_still_opens_reads_and_takes_writes(tmp_path, monkeypatch):
    """Stores before XXH3 table checksums: each file names its own checksum, so they read as they were."""
    import rocksdict

    def crc32c_options() -> rocksdict.Options:
        opts = rocksdict.Options(raw_mode=True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        table = rocksdict.BlockBasedOptions()
        table.set_checksum_type(rocksdict.ChecksumType.crc32c())
        opts.set_block_based_table_factory(table)
        return opts

    def stored(kv: RocksKV, blocks: dict[int, bytes]) -> BlockStore:
        s = BlockStore(kv)
        for bid, data in blocks.items():
            s.put(bid, data, crc32c(data))
        kv.flush_memtables()  # into table files, under the checksum the store was opened with
        return s

    path = tmp_path / "blocks"
    old = {1: os.urandom(BULK_MIN + 10), 2: os.urandom(1000)}
    with monkeypatch.context() as m:
        m.setattr(RocksKV, "_options", staticmethod(crc32c_options))
        kv = RocksKV.open(path, bulk=True)
        stored(kv, old)
        kv.close()
    kv = RocksKV.open(path, bulk=True)
    new = {3: os.urandom(BULK_MIN + 20), 4: os.urandom(2000)}
    s = stored(kv, new)
    for bid, data in {**old, **new}.items():
        assert joined(s.read(bid)) == data
    for cf in (kv._db, kv._db.get_column_family(RocksSpace.CHUNKS)):
        cf.compact_range(None, None)  # old and new files merged under the new checksum
    for bid, data in {**old, **new}.items():
        assert joined(s.read(bid)) == data
    kv.close()


def test_small_blocks_go_to_the_chunks_space_and_those_stored_before_it_are_read_rewritten_and_deleted(tmp_path):
    """A store from before the chunks space has its small blocks' chunks beside the metas: they read as they
    were; a block written again moves to the chunks space (its old chunks deleted in the same batch), a deleted one
    leaves nothing in either."""
    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    chunks, kv.chunks = kv.chunks, None
    old = BlockStore(kv, chunk_size=1000)
    blocks = {bid: os.urandom(2500 + bid) for bid in (1, 2, 3)}
    for bid, data in blocks.items():
        old.put(bid, data, crc32c(data))
    kv.chunks = chunks
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, chunk_size=1000)

    def main_chunks() -> set[int]:
        return {int.from_bytes(k[1:9], "big") for k, _ in kv.scan(keys.CHUNKS, prefix_end(keys.CHUNKS))}

    def spaced_chunks() -> int:
        """How many block copies have chunks in the chunks space (under their arrival numbers)."""
        return len({k[:9] for k, _ in kv.chunks.scan(keys.SEQ_CHUNKS, prefix_end(keys.SEQ_CHUNKS))})

    assert main_chunks() == {1, 2, 3} and spaced_chunks() == 0
    for bid, data in blocks.items():
        assert joined(s.read(bid)) == data and joined(s.read(bid, 900, 300)) == data[900:1200]
    new = os.urandom(1700)
    s.put(2, new, crc32c(new))
    fresh = os.urandom(3000)
    s.put_many([(4, memoryview(fresh), crc32c(fresh), []), (3, memoryview(blocks[3]), crc32c(blocks[3]), [])])
    assert main_chunks() == {1} and spaced_chunks() == 3
    assert joined(s.read(2)) == new and joined(s.read(3)) == blocks[3] and joined(s.read(4)) == fresh
    s.delete([1, 2])
    assert main_chunks() == set() and spaced_chunks() == 2 and s.count == 2
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, chunk_size=1000)
    assert joined(s.read(3)) == blocks[3] and joined(s.read(4)) == fresh and not s.has(1) and not s.has(2)
    kv.close()


def test_small_blocks_are_keyed_by_arrival_so_the_chunks_space_only_grows(tmp_path):
    """A DataNode stores its own primaries and the replicas other primaries push: block ids of several streams that
    interleave. The chunks go under each copy's arrival number, so every write lands past the keys before it (a
    flushed file never overlaps the last ones: compaction moves files instead of rewriting them), and a reopened
    store goes on past the numbers it holds."""
    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, chunk_size=1000)
    arrivals = [(900, os.urandom(2500)), (12, os.urandom(10)), (901, os.urandom(1000)), (13, os.urandom(3000))]
    for bid, data in arrivals[:2]:
        s.put(bid, data, crc32c(data))
    s.put_many([(bid, memoryview(d), crc32c(d), []) for bid, d in arrivals[2:]])

    def chunk_keys() -> list[bytes]:
        return [k for k, _ in kv.chunks.scan(keys.SEQ_CHUNKS, prefix_end(keys.SEQ_CHUNKS))]

    assert chunk_keys() == [seq_chunk(n, i) for n, c in ((1, 3), (2, 1), (3, 1), (4, 3)) for i in range(c)]
    assert all(joined(s.read(bid)) == d and joined(s.read(bid, 5, 995)) == d[5:1000] for bid, d in arrivals)
    s.delete([13])  # the newest copy: its chunks go with its meta, and its number can be taken again
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, chunk_size=1000)
    again = os.urandom(1500)
    s.put(12, again, crc32c(again))  # written again (a repair): a new number past the others, the old chunks gone
    assert chunk_keys() == [seq_chunk(n, i) for n, c in ((1, 3), (3, 1), (4, 2)) for i in range(c)]
    assert joined(s.read(12)) == again and joined(s.read(900)) == arrivals[0][1] and not s.has(13)
    kv.close()


def test_blocks_of_the_chunks_space_keyed_by_block_id_are_read_rewritten_and_deleted(tmp_path):
    """A store from before arrival numbers has its small blocks' chunks in the chunks space under their block ids
    (layout SPACED): they read as they were, a copy written again moves to an arrival number (its old chunks deleted
    in the same batch), a deleted one leaves nothing."""
    kv = RocksKV.open(tmp_path / "blocks", bulk=True)
    s = BlockStore(kv, chunk_size=1000)
    blocks = {bid: os.urandom(1500 + bid) for bid in (1, 2, 3)}
    with kv.batch() as b:  # as the old code wrote them
        for bid, data in blocks.items():
            b.put(keys.meta(bid), len(data).to_bytes(8, "big") + crc32c(data).to_bytes(4, "big") + SPACED)
            for i in range(0, len(data), 1000):
                piece = data[i:i + 1000]
                b.put(keys.chunk(bid, i // 1000), crc32c(piece).to_bytes(4, "big") + piece,
                      column_family=kv.chunks.handle)

    def by_id() -> set[int]:
        return {int.from_bytes(k[1:9], "big") for k, _ in kv.chunks.scan(keys.CHUNKS, prefix_end(keys.CHUNKS))}

    assert all(joined(s.read(bid)) == d and joined(s.read(bid, 900, 300)) == d[900:1200] for bid, d in blocks.items())
    s.put(2, blocks[2], crc32c(blocks[2]))
    s.delete([3])
    assert by_id() == {1} and [k[:9] for k, _ in kv.chunks.scan(keys.SEQ_CHUNKS, prefix_end(keys.SEQ_CHUNKS))] == \
        [keys.seq_chunks(1)] * 2
    assert joined(s.read(1)) == blocks[1] and joined(s.read(2)) == blocks[2] and not s.has(3)
    kv.close()


# ---------------------------------------------------------------- large blocks as files of their own (FILED)
def _filed(tmp_path, **kw):
    kv = RocksKV.open(tmp_path / "blocks", bulk=True)
    return kv, BlockStore(kv, files=tmp_path / "files", **kw)


def _file_of(s: BlockStore, block_id: int):
    meta = s.kv.get(keys.meta(block_id))
    assert meta[12:13] == FILED
    return block_file(s.files, block_id, int.from_bytes(meta[13:21], "big"))


def _doomed(kv) -> list[int]:
    return [int.from_bytes(k[1:], "big") for k in kv.scan_keys(keys.DOOMED_FILES, prefix_end(keys.DOOMED_FILES))]


def test_a_large_block_is_a_file_of_its_own_read_by_ranges_checked_and_deleted_with_its_copy(tmp_path):
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)
    data = os.urandom(3 * CHUNK_SIZE + 1000)  # above bulk_min: a file; the last chunk short
    s.put(1, data, crc32c(data), [(2, "127.0.0.1:2")])
    path = _file_of(s, 1)
    assert path.read_bytes() == data and _doomed(kv) == [] and s.kv.get(keys.pending(1)) is None
    assert list(kv.bulk.scan(keys.CHUNKS)) == [], "nothing of it in RocksDB but its meta"
    assert joined(s.read(1)) == data and s.read_raw(1)[0] == crc32c(data)
    for off, n in [(0, 1), (CHUNK_SIZE - 5, 10), (2 * CHUNK_SIZE, CHUNK_SIZE + 1000), (3 * CHUNK_SIZE + 999, 50)]:
        assert joined(s.read(1, off, n)) == data[off:off + n]
    kv.close()
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)  # reopened: found again, counted
    assert joined(s.read(1)) == data and s.count == 1 and s.used == len(data)
    raw = bytearray(path.read_bytes())
    raw[2 * CHUNK_SIZE + 7] ^= 1  # rot in chunk 2: a read touching it fails, the others pass
    path.write_bytes(bytes(raw))
    with pytest.raises(errors.CorruptBlock):
        s.read(1, 2 * CHUNK_SIZE, 10)
    assert joined(s.read(1, 0, CHUNK_SIZE)) == data[:CHUNK_SIZE]
    path.write_bytes(bytes(raw[:CHUNK_SIZE]))  # cut short
    with pytest.raises(errors.CorruptBlock):
        s.read(1, 2 * CHUNK_SIZE, 10)
    s.delete([1])
    assert not s.has(1) and s.count == 0 and path.exists() and _doomed(kv) != []
    assert s.purge(limit=1) == 1 and not path.exists() and _doomed(kv) == []
    kv.close()


def _files(s: BlockStore) -> list:
    return [p for p in s.files.rglob("*") if p.is_file() and p.parent.name != "packs"]


def test_a_large_block_of_zeros_stores_no_bytes_reads_back_whole_and_a_forged_one_is_refused(tmp_path):
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)
    n = 3 * CHUNK_SIZE + 1000
    zeros = bytes(n)
    s.put(1, zeros, crc32c(zeros), [(2, "127.0.0.1:2")])
    asyncio.run(s.put_async(2, bytearray(zeros), crc32c(zeros)))
    for bid in (1, 2):
        assert s.kv.get(keys.meta(bid))[12:13] == ZEROED
    assert _files(s) == [] and _doomed(kv) == [] and list(kv.bulk.scan(keys.CHUNKS)) == [], "no bytes anywhere"
    assert joined(s.read(1)) == zeros and s.read_raw(2)[0] == crc32c(zeros) and (2, 1) in s._jobs
    assert joined(s.read(2, CHUNK_SIZE - 5, 10)) == bytes(10) and joined(s.read(2, n - 3, 50)) == bytes(3)
    bufs, crcs = s.read_unread(1, 0, 2 * CHUNK_SIZE)
    assert joined(bufs) == bytes(2 * CHUNK_SIZE) and crcs is None, "made here, sent as bytes, nothing to check"
    # zeros but one byte: a file as any block; zeros with another block's CRC: refused, nothing stored
    one = bytearray(zeros)
    one[n - 1] = 1
    s.put(3, one, crc32c(one))
    assert len(_files(s)) == 1 and joined(s.read(3)) == one
    with pytest.raises(errors.CorruptBlock):
        s.put(4, zeros, crc32c(one))
    # data forged to the CRC32C of zeros (CRC is linear: flip bit sets that cancel) is compared, not trusted
    forged = _forge_zero_crc(n)
    assert crc32c(forged) == crc32c(zeros) and any(forged)
    asyncio.run(s.put_async(5, forged, crc32c(zeros)))
    assert s.kv.get(keys.meta(5))[12:13] == FILED and joined(s.read(5)) == forged
    # `used` is what the copies hold on this node (the heartbeat's, the capacity check's): the zeros' nothing
    assert not s.has(4) and s.count == 4 and s.used == 2 * n
    sc = Scrubber(s, bytes_per_s=1 << 30)  # a scrub job reads the two files, not the zeros: done at its total
    sc.start_job("j")
    assert sc.scan(1 << 30) == 2 * n and sc.job["bytes"] == sc.job["total"] and sc.job["blocks"] == 4
    assert sc.job["done"] and s.bad == set()
    kv.close()
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)  # reopened: found again, counted
    assert joined(s.read(1)) == zeros and s.count == 4 and s.used == 2 * n
    s.put(1, one, crc32c(one))  # written over with data: a file; a delete of the zeros leaves nothing to purge
    assert joined(s.read(1)) == one and len(_files(s)) == 3 and s.count == 4 and s.used == 3 * n
    s.delete([2])
    assert not s.has(2) and s.count == 3 and _doomed(kv) == [] and s.used == 3 * n
    s.delete([1, 3])
    assert s.count == 1 and s.used == n
    kv.close()


def _forge_zero_crc(n: int) -> bytes:
    """`n` bytes, not all zeros, whose CRC32C is that of `n` zeros: a set of single-bit flips whose CRC differences
    cancel (GF(2) elimination over the flips' effects on the CRC)."""
    base = crc32c(bytes(n))
    rows: dict[int, tuple[int, int]] = {}  # pivot bit -> (CRC difference, flips as a bit mask over positions)
    for i in range(64):
        buf = bytearray(n)
        buf[i // 8] = 1 << (i % 8)
        d, mask = crc32c(buf) ^ base, 1 << i
        while d:
            top = d.bit_length() - 1
            if top not in rows:
                rows[top] = (d, mask)
                break
            d, mask = d ^ rows[top][0], mask ^ rows[top][1]
        else:
            out = bytearray(n)
            for j in range(64):
                if mask >> j & 1:
                    out[j // 8] ^= 1 << (j % 8)
            return bytes(out)
    raise AssertionError("no dependent set of flips among 64")


@pytest.mark.parametrize("direct", [True, False], ids=["o-direct", "page-cache"])
def test_large_blocks_files_are_written_past_the_page_cache_where_the_folder_takes_it(tmp_path, monkeypatch, direct):
    """Where the file system takes O_DIRECT a large block's file is written with it (through the store's aligned
    buffer, in pieces of its size, the tail padded and cut off again), else through the page cache; either way the
    file holds exactly the block's bytes, synced."""
    from epochfs.datanode import blockstore
    if not direct:
        monkeypatch.setattr(blockstore, "takes_direct_io", lambda folder: False)
    opened, synced = [], []
    real_open, real_sync = os.open, os.fdatasync
    monkeypatch.setattr(blockstore.os, "open", lambda path, flags, *a, **k: opened.append((str(path), flags)) or
                        real_open(path, flags, *a, **k))
    monkeypatch.setattr(blockstore.os, "fdatasync", lambda fd: synced.append(fd) or real_sync(fd))
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)
    sizes = {1: 4 << 20, 2: (9 << 20) + 123, 3: CHUNK_SIZE + 1}  # the buffer's size, past it twice, a short tail
    blocks = {b: os.urandom(n) for b, n in sizes.items()}
    for b, d in blocks.items():
        opened.clear()
        synced.clear()
        s.put(b, memoryview(d), crc32c(d))
        path = _file_of(s, b)
        flags = [f for p, f in opened if p == str(path)]
        assert len(flags) == 1 and bool(flags[0] & os.O_DIRECT) == direct
        assert path.stat().st_size == len(d) and path.read_bytes() == d and joined(s.read(b)) == d
        assert len(synced) == 1, "the file's bytes (and size) synced"
    s.close()
    kv.close()
    kv, s = _filed(tmp_path, bulk_min=CHUNK_SIZE)
    assert all(joined(s.read(b)) == d for b, d in blocks.items())
    kv.close()


def test_a_large_block_rewritten_goes_to_a_new_file_and_the_old_one_is_purged(tmp_path):
    kv, s = _filed(tmp_path)
    a, b = os.urandom(BULK_MIN), os.urandom(BULK_MIN)
    s.put(1, a, crc32c(a))
    old = _file_of(s, 1)
    s.put(1, b, crc32c(b))  # a repair push over a copy
    new = _file_of(s, 1)
    assert new != old and joined(s.read(1)) == b and s.count == 1 and s.used == len(b)
    assert s.purge() == 1 and not old.exists() and new.exists()
    small = b"x" * 100
    s.put(1, small, crc32c(small))  # and a small copy over it (through the batch): its file goes too
    assert s.purge() == 1 and not new.exists() and joined(s.read(1)) == small
    kv.close()


def test_a_missing_file_is_no_such_block_and_a_crash_leftover_file_is_purged(tmp_path):
    kv, s = _filed(tmp_path)
    data = os.urandom(BULK_MIN)
    s.put(1, data, crc32c(data))
    _file_of(s, 1).unlink()
    with pytest.raises(errors.NoSuchBlock):
        s.read(1)
    # a put that a crash stopped after its file, before its batch: the marker names the file, no meta does
    s._begin(2, memoryview(data), crc32c(data))
    seq = _doomed(kv)[0]
    leftover = block_file(s.files, 2, seq)
    leftover.write_bytes(data)
    kv.close()
    kv, s = _filed(tmp_path)
    assert not s.has(2) and s._seq > seq, "its number is not given out again"
    assert s.purge() == 1 and not leftover.exists()
    kv.close()


def test_a_file_a_power_cut_left_unnamed_is_swept_once_after_the_start_and_named_ones_stay(tmp_path):
    """A power cut after a put's file was synced and before its marker's WAL was: the next start finds a file that
    neither a meta nor a marker names. The Purger's sweep after the start deletes it; a stored copy's file, a
    marked leftover (purge's), a file being written meanwhile and a file of another name stay."""
    kv, s = _filed(tmp_path)
    data = os.urandom(BULK_MIN)
    s.put(1, data, crc32c(data))
    kept = _file_of(s, 1)
    s._begin(2, memoryview(data), crc32c(data))  # a crash after its file: the marker names it (purge's)
    marked = block_file(s.files, 2, _doomed(kv)[0])
    marked.write_bytes(data)
    unnamed = block_file(s.files, 3, 77)  # the power cut: its marker lost, the file synced
    unnamed.parent.mkdir(exist_ok=True)
    unnamed.write_bytes(data)
    stranger = kept.parent / "notes.txt"
    stranger.write_text("not a block")
    kv.close()
    kv, s = _filed(tmp_path)
    p = Purger(s)
    s._storing[4] = None  # a put of block 4 under way: its file (marker not yet seen here) is left alone
    writing = block_file(s.files, 4, 78)
    writing.parent.mkdir(exist_ok=True)
    writing.write_bytes(b"x")

    async def steps():
        return sum([(await p.run_once()).ok for _ in range(FILE_DIRS + 1)])
    assert asyncio.run(steps()) == 2  # the marked leftover (purge) and the unnamed file (sweep)
    assert not unnamed.exists() and not marked.exists()
    assert kept.exists() and joined(s.read(1)) == data and writing.exists() and stranger.exists()
    unnamed.write_bytes(data)  # once per start: later steps don't list the folders again
    assert asyncio.run(p.run_once()).ok == 0 and unnamed.exists()
    kv.close()


def test_a_large_block_is_written_off_the_event_loop_and_a_delete_or_cancel_meanwhile_leaves_no_file(tmp_path):
    kv, s = _filed(tmp_path)
    other, data = os.urandom(1000), os.urandom(BULK_MIN)
    s.put(9, other, crc32c(other))
    entered, release = _held(s, "_write_large")

    async def main():
        put = asyncio.ensure_future(s.put_async(1, data, crc32c(data), [(2, "127.0.0.1:2")]))
        await _until(entered)  # the file is being written: the loop goes on
        assert joined(s.read(9)) == other and not s.has(1)
        assert s.purge() == 0 and _doomed(kv) != [], "a file being written is not a leftover"
        s.delete([1])
        release.set()
        await put
        assert s.purge() == 1 and _doomed(kv) == [], "the deleted block's file goes"
        entered.clear()
        release.clear()
        put = asyncio.ensure_future(s.put_async(3, data, crc32c(data)))
        await _until(entered)
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put
        assert s.purge() == 0, "the file is still being written: not deleted under the writer"
        release.set()
        while s._storing:
            await asyncio.sleep(0.005)
    asyncio.run(main())
    assert not s.has(1) and not s.has(3) and s.count == 1 and s.due_replications(10) == []
    assert s.purge() == 1 and _doomed(kv) == [] and [p for p in s.files.rglob("*") if p.is_file() and p.parent.name != "packs"] == []
    kv.close()


def test_a_file_that_cannot_be_written_is_a_refused_write_and_leaves_no_block(tmp_path):
    kv, s = _filed(tmp_path)
    data = os.urandom(BULK_MIN)
    (s.files / "00").rename(s.files / "gone")  # its folder missing: the open fails (as on a full or failed disk)
    s._seq = 256  # the next copy's folder is "00"
    with pytest.raises(errors.Unavailable):
        asyncio.run(s.store(1, data, crc32c(data)))
    assert s.write_error and not s.has(1) and s.count == 0
    kv.close()


def test_a_purge_between_a_large_blocks_write_and_its_batch_leaves_its_file(tmp_path):
    """The purger runs on the loop: once the worker thread wrote the file, it may run before the put resumes to
    commit the meta. Seen in a suite run: a replica's file deleted under it, "its file 2.1 is missing"."""
    kv, s = _filed(tmp_path)
    data = os.urandom(BULK_MIN)
    real = s._write_large

    async def main():
        loop = asyncio.get_running_loop()

        def write_then_purge(*args):
            real(*args)
            loop.call_soon_threadsafe(s.purge)  # called back before the put's future resolves
        s._write_large = write_then_purge
        await s.put_async(1, data, crc32c(data))
    asyncio.run(main())
    assert joined(s.read(1)) == data and _doomed(kv) == []
    kv.close()


@pytest.mark.parametrize("direct", [True, False], ids=["direct-io", "no-direct-io"])
def test_small_blocks_survive_flushes_and_reopen_with_and_without_direct_io(tmp_path, monkeypatch, direct):
    """Flushes and compactions write past the page cache where the folder takes O_DIRECT; where it does not (tmpfs,
    some FUSE file systems: RocksDB would fail its first flush), the store writes through the page cache."""
    from epochfs.common import kv as kvmod
    if not direct:
        real_open = os.open

        def no_direct(path, flags, *a, **k):
            if flags & os.O_DIRECT:
                raise OSError(22, "Invalid argument")
            return real_open(path, flags, *a, **k)
        monkeypatch.setattr(kvmod.os, "open", no_direct)
        assert not kvmod.takes_direct_io(tmp_path)
    else:
        assert kvmod.takes_direct_io(tmp_path), "this test needs a folder that takes O_DIRECT (ext4, xfs)"
    assert not list(tmp_path.iterdir()), "the probe leaves no file"
    path = tmp_path / "blocks"
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, files=tmp_path / "files")
    blocks = {bid: os.urandom(50_000 + bid) for bid in range(1, 41)}
    for first in range(1, 41, 10):
        assert not s.put_many([(b, memoryview(blocks[b]), crc32c(blocks[b]), []) for b in range(first, first + 10)])
        kv.flush_memtables()  # four table files: a compaction
    kv._db.compact_range(None, None)
    kv.close()
    kv = RocksKV.open(path, bulk=True)
    s = BlockStore(kv, files=tmp_path / "files")
    assert all(joined(s.read(b)) == data for b, data in blocks.items()) and s.count == 40
    assert f"use_direct_io_for_flush_and_compaction: {int(direct)}" in (path / "LOG").read_text()
    kv.close()


# ---------------------------------------------------------------- small blocks in packs (PACKED)
def _pack_of(s: BlockStore, block_id: int) -> tuple[int, int]:
    meta = s.kv.get(keys.meta(block_id))
    assert meta[12:13] == PACKED
    return int.from_bytes(meta[13:21], "big"), int.from_bytes(meta[21:29], "big")


def _packs(s: BlockStore) -> list[int]:
    return sorted(int(p.name) for p in (s.files / "packs").iterdir())


@pytest.mark.parametrize("direct", [True, False], ids=["o-direct", "page-cache"])
def test_small_blocks_go_to_a_pack_read_by_ranges_checked_and_found_again(tmp_path, monkeypatch, direct):
    """Packs are written past the page cache where the file system takes O_DIRECT (each write then starts at a
    multiple of PACK_ALIGN), through it where not (tmpfs before Linux 6.6)."""
    from epochfs.datanode import blockstore
    if not direct:
        monkeypatch.setattr(blockstore, "takes_direct_io", lambda folder: False)
    kv, s = _filed(tmp_path)
    assert s.packs.direct == direct
    blocks = {bid: os.urandom(size) for bid, size in ((1, 1000), (2, 3 * CHUNK_SIZE + 77), (3, 0), (4, 50_000))}
    assert s.put_many([(b, memoryview(d), crc32c(d), [(2, "h:2")]) for b, d in blocks.items() if b != 4]) == {}
    s.put(4, blocks[4], crc32c(blocks[4]))
    assert {_pack_of(s, b)[0] for b in blocks} == {1}, "one pack"
    first = 1000 + 3 * CHUNK_SIZE + 77
    second = -(-first // blockstore.PACK_ALIGN) * blockstore.PACK_ALIGN if direct else first
    assert _pack_of(s, 2)[1] == 1000 and _pack_of(s, 4)[1] == second, "back to back in a write"
    assert list(kv.chunks.scan(keys.SEQ_CHUNKS)) == [], "no data in RocksDB"
    raw = (s.files / "packs" / "1").read_bytes()
    assert raw[:first] == blocks[1] + blocks[2] and raw[first:second] == bytes(second - first)
    assert raw[second:second + 50_000] == blocks[4] and not any(raw[second + 50_000:])
    for b, d in blocks.items():
        assert joined(s.read(b)) == d
    d = blocks[2]
    for off, n in [(0, 1), (CHUNK_SIZE - 5, 10), (2 * CHUNK_SIZE, CHUNK_SIZE + 77), (3 * CHUNK_SIZE + 70, 50)]:
        assert joined(s.read(2, off, n)) == d[off:off + n]
    assert sorted((t, b) for t, b, _ in s.due_replications(10)) == [(2, 1), (2, 2), (2, 3)]
    kv.close()
    kv, s = _filed(tmp_path)  # reopened: found again and counted; new writes go to a new pack
    assert all(joined(s.read(b)) == d for b, d in blocks.items()) and s.count == 4
    assert s.used == sum(map(len, blocks.values()))
    s.put(5, b"after", crc32c(b"after"))
    assert _pack_of(s, 5) == (2, 0) and joined(s.read(5)) == b"after"
    with pytest.raises(errors.CorruptBlock):
        s.put(6, b"bad", 1234)
    assert not s.has(6)
    kv.close()


def test_a_rotten_or_short_pack_is_a_bad_copy_and_a_missing_one_no_block(tmp_path):
    kv, s = _filed(tmp_path)
    a, b = os.urandom(2 * CHUNK_SIZE), os.urandom(5000)
    s.put_many([(1, memoryview(a), crc32c(a), []), (2, memoryview(b), crc32c(b), [])])
    path = s.files / "packs" / "1"
    raw = bytearray(path.read_bytes())
    raw[CHUNK_SIZE + 9] ^= 1  # chunk 1 of block 1
    path.write_bytes(bytes(raw))
    assert joined(s.read(1, 0, 100)) == a[:100], "chunk 0 still reads"
    with pytest.raises(errors.CorruptBlock):
        s.read(1)
    assert joined(s.read(2)) == b
    with open(path, "r+b") as f:
        f.truncate(2 * CHUNK_SIZE + 100)
    with pytest.raises(errors.CorruptBlock):
        s.read(2)
    kv.close()
    path.unlink()
    kv, s = _filed(tmp_path)
    with pytest.raises(errors.NoSuchBlock):
        s.read(2)
    kv.close()


def test_a_pack_is_deleted_once_its_copies_are_and_a_sparse_one_is_compacted(tmp_path, monkeypatch):
    from epochfs.datanode import blockstore
    monkeypatch.setattr(blockstore, "PACK_BYTES", 100_000)
    kv, s = _filed(tmp_path)
    data = {bid: os.urandom(20_000 + bid) for bid in range(1, 21)}
    for bid, d in data.items():
        s.put(bid, d, crc32c(d))
    assert _packs(s) == [1, 2, 3, 4, 5], "four blocks of ~20 KB to a pack of 100 KB"
    s.delete([1, 2, 3, 4])  # all of pack 1
    s.delete([5, 6, 7])  # three of pack 2's four: a sparse pack

    async def steps():
        return [(await Purger(s).run_once()).ok for _ in range(3)]
    # pack 1 deleted and block 8 moved out of pack 2, then pack 2 deleted, then nothing to do
    assert asyncio.run(steps()) == [2, 1, 0]
    assert _pack_of(s, 8)[0] == 6, "pack 5 is full: a new one"
    assert _packs(s) == [3, 4, 5, 6]
    left = {b: d for b, d in data.items() if b > 7}
    assert all(joined(s.read(b)) == d for b, d in left.items()) and s.count == len(left)
    assert s.used == sum(map(len, left.values()))
    kv.close()
    kv, s = _filed(tmp_path)
    assert all(joined(s.read(b)) == d for b, d in left.items()) and s.count == len(left)
    assert s.packs.live == {3: sum(len(data[b]) for b in (9, 10, 11, 12)),
                            4: sum(len(data[b]) for b in (13, 14, 15, 16)),
                            5: sum(len(data[b]) for b in (17, 18, 19, 20)), 6: len(data[8]), 7: 0}
    kv.close()


def test_a_compaction_keeps_what_a_delete_or_a_rewrite_did_meanwhile(tmp_path, monkeypatch):
    from epochfs.datanode import blockstore
    monkeypatch.setattr(blockstore, "PACK_BYTES", 100_000)
    kv, s = _filed(tmp_path)
    data = {bid: os.urandom(30_000) for bid in range(1, 7)}
    for bid, d in data.items():
        s.put(bid, d, crc32c(d))
    s.delete([1])  # pack 1: blocks 2 and 3 left, 60 of 90 KB: not sparse
    s.delete([2])  # 30 of 90: sparse
    entered, release = _held(s.packs, "flush")

    async def main():
        step = asyncio.ensure_future(s.compact_packs())
        await _until(entered)
        s.delete([3])  # deleted while its move is written: stays deleted
        release.set()
        return await step
    assert asyncio.run(main()) == 1
    assert not s.has(3) and s.count == 3
    assert asyncio.run(Purger(s).run_once()).ok == 1 and 1 not in _packs(s), "nothing of pack 1 is stored any more"
    assert all(joined(s.read(b)) == data[b] for b in (4, 5, 6))
    kv.close()


def test_a_delete_while_small_blocks_are_written_wins_and_a_crash_leftover_pack_goes(tmp_path):
    kv, s = _filed(tmp_path)
    a, b = os.urandom(200_000), os.urandom(100_000)  # together above INLINE_WRITE: written in the ingest thread
    entered, release = _held(s.packs, "write")

    async def main():
        put = asyncio.ensure_future(s.store_many([(1, memoryview(a), crc32c(a), []), (2, memoryview(b), crc32c(b), [])]))
        await _until(entered)
        s.delete([1])
        release.set()
        return await put
    assert asyncio.run(main()) == {}
    assert not s.has(1) and joined(s.read(2)) == b and s.count == 1 and s.packs.live[1] == len(b)
    # a crash between a pack write and its batch: the next open finds a pack no meta names, and deletes it
    s.packs.write(*s.packs.reserve(100), [memoryview(b"x" * 100)])
    s.delete([2])
    kv.close()
    assert _packs(s) == [1]
    kv, s = _filed(tmp_path)
    assert _packs(s) == [] and s.count == 0
    kv.close()


def test_a_compaction_reads_the_index_a_step_at_a_time(tmp_path, monkeypatch):
    from epochfs.datanode import blockstore
    monkeypatch.setattr(blockstore, "PACK_BYTES", 100_000)
    monkeypatch.setattr(blockstore, "COMPACT_SCAN", 3)
    kv, s = _filed(tmp_path)
    data = {bid: os.urandom(8192) for bid in range(1, 31)}  # twelve to a pack
    for bid, d in data.items():
        s.put(bid, d, crc32c(d))
    s.delete([b for b in range(1, 13) if b % 3])  # pack 1 keeps 3, 6, 9 and 12 of its twelve
    assert {_pack_of(s, b)[0] for b in (3, 6, 9, 12)} == {1} and _pack_of(s, 13)[0] == 2

    async def steps():
        return [await s.compact_packs() for _ in range(10)]
    # three metas read per step: 3, 6 and 9, then 12 (with 13 and 14), then the rest of the index for nothing
    assert asyncio.run(steps()) == [3, 1] + [0] * 8
    assert {_pack_of(s, b)[0] for b in (3, 6, 9, 12)} == {3} and s.packs.live[1] == 0
    assert all(joined(s.read(b)) == data[b] for b in range(1, 31) if s.has(b)) and s.count == 22
    kv.close()


def test_full_packs_are_closed_once_synced(tmp_path, monkeypatch):
    from epochfs.datanode import blockstore
    monkeypatch.setattr(blockstore, "PACK_BYTES", 50_000)
    kv, s = _filed(tmp_path)
    for bid in range(1, 21):
        d = os.urandom(20_000)
        s.put(bid, d, crc32c(d))
    assert len(s.packs._fds) == 10, "two blocks to a pack, each pack's file still open"
    assert asyncio.run(Purger(s).run_once()).ok == 0
    assert list(s.packs._fds) == [s.packs.active] == [10], "only the current pack's file stays open"
    assert joined(s.read(1)) and joined(s.read(20)), "reads open their own"
    kv.close()
