"""The NameNode's RPC handlers, one module per subject (buckets, objects, multipart, blocks, keys, jobs...): each
handler takes its typed request (common/messages.py), validates it, calls one domain method and returns its typed
reply; each module's `handlers` gives its table {RequestType: handler}, merged here."""
from __future__ import annotations

from ..access_keys import AccessKeys
from ..batch import handlers as batch_handlers
from ..config import NameNodeSettings
from ..jobs import OperatorJobs
from ..membership import Membership
from ..metastore import MetaStore
from ..posix import handlers as posix_handlers
from ..repair import RepairWorker
from . import blocks, buckets, jobs, keys, multipart, objects
from .services import Services


def make_handlers(meta: MetaStore, members: Membership, settings: NameNodeSettings, repair: RepairWorker,
                  ops: OperatorJobs) -> dict:
    access_keys = AccessKeys(meta)

    async def register(a, _):
        st = members.register(a["uuid"], a["host"], int(a["rpc_port"]), int(a.get("http_port", 0)),
                              int(a.get("capacity", 0)), int(a.get("used", 0)))
        return {"node_id": st.id}

    async def heartbeat(a, _):
        nid = int(a["node_id"])
        if not members.heartbeat(nid, int(a.get("used", 0)), int(a.get("capacity", 0)), int(a.get("blocks", 0)),
                                 a.get("extra") or {}, str(a.get("write_error") or "")[:500]):
            return {"reregister": True}
        if a.get("deleted"):
            meta.garbage_done(nid, a["deleted"])
            repair.totals["gc_deleted"] += len(a["deleted"])
        copy = repair.on_heartbeat(nid, a.get("copied") or [], a.get("copy_failed") or [])
        if a.get("report") is not None:
            repair.take_report(nid, a["report"])
        scrub = ops.on_heartbeat(nid, a.get("scrub"))
        meta.release_freed()
        return {"delete": meta.garbage_for(nid), "copy": copy, **({"scrub": scrub} if scrub else {})}

    async def report_bad_replica(a, _):
        """A reader or scrubber found the copy of a block on `node` corrupt or missing; `good` (optional) is a holder
        it read successfully."""
        good = a.get("good")
        return {"queued": repair.report_bad(int(a["block_id"]), int(a["node"]), None if good is None else int(good))}

    services = Services(meta, members, settings, repair, ops, access_keys)
    table = {f.__name__: f for f in (register, heartbeat, report_bad_replica)} \
        | posix_handlers(meta, members, services.admit) | batch_handlers(meta, members)
    for subject in (buckets, objects, multipart, blocks, keys, jobs):
        table |= subject.handlers(services)
    return table
