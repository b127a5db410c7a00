"""The NameNode's RPC handlers, one module per subject (nodes, buckets, objects, multipart, blocks, keys, jobs, the
POSIX namespace, batch reads, high availability): each handler takes its typed request (common/messages.py), validates it, calls one
domain method and returns its typed reply; each module's `handlers` gives its table {RequestType: handler}, merged
here."""
from __future__ import annotations

from ..access_keys import AccessKeys
from ..config import NameNodeSettings
from ..jobs import OperatorJobs
from ..membership import Membership
from ..metastore import MetaStore
from ..repair import RepairWorker
from . import blocks, buckets, jobs, keys, multipart, objectlock, objects
from .batch import handlers as batch_handlers
from ..ha.journal import Journal
from .ha import handlers as ha_handlers
from .nodes import handlers as node_handlers
from .posix import handlers as posix_handlers
from .services import Services


def make_handlers(meta: MetaStore, members: Membership, settings: NameNodeSettings, repair: RepairWorker,
                  ops: OperatorJobs, journal: Journal, lifecycle=None) -> dict:
    access_keys = AccessKeys(meta)
    services = Services(meta, members, settings, repair, ops, access_keys, lifecycle)
    table = node_handlers(meta, members, repair, ops, journal) | ha_handlers(journal) | posix_handlers(meta, members, services.admit) \
        | batch_handlers(meta, members)
    for subject in (buckets, objects, objectlock, multipart, blocks, keys, jobs):
        table |= subject.handlers(services)
    return table
