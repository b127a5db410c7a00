from __future__ import annotations

import asyncio
import logging
import uuid as uuidlib
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from epochfs.common.clients import NameNodeClient
from epochfs.common import localread
from epochfs.common.kv import RocksKV
from epochfs.common.metrics import mount_metrics
from epochfs.common.peers import Peers
from epochfs.common.rpc import RpcServer

from . import metrics
from .api import OPEN_OPS, make_handlers, open_payload_check
from .blockstore import BlockStore, Purger
from .config import DataNodeSettings
from .heartbeat import Heartbeat
from .localread import LocalReadServer
from .replicator import CopyOrders, Replicator
from .scrubber import Scrubber


def node_uuid(data_dir) -> str:
    """The node's identity, kept in its data directory so that it survives restarts."""
    f = data_dir / "node-uuid"
    if not f.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        f.write_text(uuidlib.uuid4().hex)
    return f.read_text().strip()


def create_app(settings: DataNodeSettings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        kv = RocksKV.open(settings.data_dir / "blocks", bulk=True)
        store = BlockStore(kv, files=settings.data_dir / "blocks.files")
        peers = Peers(settings.cluster_secret)
        replicator = Replicator(store, peers, interval_s=settings.replication_interval_s,
                                concurrency=settings.replication_concurrency)

        background: set[asyncio.Task] = set()

        def spawn(coro) -> None:
            t = asyncio.get_running_loop().create_task(coro)
            background.add(t)
            t.add_done_callback(background.discard)

        async def replicate_loop():
            while True:
                try:
                    stats = await replicator.run_once()
                except Exception:
                    logging.getLogger("epochfs.datanode").exception("replication pass failed")
                    stats = None
                if stats is not None and stats.ok and not stats.failed:
                    continue
                await anyio.sleep(settings.replication_interval_s)

        nn = NameNodeClient.connect(settings.namenode, settings.cluster_secret, timeout=10.0)
        scrubber = Scrubber(store, bytes_per_s=settings.scrub_bytes_per_s, interval_s=settings.scrub_interval_s)
        hb = Heartbeat(store, nn, uuid=node_uuid(settings.data_dir), host=settings.advertise_host or settings.host,
                       rpc_port=settings.rpc_port, http_port=settings.port, capacity=settings.capacity_bytes,
                       data_dir=settings.data_dir, interval_s=settings.heartbeat_interval_s,
                       copies=CopyOrders(store, peers, spawn, concurrency=settings.replication_concurrency,
                                         wake=lambda: hb.wake()),
                       report_interval_s=settings.block_report_interval_s, scrubber=scrubber, replicator=replicator,
                       restart=getattr(app.state, "restart", None))  # (common/service.py serve)
        app.state.store, app.state.heartbeat, app.state.scrubber = store, hb, scrubber
        metrics.register(store, hb)
        rpc = RpcServer(make_handlers(store, replicator, spawn, settings.capacity_bytes, settings.cluster_secret,
                                      node_id=lambda: hb.node_id, max_block=settings.rpc_max_payload),
                        settings.cluster_secret, open_ops=OPEN_OPS, max_payload=settings.rpc_max_payload,
                        open_payload=open_payload_check(settings.cluster_secret, lambda: hb.node_id))
        await rpc.start(settings.host, settings.rpc_port)
        local = LocalReadServer(store, localread.socket_path(f"{settings.advertise_host or settings.host}:"
                                                             f"{settings.rpc_port}"), settings.cluster_secret)
        if settings.local_reads:
            await local.start()
        app.state.local_reads = local
        async with anyio.create_task_group() as tg:
            tg.start_soon(hb.run_forever)
            tg.start_soon(replicate_loop)
            tg.start_soon(Purger(store).run_forever)
            tg.start_soon(scrubber.run_forever)  # idle when background scrubbing is off and no scrub job runs
            yield
            tg.cancel_scope.cancel()
        await local.stop()
        await rpc.stop()
        for t in list(background):
            t.cancel()
        await peers.close()
        await nn.close()
        store.close()
        kv.close()

    app = FastAPI(title="epochfs DataNode", lifespan=lifespan)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "node_id": app.state.heartbeat.node_id, "blocks": app.state.store.count,
                "used": app.state.store.used}

    mount_metrics(app, settings.metrics_token)
    return app
