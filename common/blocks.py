"""Blocks: the unit of storage on DataNodes. A file's content is a list of block entries (BlockRefs on the wire)."""
from __future__ import annotations

import bisect

import crc32c as _crc32c

from .defaults import BLOCK_SIZE as DEFAULT_BLOCK_SIZE  # noqa: F401 (the home of the defaults: defaults.py)
from .messages import LocatedPiece


def crc32c(data, value: int = 0) -> int:
    return _crc32c.crc32c(data, value)


ZERO_MIN = 1 << 20  # a block of zeros this large crosses the network as its size alone (DataNodeClient.put)
_ZERO_PIECE = bytes(256 << 10)
_zero_buf = b""  # the zeros `zeros` hands out: one buffer, grown to the largest asked for (bytes: shared safely)


def _byte_views(data) -> list[memoryview]:
    return [v if v.ndim == 1 and v.itemsize == 1 else v.cast("B")
            for v in map(memoryview, data if isinstance(data, list) else (data,))]


def all_zeros(data) -> bool:
    """Are the bytes of `data` (bytes-like, or a list of them) all zeros? Compared 256 KiB at a time (a memcmp
    each, ~0.2 ms per 4 MiB of zeros); other data almost always differs in its first 64 bytes. A block's CRC alone
    would not do: it can be forged to match zeros'."""
    step = len(_ZERO_PIECE)
    for mv in _byte_views(data):
        n = len(mv)
        if mv[:64].tobytes() != _ZERO_PIECE[:min(64, n)] or \
                not all(mv[i:i + step].tobytes() == _ZERO_PIECE[:min(step, n - i)] for i in range(0, n, step)):
            return False
    return True


def zero_size(data) -> int:
    """The size of `data` (bytes-like, or a list of them) if it is a block of zeros to send as its size alone (at
    least ZERO_MIN bytes), else 0."""
    views = _byte_views(data)
    n = sum(len(v) for v in views)
    return n if n >= ZERO_MIN and all_zeros(views) else 0


def zeros(n: int) -> memoryview:
    """`n` zero bytes (a read of a block stored as zeros, a block that came as its size), from one shared buffer:
    its pages, never written, are the kernel's zero page until read, so handing them out costs no copy."""
    global _zero_buf
    if len(_zero_buf) < n:
        _zero_buf = bytes(n)
    return memoryview(_zero_buf)[:n]


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
