"""The mount's Writer bookkeeping (frontends/fuse/writer.py): which blocks a change must fetch first, and the commit
layout it sends: blocks kept by id, new extents by offset and length. And a streamed file's end kept in slabs
(frontends/fuse/front.py): every byte readable wherever it is (local copy, sealed slabs, the slab being filled), sealed
slabs written past the page cache and handed to the upload as they are, the local copy whole once the front ends."""
from __future__ import annotations

import os
import random
import tempfile

import pytest

from epochfs.common.messages import FileWrite, KeepBlock, NewExtent, ZeroExtent
from epochfs.frontends.fuse.front import MAX_SLABS, SLAB, Front, Slabs, open_direct
from epochfs.frontends.fuse.writer import Writer

MiB = 1 << 20


@pytest.fixture
def w(tmp_path):
    """A file of two 10-byte blocks and a 5-byte last one, cut at 10 bytes."""
    w = Writer(tmp_path, {"etag": '"v1"', "blk": [[1, 10], [2, 10], [3, 5]], "size": 25, "bs": 10})
    yield w
    w.file.close()


def _wrote(w: Writer, off: int, end: int) -> None:
    """A write of [off, end) as the mount makes it: the bytes into the local copy, then the bookkeeping."""
    os.pwrite(w.fd, b"w" * (end - off), off)
    w.wrote(off, end)


def test_a_write_inside_one_block_fetches_and_replaces_only_that_block(w):
    assert w.partly(12, 15) == [1] and w.absent(0, 25) == [0, 1, 2]
    _wrote(w, 12, 15)
    assert w.layout() == (FileWrite(base='"v1"', size=25,
                                    segs=[KeepBlock(id=1), NewExtent(length=10), KeepBlock(id=3)]), [(10, 10)])


def test_a_write_of_whole_blocks_fetches_nothing(w):
    assert w.partly(0, 20) == []
    _wrote(w, 0, 20)
    assert w.layout()[0].segs == [NewExtent(length=20), KeepBlock(id=3)]


def test_growing_the_file_rewrites_its_short_last_block_with_the_new_bytes(w):
    assert w.partly(30, 32) == [2]  # past EOF, with a hole: the short block is merged, not left behind
    _wrote(w, 30, 32)
    assert w.layout() == (FileWrite(base='"v1"', size=32,
                                    segs=[KeepBlock(id=1), KeepBlock(id=2), NewExtent(length=12)]), [(20, 12)])


def test_truncate_drops_blocks_past_the_end_and_rewrites_the_one_it_cuts(w):
    assert w.cut(15) == [1]
    w.truncate(15)
    assert w.layout()[0].segs == [KeepBlock(id=1), NewExtent(length=5)]
    w.truncate(10)
    assert w.layout()[0].segs == [KeepBlock(id=1)]
    assert w.cut(12) == [] and w.layout()[0].size == 10  # block 0 is whole: growing keeps it
    w.truncate(12)
    assert w.layout()[0].segs == [KeepBlock(id=1), NewExtent(length=2)]


def test_after_a_commit_the_new_blocks_are_local_and_kept_next_time(w):
    os.pwrite(w.fd, b"x" * 10, 10)
    w.wrote(10, 20)
    w.committed('"v2-3"', [[1, 10], [7, 10], [3, 5]], 10)
    assert not w.dirty and w.base == '"v2-3"'
    assert w.absent(0, 25) == [0, 2]  # block 7 was written here: no fetch
    _wrote(w, 24, 25)
    assert w.layout()[0].segs == [KeepBlock(id=1), KeepBlock(id=7), NewExtent(length=5)]


def test_the_local_copys_holes_go_as_extents_of_zeros_cut_to_whole_blocks(tmp_path):
    """A file grown by a truncate, or written past its end, sends its hole as its size (ZeroExtent), in whole
    blocks counted from its extent's start, so the blocks are those the bytes would have made; a hole shorter
    than a block goes as the zeros it is."""
    w = Writer(tmp_path, {"etag": None, "blk": [], "size": 0, "bs": MiB})
    try:
        os.ftruncate(w.fd, 6 * MiB + 100)
        w.truncate(6 * MiB + 100)
        os.pwrite(w.fd, b"head", 0)
        w.wrote(0, 4)
        os.pwrite(w.fd, b"end", 5 * MiB + 10)
        w.wrote(5 * MiB + 10, 5 * MiB + 13)
        layout, extents = w.layout()
        assert layout.segs == [NewExtent(length=MiB), ZeroExtent(length=4 * MiB), NewExtent(length=MiB + 100)]
        assert extents == [(0, MiB), (5 * MiB, MiB + 100)] and layout.size == 6 * MiB + 100
        os.pwrite(w.fd, b"x", 3 * MiB + 5)  # data in the middle: two runs of zeros around its block
        w.wrote(3 * MiB + 5, 3 * MiB + 6)
        assert w.layout()[0].segs == [NewExtent(length=MiB), ZeroExtent(length=2 * MiB), NewExtent(length=MiB),
                                      ZeroExtent(length=MiB), NewExtent(length=MiB + 100)]
        small = Writer(tmp_path, {"etag": None, "blk": [], "size": 0, "bs": 16 * MiB})
        os.ftruncate(small.fd, 6 * MiB)
        small.truncate(6 * MiB)
        assert small.layout()[0].segs == [NewExtent(length=6 * MiB)], "a hole shorter than a block: its zeros"
        small.file.close()
    finally:
        w.file.close()


def _resident(fd: int, size: int) -> list[bool]:
    """Which 4 KiB pages of the file are in the page cache (mincore(2) over a read-only mapping, which faults
    nothing in)."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                               ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    try:
        vec = (ctypes.c_ubyte * (size // mmap.PAGESIZE))()
        assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        return [bool(v & 1) for v in vec]
    finally:
        libc.munmap(addr, size)


def test_a_stream_drops_the_local_copys_pages_it_has_read_and_the_bytes_stay(tmp_path):
    """A streamed file's local copy leaves the page cache behind its upload (pages written back already go at the
    first ask, dirty ones at the next), and reads of it still give every byte; a copy in memory is left alone."""
    from epochfs.frontends.fuse.writer import Stream
    mib = 1 << 20
    data = os.urandom(16 * mib)
    w = Writer(tmp_path, {"etag": "", "blk": [], "size": 0})
    os.pwrite(w.fd, data, 0)
    os.fdatasync(w.fd)  # written back: droppable at the first ask
    st = Stream()
    assert all(_resident(w.fd, len(data)))
    st.sent = 8 * mib
    st.behind(w)
    pages = _resident(w.fd, len(data))
    assert not any(pages[:len(pages) // 2]) and all(pages[len(pages) // 2:])
    st.sent = 16 * mib
    st.behind(w)
    assert not any(_resident(w.fd, len(data)))
    assert os.pread(w.fd, len(data), 0) == data
    w.close()
    m = Writer(tmp_path, {"etag": "", "blk": [], "size": 0}, memory=True)
    os.pwrite(m.fd, data, 0)
    st = Stream()
    st.sent = 16 * mib
    st.behind(m)
    assert all(_resident(m.fd, len(data))) and os.pread(m.fd, len(data), 0) == data
    m.close()


@pytest.fixture
def copy(tmp_path):
    f = tempfile.TemporaryFile(dir=tmp_path)
    dfd = open_direct(f.fileno())
    if dfd is None:
        pytest.skip(f"{tmp_path}'s file system does not take O_DIRECT")
    yield f.fileno(), dfd
    f.close()


def _write(front: Front, off: int, data: bytes) -> None:
    """What the mount's writes do (writer.py _to_front), without the waiting."""
    mv, done = memoryview(data), 0
    while done < len(mv):
        done += front.put(off + done, mv[done:])
        if front.full():
            front.write_slab()
            front.seal()
            front.next()


def test_every_byte_reads_back_wherever_it_is_and_the_copy_is_whole_at_the_end(copy):
    fd, dfd = copy
    rnd = random.Random(7)
    data = rnd.randbytes(int(3.5 * SLAB))
    head = 5 * MiB  # written before the front began (the stream's first bytes): the front's first slab starts at 4
    os.pwrite(fd, data[:head], 0)
    front = Front(fd, dfd, head, Slabs())
    assert (front.at, front.n) == (SLAB, head - SLAB)
    pos = head
    while pos < len(data):
        n = rnd.choice([4096, 131072, MiB, 3 * MiB + 17])
        _write(front, pos, data[pos:pos + n])
        pos = min(pos + n, len(data))
    assert [o for o, _ in front.held] == [SLAB, 2 * SLAB] and front.at == 3 * SLAB
    for off, n in [(0, len(data)), (SLAB - 5, 10), (2 * SLAB - 3, SLAB + 6), (3 * SLAB + 1, 100), (7, 3 * SLAB)]:
        assert front.read(off, n)[0] == data[off:off + n], (off, n)
    _write(front, 3 * SLAB + 10, b"z" * 20)  # a write inside the slab being filled
    data = data[:3 * SLAB + 10] + b"z" * 20 + data[3 * SLAB + 30:]
    assert front.read(3 * SLAB, 64)[0] == data[3 * SLAB:3 * SLAB + 64]
    assert front.takes(3 * SLAB) and front.takes(len(data)) and not front.takes(len(data) + 1) \
        and not front.takes(3 * SLAB - 1)
    front.end()
    assert os.pread(fd, len(data) + 1, 0) == data


def test_sealed_slabs_go_past_the_page_cache_and_to_the_upload_as_they_are(copy):
    fd, dfd = copy
    slabs = Slabs()
    data = os.urandom(3 * SLAB)
    front = Front(fd, dfd, 0, slabs)
    _write(front, 0, data)
    assert not any(_resident(fd, 3 * SLAB))  # written with O_DIRECT: nothing of it in the page cache
    view, slab = front.read(0, SLAB, own=True)  # the upload takes the first slab as it is
    assert isinstance(view, memoryview) and view == data[:SLAB] and front.out == 1
    piece, none = front.read(SLAB, SLAB // 2, own=True)  # half of one: a copy, the slab still held
    assert none is None and piece == data[SLAB:SLAB + SLAB // 2] and [o for o, _ in front.held] == [SLAB, 2 * SLAB]
    piece, _ = front.read(SLAB + SLAB // 2, SLAB // 2, own=True)  # its end: no longer held
    assert piece == data[SLAB + SLAB // 2:2 * SLAB] and [o for o, _ in front.held] == [2 * SLAB]
    front.give(slab)
    assert front.out == 0 and slabs.idle  # back for the next slab: its pages are not fresh ones
    front.end()
    assert os.pread(fd, 3 * SLAB, 0) == data


def test_a_front_has_room_for_at_most_its_slabs(copy):
    fd, dfd = copy
    front = Front(fd, dfd, 0, Slabs())
    lent = []
    for i in range(MAX_SLABS - 1):  # sealed, and each one handed to the upload: the filling slab makes MAX_SLABS
        front.put(i * SLAB, memoryview(bytes(SLAB)))
        front.write_slab()
        front.seal()
        assert front.room()
        front.next()
        lent.append(front.read(i * SLAB, SLAB, own=True)[1])
    front.put((MAX_SLABS - 1) * SLAB, memoryview(bytes(SLAB)))
    front.write_slab()
    front.seal()
    assert not front.room()  # MAX_SLABS - 1 being sent, one sealed: the writer waits
    front.give(lent.pop())
    assert front.room()
    front.end(keep=False)
