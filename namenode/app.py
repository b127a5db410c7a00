from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from epochfs.common.kv import RocksKV
from epochfs.common.metrics import mount_metrics
from epochfs.common.rpc import RpcServer
from epochfs.common.worker import PassStats, Worker

from . import metrics
from .api import make_handlers
from .commands import CommandLog
from .config import NameNodeSettings
from .jobs import OperatorJobs
from .lifecycle import LifecycleWorker
from .membership import Membership
from .metastore import MetaStore
from .repair import RepairWorker


class PendingExpiry(Worker):
    """Turns allocations of uploads that never committed into garbage after the grace period."""

    def __init__(self, meta: MetaStore, interval_s: float) -> None:
        self.meta, self.interval_s = meta, interval_s

    async def run_once(self) -> PassStats:
        self.meta.expire_pending()
        return PassStats()


def create_app(settings: NameNodeSettings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        kv = RocksKV.open(settings.data_dir / "meta")
        log = CommandLog(settings.command_log) if settings.command_log else None
        meta = MetaStore(kv, pending_grace_s=settings.pending_grace_s, free_grace_s=settings.free_grace_s, log=log)
        members = Membership(meta, settings.heartbeat_timeout_s)
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
        app.state.meta, app.state.members, app.state.repair = meta, members, repair
        metrics.register(meta, members, repair)
        rpc = RpcServer(make_handlers(meta, members, settings, repair, ops, lc), settings.cluster_secret,
                        max_payload=settings.rpc_max_payload)
        await rpc.start(settings.host, settings.rpc_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(PendingExpiry(meta, settings.gc_interval_s).run_forever)
            tg.start_soon(repair.run_forever)
            tg.start_soon(ops.run_forever)
            tg.start_soon(lc.run_forever)
            yield
            tg.cancel_scope.cancel()
        await rpc.stop()
        kv.close()
        if log is not None:
            log.close()

    app = FastAPI(title="epochfs NameNode", lifespan=lifespan)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "nodes": len(app.state.members.nodes)}

    mount_metrics(app, settings.metrics_token)
    return app
