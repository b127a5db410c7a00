"""Block placement: a pure function of a cluster snapshot (no I/O, no clock), so its tests are one-liners."""
from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b


@dataclass(frozen=True, slots=True)
class NodeView:
    id: int
    alive: bool
    free_bytes: int


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    reserve_bytes: int = 0


def _rank(block_id: int, node_id: int) -> bytes:
    return blake2b(block_id.to_bytes(8, "big") + node_id.to_bytes(4, "big"), digest_size=8).digest()


def choose_targets(view: ClusterView, block_id: int, replicas: int) -> list[int]:
    """Distinct live nodes with room for the block, in rendezvous-hash order; the first is the primary.

    Rendezvous hashing stripes a file's blocks over the DataNodes (each block ranks the nodes differently), never
    repeats a node, and moves few blocks when nodes come and go. Returns fewer than `replicas` nodes if fewer qualify.
    """
    live = [n for n in view.nodes if n.alive and n.free_bytes > view.reserve_bytes]
    live.sort(key=lambda n: _rank(block_id, n.id))
    return [n.id for n in live[:replicas]]
