"""Handlers for the DataNodes' calls: registration, heartbeats (with the orders riding on their replies) and reports
of bad copies."""
from __future__ import annotations

import msgspec

from epochfs.common import messages as m

from ..ha.journal import Journal
from ..jobs import OperatorJobs
from ..membership import Membership
from ..metastore import MetaStore
from ..repair import RepairWorker


def handlers(meta: MetaStore, members: Membership, repair: RepairWorker, ops: OperatorJobs, journal: Journal) -> dict:
    async def register(req: m.Register, _) -> m.Registered:
        st = members.register(req.uuid, req.host, req.rpc_port, req.http_port, req.capacity, req.used)
        return m.Registered(node_id=st.id, epoch=journal.epoch)

    async def heartbeat(req: m.Heartbeat, _) -> m.HeartbeatOrders:
        nid = req.node_id
        if not members.heartbeat(nid, req.used, req.capacity, req.blocks, msgspec.structs.asdict(req.extra),
                                 req.write_error[:500], req.disk):
            return m.HeartbeatOrders(reregister=True)
        if req.deleted:
            meta.garbage_done(nid, req.deleted)
            repair.totals["gc_deleted"] += len(req.deleted)
        copy = repair.on_heartbeat(nid, [[c.block, c.target] for c in req.copied],
                                   [[c.block, c.target, c.error] for c in req.copy_failed])
        if req.report is not None:
            repair.take_report(nid, req.report)
        scrub = ops.on_heartbeat(nid, None if req.scrub is None else msgspec.structs.asdict(req.scrub))
        meta.release_freed()
        # orders leave the NameNode: everything they are computed from must be durable first (a deposed leader's
        # undurable state must never delete a block), and they carry the epoch that made it so
        while journal.durable_seq() < meta.seq:
            await journal.durable(meta.seq)
        delete = meta.garbage_for(nid)
        return m.HeartbeatOrders(epoch=journal.epoch, delete=m.DeleteOrder(blocks=delete) if delete else None,
                                 copy=[m.CopyOrder(target, addr, blocks) for target, addr, blocks in copy],
                                 scrub=m.ScrubOrder(job=scrub) if scrub else None)

    async def report_bad_replica(req: m.ReportBadReplica, _) -> m.Queued:
        return m.Queued(queued=repair.report_bad(req.block_id, req.node, req.good))

    return {m.Register: register, m.Heartbeat: heartbeat, m.ReportBadReplica: report_bad_replica}
