"""The HA status handler: who is active, how far each NameNode applied the log. Served by every NameNode, active or
standby (embedded: the one NameNode)."""
from __future__ import annotations

from epochfs.common import messages as m

from ..ha.journal import Journal


def handlers(journal: Journal) -> dict:
    async def ha_status(req: m.HaStatus, _) -> m.HaState:
        return await journal.ha_state()

    return {m.HaStatus: ha_status}
