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
