"""Block placement: a pure function of a cluster snapshot (no I/O, no clock), so its tests are one-liners."""
from __future__ import annotations

from dataclasses import dataclass
from hashlib import blake2b


@dataclass(frozen=True, slots=True)
class NodeView:
    id: int
    alive: bool
    free_bytes: int
    draining: bool = False  # being decommissioned: serves reads and is a repair source, gets no new copies
    read_only: bool = False  # its store refuses writes: serves reads and is a repair source, gets no new copies


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    reserve_bytes: int = 0


def can_take(view: ClusterView, n: NodeView) -> bool:
    """Can `n` take a new copy: alive, not being drained, taking writes, and with more free space than the reserve."""
    return n.alive and not n.draining and not n.read_only and n.free_bytes > view.reserve_bytes


def _rank(seed: int, node_id: int) -> bytes:
    return blake2b(seed.to_bytes(8, "big") + node_id.to_bytes(4, "big"), digest_size=8).digest()


def choose_targets(view: ClusterView, seed: int, index: int, replicas: int) -> list[int]:
    """Distinct live nodes with room for block `index` of a file whose blocks share `seed`; the first is the primary.

    The nodes are ranked by rendezvous hashing on the file's seed (so files spread evenly and few blocks move when
    nodes come and go), then rotated by the block's index: consecutive blocks of one file get consecutive primaries,
    which stripes the file over every DataNode. A node never appears twice; fewer than `replicas` nodes come back
    when fewer qualify.
    """
    live = [n for n in view.nodes if can_take(view, n)]
    live.sort(key=lambda n: _rank(seed, n.id))
    if not live:
        return []
    r = index % len(live)
    ranked = live[r:] + live[:r]
    return [n.id for n in ranked[:replicas]]


@dataclass(frozen=True, slots=True)
class Repair:
    """Copy block `block_id` from `source` to `target`; on success `target` takes the place of `replaces` in the
    block's replica set (None: `target` already is a replica whose copy is bad or missing, it is just rewritten; or,
    with `grow`, `target` joins the replica set)."""
    block_id: int
    source: int
    target: int
    replaces: int | None
    grow: bool = False  # `target` is added to the replica set (the block has fewer replicas than it should)


def plan_repairs(view: ClusterView, block_id: int, holders: list[int], attempt: int = 0,
                 wanted: int = 0) -> list[Repair]:
    """Orders that bring a block whose replica set `holders` includes dead (or unknown) or draining nodes back to
    full strength, and a set smaller than `wanted` (written while nodes were down or full) up to it.

    One order per dead or draining holder (`replaces` it) and per missing replica (`replaces` None, `grow`), each to
    a distinct live node with room that holds no replica yet (rendezvous-ranked on the block id, so a dead node's
    blocks spread over the survivors). The source is a live holder: the first in list order (the primary, which
    surely has the block), the next one on each further `attempt`; a draining holder only if no other is left.
    Nothing when no live replica is left (the block is lost); fewer orders when fewer nodes qualify as targets.
    """
    by_id = {n.id: n for n in view.nodes}
    alive = {n.id for n in view.nodes if n.alive}
    gone = [n for n in holders if n not in alive or by_id[n].draining]
    sources = [n for n in holders if n in alive and n not in gone] or [n for n in holders if n in alive]
    missing = max(wanted - len(holders), 0)
    if not (gone or missing) or not sources:
        return []
    taken = set(holders)
    candidates = [n for n in view.nodes if can_take(view, n) and n.id not in taken]
    candidates.sort(key=lambda n: _rank(block_id, n.id))
    source = sources[attempt % len(sources)]
    return [Repair(block_id, source, t.id, d, grow=d is None)
            for d, t in zip(gone + [None] * missing, candidates)]


def shortage(view: ClusterView, holders: list[int]) -> str:
    """Why `plan_repairs` found no target for a block on `holders`: "no_space" when a live node without a copy is
    there but full, else "no_node" (every live node in service and taking writes holds a copy already)."""
    taken = set(holders)
    return "no_space" if any(n.alive and not n.draining and not n.read_only and n.id not in taken
                             for n in view.nodes) else "no_node"


def repair_source(view: ClusterView, holders: list[int], bad: int, good: int | None = None) -> int | None:
    """The live holder to re-push a block from to its holder `bad` (read repair): `good` when it is alive and holds the
    block (the replica a reader just read), else the first other live holder; None if there is none."""
    alive = {n.id for n in view.nodes if n.alive}
    if good is not None and good != bad and good in holders and good in alive:
        return good
    return next((n for n in holders if n != bad and n in alive), None)


def rebalance_move(view: ClusterView, load: dict[int, int], holders: list[int], size: int,
                   slack: int) -> tuple[int, int] | None:
    """(source, target) of one move of a block's replica (`size` bytes, on `holders`) that evens out the bytes stored
    per node (`load`: the nodes taking part, alive and not draining), or None.

    The source is the holder storing the most, above the mean; the target is the open node storing the least that
    holds no replica, below the mean; and one of them must be more than `slack` away from the mean (otherwise both
    are balanced enough). The move must narrow their gap (source - target > size), so repeated moves converge
    instead of swapping a block back and forth.
    """
    if not load or any(h not in load for h in holders):
        return None
    mean = sum(load.values()) / len(load)
    source = max(holders, key=lambda h: (load[h], h))
    targets = [n.id for n in view.nodes if can_take(view, n) and n.id in load and n.id not in holders]
    if load[source] <= mean or not targets:
        return None
    target = min(targets, key=lambda n: (load[n], n))
    if load[target] >= mean or max(load[source] - mean, mean - load[target]) <= slack:
        return None
    return (source, target) if load[source] - load[target] > size else None
