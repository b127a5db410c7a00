"""Block allocation, the bookkeeping around commits, and garbage collection."""
from __future__ import annotations

from epochfs.common import errors, write_policy
from epochfs.common import messages as m

from ..placement import choose_targets
from .services import Services


def handlers(s: Services) -> dict:
    meta, members, settings, repair = s.meta, s.members, s.settings, s.repair

    async def allocate(req: m.Allocate, _) -> m.Allocation:
        info = meta.bucket_info(req.bucket)
        rf = int(info.get("rf", settings.replication))
        bs = int(info.get("bs", settings.block_size))
        view = members.view(reserve_bytes=bs)  # a node with less than a block free is full
        seed, index = req.seed, req.index
        placed = meta.allocate(req.count, lambda bid, i: choose_targets(view, seed or bid, index + i, rf))
        if any(not nodes for _, nodes in placed):
            meta.abandon([bid for bid, _ in placed])
            raise errors.NotEnoughReplicas("no live DataNode with free space")
        if any(len(nodes) < rf for _, nodes in placed):  # fewer nodes than replicas: topped up when some return
            repair.mark_short([(bid, rf) for bid, nodes in placed if len(nodes) < rf])
        ids = {n for _, nodes in placed for n in nodes}
        return m.Allocation(block_size=bs, blocks=[m.Placed(bid, tuple(nodes)) for bid, nodes in placed],
                            addrs=members.addrs(ids),
                            acks=write_policy.parse(info.get("wp") or settings.default_write_policy),
                            grace_s=meta.pending_grace_s)

    async def abandon(req: m.Abandon, _) -> m.Done:
        meta.abandon(req.blocks)
        return m.Done()

    async def report_short(req: m.ReportShort, _) -> m.Done:
        repair.mark_short(req.blocks)
        return m.Done()

    async def gc_once(req: m.GcOnce, _) -> m.GcPass:
        return m.GcPass(expired=meta.expire_pending(), released=meta.release_freed())

    async def stats(req: m.Stats, _) -> m.BlockStats:
        return m.BlockStats(garbage=meta.garbage_count(), freed=meta.freed_count(), pending=meta.pending_count(),
                            **repair.status())

    async def pending(req: m.Pending, _) -> m.BlockIds:
        return m.BlockIds(blocks=meta.pending_blocks())

    async def referenced(req: m.Referenced, _) -> m.BlockIds:
        return m.BlockIds(blocks=sorted(meta.referenced_blocks()))

    return {m.Allocate: allocate, m.Abandon: abandon, m.ReportShort: report_short, m.GcOnce: gc_once,
            m.Stats: stats, m.Pending: pending, m.Referenced: referenced}
