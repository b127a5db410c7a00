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


@dataclass(frozen=True, slots=True)
class Repair:
    """Copy block `block_id` from `source` to `target`; on success `target` takes the place of `replaces` in the
    block's replica set (None: `target` already is a replica whose copy is bad or missing, it is just rewritten)."""
    block_id: int
    source: int
    target: int
    replaces: int | None


def plan_repairs(view: ClusterView, block_id: int, holders: list[int], attempt: int = 0) -> list[Repair]:
    """Orders that bring a block whose replica set `holders` includes dead (or unknown) nodes back to full strength.

    One order per dead holder, each to a distinct live node with room that holds no replica yet (rendezvous-ranked on
    the block id, so a dead node's blocks spread over the survivors). The source is a live holder: the first in list
    order (the primary, which surely has the block), the next one on each further `attempt`. Nothing when no holder
    is dead, no live replica is left (the block is lost), or no node qualifies as a target (then fewer orders).
    """
    alive = {n.id for n in view.nodes if n.alive}
    dead = [n for n in holders if n not in alive]
    sources = [n for n in holders if n in alive]
    if not dead or not sources:
        return []
    taken = set(holders)
    candidates = [n for n in view.nodes if n.alive and n.free_bytes > view.reserve_bytes and n.id not in taken]
    candidates.sort(key=lambda n: _rank(block_id, n.id))
    source = sources[attempt % len(sources)]
    return [Repair(block_id, source, t.id, d) for d, t in zip(dead, candidates)]


def repair_source(view: ClusterView, holders: list[int], bad: int, good: int | None = None) -> int | None:
    """The live holder to re-push a block from to its holder `bad` (read repair): `good` when it is alive and holds the
    block (the replica a reader just read), else the first other live holder; None if there is none."""
    alive = {n.id for n in view.nodes if n.alive}
    if good is not None and good != bad and good in holders and good in alive:
        return good
    return next((n for n in holders if n != bad and n in alive), None)
