"""Blocks: the unit of storage on DataNodes. A file's content is a list of block entries (BlockRefs on the wire)."""
from __future__ import annotations

import bisect

import crc32c as _crc32c

from .defaults import BLOCK_SIZE as DEFAULT_BLOCK_SIZE  # noqa: F401 (the home of the defaults: defaults.py)
from .messages import LocatedPiece


def crc32c(data, value: int = 0) -> int:
    return _crc32c.crc32c(data, value)


# A block entry as the NameNode stores it in a record's "blk" (and as records carry it): the list
# [id, size, crc, nodes], the array form of messages.BlockRef (nodes[0] is the primary). Code reads and changes entries
# only through these accessors, never by position. They are functions over the list rather than a conversion into
# BlockRefs because the NameNode reads block lists on every stat and commit: msgspec.convert of a 32-block list into
# BlockRefs costs ~14 us, these next to nothing (and the stored bytes stay exactly as they are).
def block_id(entry: list) -> int:
    return entry[0]


def block_size(entry: list) -> int:
    return entry[1]


def block_crc(entry: list) -> int:
    return entry[2]


def block_nodes(entry: list) -> list[int]:
    """The entry's replica set, primary first."""
    return entry[3]


def set_block_nodes(entry: list, nodes: list[int]) -> None:
    """Give the entry a new replica set (a repair's copy replaced or topped up a holder)."""
    entry[3] = nodes


def block_entry(bid: int, size: int, crc: int, nodes: list[int]) -> list:
    """A new entry, as it is stored."""
    return [bid, size, crc, nodes]


def locate(sizes: list[int], offset: int) -> tuple[int, int]:
    """(index of the block holding byte `offset`, offset inside it), given the blocks' sizes in order."""
    pos = 0
    for i, s in enumerate(sizes):
        if offset < pos + s:
            return i, offset - pos
        pos += s
    return len(sizes), 0


def covering(blocks: list, start: int, end: int) -> tuple[int, list]:
    """(offset in the file of the first block returned, the blocks) holding bytes [start, end) of a file made of
    `blocks` (entries [id, size, ...]): what a ranged read needs, however long the file is."""
    if end <= start:
        return start, []
    pos, i, n = 0, 0, len(blocks)
    while i < n and pos + block_size(blocks[i]) <= start:
        pos += block_size(blocks[i])
        i += 1
    j, p = i, pos
    while j < n and p < end:
        p += block_size(blocks[j])
        j += 1
    return pos, blocks[i:j]


def piece_starts(pieces: list[LocatedPiece], offset: int) -> list[int]:
    """The file offset of each located piece, the first at `offset` (pieces_within's `starts`)."""
    starts, pos = [], offset
    for p in pieces:
        starts.append(pos)
        pos += p.length
    return starts


def pieces_within(pieces: list[LocatedPiece], starts: list[int], off: int, end: int) -> list[LocatedPiece]:
    """The parts of located pieces (piece i at file offset starts[i], ascending) that hold bytes [off, end) of the
    file."""
    out = []
    for i in range(max(bisect.bisect_right(starts, off) - 1, 0), len(pieces)):
        s = starts[i]
        if s >= end:
            break
        p = pieces[i]
        lo, hi = max(off, s), min(end, s + p.length)
        if hi <= lo:
            continue
        out.append(p if hi - lo == p.length else
                   LocatedPiece(id=p.id, offset=p.offset + lo - s, length=hi - lo, nodes=p.nodes))
    return out


def pick_replica(block_id: int, nodes: list, addrs: dict, skip=()) -> str | None:
    """The address a batch reads block `block_id` from: its holders rotated by block id, so the reads of a batch
    spread over every replica (placement stripes primaries; this spreads the secondaries' share too). None when no
    holder has a known address (outside `skip`, the addresses already tried). `addrs` maps str(node id) to
    "host:port"."""
    for i in range(len(nodes)):
        addr = addrs.get(str(nodes[(block_id + i) % len(nodes)]))
        if addr is not None and addr not in skip:
            return addr
    return None
