from __future__ import annotations

import asyncio
import hmac
import logging
import shutil
import tarfile
import tempfile
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI, HTTPException, Request
from prometheus_client import Counter
from starlette.background import BackgroundTask
from starlette.responses import FileResponse

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.kv import RocksKV, StorageError
from epochfs.common.metrics import gauge, mount_metrics
from epochfs.common.rpc import RpcServer
from epochfs.common.worker import PassStats, Worker

from . import metrics
from .api import make_handlers
from .commands import CommandLog
from .config import NameNodeSettings
from .ha import undo
from .ha.journal import SECRET_HEADER, LocalJournal
from .jobs import OperatorJobs
from .lifecycle import LifecycleWorker
from .membership import Membership
from .metastore import MetaStore
from .repair import RepairWorker


log = logging.getLogger("epochfs.namenode")
STALE_READS = Counter("epochfs_nn_stale_reads", "Reads that accept a stale answer (messages.StaleOk) at this "
                      "NameNode as a standby: served from its store, refused as too stale (too_stale), or answered "
                      "NotLeader because they need the active NameNode (needs_active)", ["result"])


class PendingExpiry(Worker):
    """Turns allocations of uploads that never committed into garbage after the grace period."""

    def __init__(self, meta: MetaStore, interval_s: float) -> None:
        self.meta, self.interval_s = meta, interval_s

    async def run_once(self) -> PassStats:
        self.meta.expire_pending()
        return PassStats()


class StoreReopen(Worker):
    """Opens the metadata store again once it refused a write for an I/O error (RocksKV.reopenable: a full disk)
    and its disk has room again: RocksDB refuses every later write until then, and every S3 write would fail until
    a restart. The failed commands wrote nothing (MetaStore.execute); their callers got StoreRefused (503). A store
    refusing writes for a Corruption is left as it is (it still serves reads)."""

    interval_s = 2.0

    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta

    async def run_once(self) -> PassStats:
        kv = self.meta.kv  # (HA: a rebuild may have replaced it)
        why = kv.refused
        if not kv.ready_to_reopen:
            return PassStats()
        try:
            kv.reopen()
        except StorageError as e:
            log.warning("the metadata store refused a write (%s); opening it again failed: %s", why, e)
            return PassStats(failed=1)
        self.meta.reset()
        log.warning("the metadata store takes writes again (opened again; it refused one: %s)", why)
        return PassStats()


def _store_refused(handler):
    """The store's failures (StorageError: a full disk, an I/O error) as StoreRefused (S3: 503), not internal
    errors: the call may succeed later (StoreReopen)."""
    async def call(req, payload):
        try:
            return await handler(req, payload)
        except StorageError as e:
            raise errors.StoreRefused(f"the metadata store failed: {e}") from None
    return call


class WhileActive(Worker):
    """Runs a worker's passes only on the active NameNode (HA): a standby's store changes only by the log."""

    def __init__(self, inner: Worker, journal) -> None:
        self.inner, self.journal = inner, journal
        self.interval_s = inner.interval_s

    async def run_once(self) -> PassStats:
        if not self.journal.is_active():
            return PassStats()
        return await self.inner.run_once()


UNGATED = (m.HaStatus, m.LogPush)  # answered by every NameNode in HA mode, whatever its role


def _gated(handler, journal):
    async def gated(req, payload):
        journal.check_serving()
        return await handler(req, payload)
    return gated


def _stale_gated(handler, journal):
    """A read a standby may answer when the request accepts a stale answer (its `stale` field, messages.StaleOk)
    and the standby can vouch for its freshness (EtcdJournal.check_stale: else TooStale); else as _gated. A read
    that needs the active NameNode is NotLeader, as any call to a standby: one that writes on the way (the first
    lookup or listing of a directory through the mount stamps it with its bucket: the standby's store is written
    only by the log, MetaStore.execute refuses) or an inode the standby does not know in the bucket yet (that stamp
    may not have reached it)."""
    async def gated(req, payload):
        if req.stale is None or journal.is_active():
            journal.check_serving()
            return await handler(req, payload)
        try:
            await journal.check_stale(req.stale)
        except errors.NotLeader:
            journal.stale_refused += 1
            STALE_READS.labels("too_stale").inc()
            raise
        try:
            res = await handler(req, payload)
        except (errors.NotLeader, errors.OutsideBucket) as e:
            STALE_READS.labels("needs_active").inc()
            raise errors.NotLeader(f"a standby cannot answer this read: {e.message}", leader=journal.leader) from None
        journal.stale_served += 1
        STALE_READS.labels("served").inc()
        return res
    return gated


def _checkpoint_tar(kv: RocksKV) -> str:
    """A tar of a RocksDB checkpoint of the store (made in a temporary folder, removed after)."""
    tmp = tempfile.mkdtemp(prefix="nn-checkpoint-")
    kv.checkpoint(f"{tmp}/meta")
    with tarfile.open(f"{tmp}/meta.tar", "w") as t:
        t.add(f"{tmp}/meta", arcname=".")
    shutil.rmtree(f"{tmp}/meta")
    return tmp


def create_app(settings: NameNodeSettings) -> FastAPI:
    ha = bool(settings.etcd_endpoints)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        kv = RocksKV.open(settings.data_dir / "meta")
        if ha:
            undo.rollback(kv)  # killed while leading: what etcd never confirmed goes (the log re-applies the rest)
        cmd_log = CommandLog(settings.command_log) if settings.command_log else None
        meta = MetaStore(kv, pending_grace_s=settings.pending_grace_s, free_grace_s=settings.free_grace_s, log=cmd_log,
                         undo=ha, init_root=not ha)
        members = Membership(meta, settings.heartbeat_timeout_s)
        if ha:
            from .ha.etcd_journal import EtcdJournal  # grpc and aetcd are loaded only in HA mode
            journal = EtcdJournal(meta, settings, on_promote=members.reload)
        else:
            journal = meta.journal = LocalJournal(kv, meta, settings.member_name, settings.addr)
        repair = RepairWorker(meta, members, interval_s=settings.repair_interval_s,
                              max_inflight=settings.repair_max_inflight,
                              order_timeout_s=settings.repair_order_timeout_s, scan_batch=settings.repair_scan_batch,
                              bytes_per_s=settings.repair_bytes_per_s, batch_bytes=settings.repair_batch_bytes,
                              reserve_bytes=settings.block_size)
        ops = OperatorJobs(meta, members, repair, interval_s=settings.repair_interval_s,
                           tolerance=settings.rebalance_tolerance, scan_batch=settings.repair_scan_batch,
                           reserve_bytes=settings.block_size)
        lc = LifecycleWorker(meta, day_s=settings.lifecycle_day_s, interval_s=settings.lifecycle_interval_s or None,
                             actions_per_s=settings.lifecycle_actions_per_s)
        app.state.meta, app.state.members, app.state.repair, app.state.journal = meta, members, repair, journal
        metrics.register(meta, members, repair)
        _ha_metrics(journal, meta)
        handlers = {t: _store_refused(h) for t, h in make_handlers(meta, members, settings, repair, ops, journal,
                                                                        lc).items()}
        if ha:  # a standby answers NotLeader(leader) to everything but UNGATED and the stale reads it may serve
            handlers = {t: h if t in UNGATED else _stale_gated(h, journal) if t in m.STALE_READS else
                        _gated(h, journal) for t, h in handlers.items()}

        async def durable(req) -> None:
            """Every reply waits until what it could reflect is durable; the HA status and a log push reflect no
            namespace state a client could see (and must answer while a deposed NameNode rolls back)."""
            if type(req) not in UNGATED:
                try:
                    await journal.durable(meta.seq)
                except StorageError as e:  # (the WAL's fsync failed: nothing it holds is acknowledged)
                    raise errors.StoreRefused(f"the metadata store failed: {e}") from None

        rpc = RpcServer(handlers, settings.cluster_secret, max_payload=settings.rpc_max_payload, before_reply=durable)
        await rpc.start(settings.host, settings.rpc_port)
        workers = [PendingExpiry(meta, settings.gc_interval_s), repair, ops, lc]  # lc: the lifecycle worker
        async with anyio.create_task_group() as tg:
            for w in workers:
                tg.start_soon((WhileActive(w, journal) if ha else w).run_forever)
            tg.start_soon(StoreReopen(meta).run_forever)
            if ha:
                tg.start_soon(journal.run)
            yield
            tg.cancel_scope.cancel()
        await rpc.stop()
        if ha:
            await journal.etcd.close()
        meta.kv.close()  # (HA: a rebuild may have replaced the store opened above)
        if cmd_log is not None:
            cmd_log.close()

    app = FastAPI(title="epochfs NameNode", lifespan=lifespan)

    @app.get("/healthz")
    async def healthz():
        j = app.state.journal
        return {"status": "ok", "nodes": len(app.state.members.nodes), "role": getattr(j, "role", "embedded")}

    @app.get("/internal/checkpoint", include_in_schema=False)
    async def checkpoint(request: Request):
        """A tar of a consistent copy of this NameNode's store, for a peer rebuilding itself (HA); its applied_seq
        key says where to tail the log from. Cluster secret in the x-epochfs-secret header."""
        if not hmac.compare_digest(request.headers.get(SECRET_HEADER, "").encode(), settings.cluster_secret.encode()):
            raise HTTPException(403, "bad cluster secret")
        tmp = await asyncio.to_thread(_checkpoint_tar, app.state.meta.kv)
        return FileResponse(f"{tmp}/meta.tar", media_type="application/x-tar",
                            background=BackgroundTask(shutil.rmtree, tmp, ignore_errors=True))

    mount_metrics(app, settings.metrics_token)
    return app


_ROLES = ("embedded", "active", "standby", "rebuilding", "deposed")


def _ha_metrics(journal, meta: MetaStore) -> None:
    def role():
        cur = getattr(journal, "role", "embedded")
        return [((r,), 1 if r == cur else 0) for r in _ROLES]

    def log_end():
        return getattr(journal, "log_end", meta.seq)

    gauge("epochfs_nn_role", "This NameNode's role (1 for the current one)", role, ("role",))
    gauge("epochfs_nn_epoch", "The fencing epoch this NameNode knows (HA: the leader key's revision)",
          lambda: [((), journal.epoch)])
    gauge("epochfs_nn_applied_seq", "Sequence number of the last command applied to this NameNode's store",
          lambda: [((), meta.seq)])
    gauge("epochfs_nn_durable_seq", "Last command known durable (embedded: WAL fsynced; HA: in etcd's log)",
          lambda: [((), journal.durable_seq())])
    gauge("epochfs_nn_log_end", "Last command in the metadata log, as this NameNode knows it", lambda: [((), log_end())])
    gauge("epochfs_nn_log_lag", "Commands in the log this NameNode has not applied",
          lambda: [((), max(0, log_end() - meta.seq))])
