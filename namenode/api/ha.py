"""The HA handlers: the status (who is active, how far each NameNode applied the log; served by every NameNode,
active or standby; embedded: the one NameNode) and msync (the active one's log position, for read-your-writes on
standbys: messages.StaleOk); in HA mode the log push (the active NameNode's committed log groups, to a standby)."""
from __future__ import annotations

from epochfs.common import messages as m

from ..ha.journal import Journal


def handlers(journal: Journal) -> dict:
    async def ha_status(req: m.HaStatus, _) -> m.HaState:
        return await journal.ha_state()

    async def msync(req: m.Msync, _) -> m.LogPosition:
        return m.LogPosition(seq=journal.durable_seq())

    async def log_push(req: m.LogPush, payload) -> m.LogPosition:
        return m.LogPosition(seq=journal.receive(req.groups, payload))

    out = {m.HaStatus: ha_status, m.Msync: msync}
    if hasattr(journal, "receive"):  # HA mode: a standby takes the log groups the active one pushes
        out[m.LogPush] = log_push
    return out
