"""The HA handlers: the status (who is active, how far each NameNode applied the log; served by every NameNode,
active or standby; embedded: the one NameNode) and msync (the active one's log position, for read-your-writes on
standbys: messages.StaleOk)."""
from __future__ import annotations

from epochfs.common import messages as m

from ..ha.journal import Journal


def handlers(journal: Journal) -> dict:
    async def ha_status(req: m.HaStatus, _) -> m.HaState:
        return await journal.ha_state()

    async def msync(req: m.Msync, _) -> m.LogPosition:
        return m.LogPosition(seq=journal.durable_seq())

    return {m.HaStatus: ha_status, m.Msync: msync}
