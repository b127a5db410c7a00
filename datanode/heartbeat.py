"""Registration with the NameNode and periodic heartbeats; the replies carry blocks to delete, copy orders
(re-replication, read repair, rebalance) and scrub jobs, whose outcomes and progress the next heartbeats report."""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil
import time
from typing import Callable

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.clients import NameNodeClient
from epochfs.common.kv import StorageError
from epochfs.common.space import disk_id
from epochfs.common.worker import PassStats, Worker, in_thread

from .blockstore import BlockStore
from .metrics import STALE_ORDERS
from .replicator import CopyOrders, Replicator
from .scrubber import Scrubber

log = logging.getLogger("epochfs.datanode")
# bad copies reported before one heartbeat (one call each): a damaged disk may turn up thousands at once, and the
# heartbeat must not be late for them
REPORT_BAD_PER_BEAT = 64
PROBE_S = 5.0  # a store that refused a write is tried again this often (Heartbeat.probe)
EPOCH_FILE = "fencing-epoch"


class Heartbeat(Worker):
    def __init__(self, store: BlockStore, nn: NameNodeClient, *, uuid: str, host: str, rpc_port: int, http_port: int,
                 capacity: int, data_dir, interval_s: float = 1.0, copies: CopyOrders | None = None,
                 report_interval_s: float = 60.0, scrubber: Scrubber | None = None,
                 replicator: Replicator | None = None, restart: Callable[[str], None] | None = None) -> None:
        """`restart(why)` stops the process for its supervisor to start it again (common/service.py serve), for a
        storage engine that takes writes only once opened again (probe)."""
        self.store, self.nn, self.copies, self.scrubber = store, nn, copies, scrubber
        self.replicator, self.restart = replicator, restart
        self._wake: asyncio.Event | None = None
        self.uuid, self.host, self.rpc_port, self.http_port = uuid, host, rpc_port, http_port
        self.capacity_cfg, self.data_dir = capacity, data_dir
        self.interval_s, self.report_interval_s = interval_s, report_interval_s
        self.node_id: int | None = None
        self._reported = float("-inf")  # monotonic time of the last block report the NameNode received
        self._probed = 0.0  # monotonic time of the last probe of a store that refuses writes (probe)
        self._deleted: list[int] = []
        # the highest fencing epoch a NameNode's reply carried (HA: orders below it are refused); kept in the data
        # directory, so that a restarted DataNode never obeys a deposed NameNode it hears from first
        self._epoch_file = data_dir / EPOCH_FILE if data_dir is not None else None
        self.epoch = self._load_epoch()
        self.stale_orders = 0  # replies refused for an epoch below it (epochfs_datanode_stale_orders_total)

    def capacity(self) -> int:
        if self.capacity_cfg:
            return self.capacity_cfg
        return shutil.disk_usage(self.data_dir).free + self.store.used

    @functools.cached_property
    def disk(self) -> str:
        """The file system `capacity` counts the free space of ("": a configured capacity, this node's alone)."""
        return "" if self.capacity_cfg or self.data_dir is None else disk_id(self.data_dir)

    async def register(self) -> None:
        reg = await self.nn.register(m.Register(uuid=self.uuid, host=self.host, rpc_port=self.rpc_port,
                                                http_port=self.http_port, capacity=self.capacity(),
                                                used=self.store.used))
        self._saw_epoch(reg.epoch)
        self.node_id = reg.node_id
        log.info("registered as node %s with the NameNode at %s (epoch %d)", self.node_id, self.nn.address,
                 reg.epoch)

    def _load_epoch(self) -> int:
        try:
            return int(self._epoch_file.read_text()) if self._epoch_file is not None else 0
        except FileNotFoundError:
            return 0
        except ValueError:
            log.warning("ignoring %s: not a number", self._epoch_file)
            return 0

    def _saw_epoch(self, epoch: int) -> None:
        if epoch <= self.epoch:
            return
        if self.epoch:
            log.info("a new active NameNode: fencing epoch %d (was %d)", epoch, self.epoch)
        self.epoch = epoch
        if self._epoch_file is not None:  # written once per failover: durably, then renamed over the old one
            tmp = self._epoch_file.with_suffix(".tmp")
            with open(tmp, "w") as f:
                f.write(str(epoch))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._epoch_file)

    def fenced(self, res: m.HeartbeatOrders) -> bool:
        """Whether a heartbeat reply comes from a deposed NameNode: its epoch is below the highest seen (epoch 0,
        an embedded NameNode's, is obeyed while nothing higher was seen). Its orders are then refused, logged and
        counted: a deposed leader can never delete a block."""
        if res.epoch >= self.epoch:
            self._saw_epoch(res.epoch)
            return False
        self.stale_orders += 1
        STALE_ORDERS.inc()
        log.warning("refusing the orders of a deposed NameNode (%s): its epoch %d is below %d (delete %d blocks, "
                    "%d copy orders, scrub %s, reregister %s)", self.nn.address, res.epoch, self.epoch,
                    len(res.delete.blocks) if res.delete else 0, len(res.copy), res.scrub is not None,
                    res.reregister)
        self.nn.move_on()  # the active NameNode is elsewhere
        return True

    async def report_bad(self, block_ids: list[int]) -> list[int]:
        """Tell the NameNode that this node's copies of `block_ids` are corrupt or missing, so that a good holder
        re-pushes them; returns those reported (none before registration or while the NameNode is away)."""
        done = []
        for bid in block_ids:
            if self.node_id is None:
                break
            try:
                await self.nn.report_bad_replica(bid, self.node_id)
            except (errors.Unavailable, errors.StoreRefused):
                break
            done.append(bid)
        return done

    def lag(self) -> m.ReplicationLag:
        """The replication queue as the heartbeat reports it: jobs queued, the oldest's age, those refused for space."""
        waiting = self.replicator.waiting() if self.replicator else {}
        return m.ReplicationLag(**self.store.replication_lag(), **waiting)

    def wake(self) -> None:
        """Send the next heartbeat now (a copy order is done: its outcomes reach the NameNode without waiting)."""
        if self._wake is not None:
            self._wake.set()

    async def run_forever(self) -> None:
        self._wake = asyncio.Event()
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("heartbeat failed")
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
                await asyncio.sleep(0.01)  # orders finishing together share one heartbeat
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def probe(self) -> None:
        """While the store refuses writes, see every PROBE_S whether it takes them again: no new copy is placed here
        meanwhile, so no write would ever find out (a disk that was full has room again: in service again without
        a restart). Where RocksDB refuses them since a failed WAL append (a full disk) and the disk has room again,
        only opening it again helps; the process restarts for that (the engine's files and column families are
        shared by every reader thread: closing them under those is no option), a few seconds of no service
        against being read-only until an operator restarts it."""
        if not self.store.write_error or time.monotonic() - self._probed < PROBE_S:
            return
        self._probed = time.monotonic()
        refused = await in_thread(self.store.probe_writes)
        if not refused:
            if self.store.write_error:
                log.warning("the store takes writes again (it refused them: %s)", self.store.write_error)
                self.store.write_error = ""
        elif refused == "engine" and self.restart is not None and self.store.kv.ready_to_reopen:
            why = self.store.kv.refused
            log.error("the storage engine refuses every write since one failed (%s) and its disk has room again: "
                      "it takes writes only once opened again; restarting", why)
            self.restart(f"the storage engine refused a write: {why}")

    async def run_once(self) -> PassStats:
        await self.probe()
        if self.store.bad and self.node_id is not None:  # copies found bad by readers that can't report them
            for bid in await self.report_bad(sorted(self.store.bad)[:REPORT_BAD_PER_BEAT]):
                self.store.bad.discard(bid)
        copied, failed = self.copies.take_outcomes() if self.copies else ([], [])
        try:
            if self.node_id is None:
                await self.register()
                self._reported = float("-inf")
            now = time.monotonic()
            report = self.store.block_ids() if now - self._reported >= self.report_interval_s else None
            scrub = self.scrubber.job if self.scrubber else None
            res = await self.nn.heartbeat(m.Heartbeat(
                node_id=self.node_id, used=self.store.used, capacity=self.capacity(), blocks=self.store.count,
                disk=self.disk, deleted=self._deleted, copied=[m.CopyDone(*c) for c in copied],
                copy_failed=[m.CopyFailed(*f) for f in failed], extra=self.lag(),
                write_error=self.store.write_error or "", report=report,
                scrub=None if scrub is None else m.ScrubProgress(**scrub)))
        except (errors.Unavailable, errors.StoreRefused):  # (StoreRefused: the NameNode's disk is full, say)
            if self.copies:
                self.copies.give_back(copied, failed)
            return PassStats(failed=1)
        if self.fenced(res):
            # what this heartbeat reported may not have reached the current leader: report it again
            if self.copies:
                self.copies.give_back(copied, failed)
            return PassStats(failed=1)
        self._deleted = []
        if report is not None and not res.reregister:
            self._reported = now
        if res.reregister:
            self.node_id = None
            if self.copies:
                self.copies.give_back(copied, failed)
            return PassStats(failed=1)
        if res.delete is not None and res.delete.blocks:
            try:
                self.store.delete(res.delete.blocks)
                self._deleted = list(res.delete.blocks)
            except StorageError as e:  # a store refusing writes: the NameNode asks again; copy orders still go
                self.store.write_error = self.store.write_error or str(e)[:500]
        if res.copy and self.copies:
            self.copies.start([(o.target, o.addr, o.blocks) for o in res.copy])
        if res.scrub is not None and self.scrubber:
            self.scrubber.start_job(res.scrub.job)
        return PassStats()  # heartbeats are periodic: never "go again at once"
