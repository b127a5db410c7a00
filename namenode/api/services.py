"""What the NameNode's handler modules work on: the metadata store and the services around it, built once by
make_handlers (namenode/api/__init__.py) and given to each subject's `handlers`."""
from __future__ import annotations

from dataclasses import dataclass

import msgspec

from epochfs.common import messages as m, write_policy

from ..access_keys import AccessKeys
from ..config import NameNodeSettings
from ..jobs import OperatorJobs
from ..membership import Membership
from ..metastore import MetaStore
from ..repair import RepairWorker


@dataclass(frozen=True)
class Services:
    meta: MetaStore
    members: Membership
    settings: NameNodeSettings
    repair: RepairWorker
    ops: OperatorJobs
    access_keys: AccessKeys
    lifecycle: object = None  # the LifecycleWorker (namenode/lifecycle.py): its sweeps are jobs

    def admit(self, bucket: str | None, blocks: list[m.WrittenBlock | int]) -> list:
        """New blocks as a commit stores them, if each was acknowledged by as many copies as the bucket's write
        policy wants now (see RepairWorker.admit); every commit of new blocks goes through here."""
        wp = (self.meta.bucket_info(bucket).get("wp") if bucket else None) or self.settings.default_write_policy
        return self.repair.admit(blocks, write_policy.parse(wp))


def record(d: dict, t: type):
    """A stored record (a dict, as the MetaStore keeps it) as its typed message."""
    return msgspec.convert(d, t)


def fields(msg) -> dict:
    """A typed record as the MetaStore stores it: its short field names, defaults left out."""
    return msgspec.to_builtins(msg)
