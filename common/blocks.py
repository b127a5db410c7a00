"""Blocks: the unit of storage on DataNodes. A file's content is a list of BlockRefs."""
from __future__ import annotations

from dataclasses import dataclass

import crc32c as _crc32c

DEFAULT_BLOCK_SIZE = 4 << 20


def crc32c(data, value: int = 0) -> int:
    return _crc32c.crc32c(data, value)


@dataclass(frozen=True, slots=True)
class BlockRef:
    id: int
    size: int
    crc: int
    nodes: tuple[int, ...]  # replica set; nodes[0] is the primary

    def to_wire(self) -> list:
        return [self.id, self.size, self.crc, list(self.nodes)]

    @classmethod
    def from_wire(cls, w) -> "BlockRef":
        return cls(w[0], w[1], w[2], tuple(w[3]))


def locate(sizes: list[int], offset: int) -> tuple[int, int]:
    """(index of the block holding byte `offset`, offset inside it), given the blocks' sizes in order."""
    pos = 0
    for i, s in enumerate(sizes):
        if offset < pos + s:
            return i, offset - pos
        pos += s
    return len(sizes), 0


def pick_replica(block_id: int, nodes: list, addrs: dict) -> str | None:
    """The address a batch reads block `block_id` from: its holders rotated by block id, so the reads of a batch
    spread over every replica (placement stripes primaries; this spreads the secondaries' share too). None when no
    holder has a known address. `addrs` maps str(node id) to "host:port"."""
    for i in range(len(nodes)):
        addr = addrs.get(str(nodes[(block_id + i) % len(nodes)]))
        if addr is not None:
            return addr
    return None
