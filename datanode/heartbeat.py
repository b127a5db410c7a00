"""Registration with the NameNode and periodic heartbeats; the replies carry blocks to delete."""
from __future__ import annotations

import logging
import shutil

from epochfs.common import errors
from epochfs.common.rpc import RpcClient
from epochfs.common.worker import PassStats, Worker

from .blockstore import BlockStore

log = logging.getLogger("epochfs.datanode")


class Heartbeat(Worker):
    def __init__(self, store: BlockStore, nn: RpcClient, *, uuid: str, host: str, rpc_port: int, http_port: int,
                 capacity: int, data_dir, interval_s: float = 1.0) -> None:
        self.store, self.nn = store, nn
        self.uuid, self.host, self.rpc_port, self.http_port = uuid, host, rpc_port, http_port
        self.capacity_cfg, self.data_dir = capacity, data_dir
        self.interval_s = interval_s
        self.node_id: int | None = None
        self._deleted: list[int] = []

    def capacity(self) -> int:
        if self.capacity_cfg:
            return self.capacity_cfg
        return shutil.disk_usage(self.data_dir).free + self.store.used

    async def register(self) -> None:
        res, _ = await self.nn.call("register", uuid=self.uuid, host=self.host, rpc_port=self.rpc_port,
                                    http_port=self.http_port, capacity=self.capacity(), used=self.store.used)
        self.node_id = res["node_id"]
        log.info("registered as node %s", self.node_id)

    async def run_once(self) -> PassStats:
        try:
            if self.node_id is None:
                await self.register()
            res, _ = await self.nn.call("heartbeat", node_id=self.node_id, used=self.store.used,
                                        capacity=self.capacity(), blocks=self.store.count, deleted=self._deleted,
                                        extra=self.store.replication_lag())
        except errors.Unavailable:
            return PassStats(failed=1)
        self._deleted = []
        if res.get("reregister"):
            self.node_id = None
            return PassStats(failed=1)
        if res.get("delete"):
            self.store.delete(res["delete"])
            self._deleted = list(res["delete"])
        return PassStats()  # heartbeats are periodic: never "go again at once"
