"""The mount's Writer bookkeeping (frontends/fuse/writer.py): which blocks a change must fetch first, and the commit
layout it sends: blocks kept by id, new extents by offset and length."""
from __future__ import annotations

import os

import pytest

from epochfs.common.messages import FileWrite, KeepBlock, NewExtent
from epochfs.frontends.fuse.writer import Writer


@pytest.fixture
def w(tmp_path):
    """A file of two 10-byte blocks and a 5-byte last one, cut at 10 bytes."""
    w = Writer(tmp_path, {"etag": '"v1"', "blk": [[1, 10], [2, 10], [3, 5]], "size": 25, "bs": 10})
    yield w
    w.file.close()


def test_a_write_inside_one_block_fetches_and_replaces_only_that_block(w):
    assert w.partly(12, 15) == [1] and w.absent(0, 25) == [0, 1, 2]
    w.wrote(12, 15)
    assert w.layout() == (FileWrite(base='"v1"', size=25,
                                    segs=[KeepBlock(id=1), NewExtent(length=10), KeepBlock(id=3)]), [(10, 10)])


def test_a_write_of_whole_blocks_fetches_nothing(w):
    assert w.partly(0, 20) == []
    w.wrote(0, 20)
    assert w.layout()[0].segs == [NewExtent(length=20), KeepBlock(id=3)]


def test_growing_the_file_rewrites_its_short_last_block_with_the_new_bytes(w):
    assert w.partly(30, 32) == [2]  # past EOF, with a hole: the short block is merged, not left behind
    w.wrote(30, 32)
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
    w.wrote(24, 25)
    assert w.layout()[0].segs == [KeepBlock(id=1), KeepBlock(id=7), NewExtent(length=5)]


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
