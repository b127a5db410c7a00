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


def _rank(seed: int, node_id: int) -> bytes:
    return blake2b(seed.to_bytes(8, "big") + node_id.to_bytes(4, "big"), digest_size=8).digest()


def choose_targets(view: ClusterView, seed: int, index: int, replicas: int) -> list[int]:
    """Distinct live nodes with room for block `index` of a file whose blocks share `seed`; the first is the primary.

    The nodes are ranked by rendezvous hashing on the file's seed (so files spread evenly and few blocks move when
    nodes come and go), then rotated by the block's index: consecutive blocks of one file get consecutive primaries,
    which stripes the file over every DataNode. A node never appears twice; fewer than `replicas` nodes come back
    when fewer qualify.
    """
    live = [n for n in view.nodes if n.alive and n.free_bytes > view.reserve_bytes]
    live.sort(key=lambda n: _rank(seed, n.id))
    if not live:
        return []
    r = index % len(live)
    ranked = live[r:] + live[:r]
    return [n.id for n in ranked[:replicas]]
