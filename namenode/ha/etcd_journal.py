"""HA mode: several NameNodes, one active, the metadata log in etcd (issue 16).

etcd keys under the prefix P (NN_ETCD_PREFIX):
  P/leader              {"name", "addr", "http"} of the active NameNode, put with its lease. Election: create it if it
                        does not exist. Its create_revision is the fencing epoch: unique per leadership, increasing.
  P/log/<first seq:20>  one group of commands: MessagePack [first_seq, [entry, ...]] (zlib-compressed behind a "Z"
                        byte when larger than ZIP_MIN), an entry per command:
                        [the command (namenode/commands.encode), its redo record: the (key, value or None) pairs its
                        batch wrote] (an older log's entries are the command alone: still applied by re-executing
                        it); appended only by the leader in a txn guarded by
                        create_revision(P/leader) == its epoch (a deposed leader's append fails) and
                        create_revision(key) == 0 (never overwritten).
  P/members/<name>      {"name", "addr", "http", "role", "applied"} with the member's lease, every PUBLISH_S; `applied`
                        is fsynced in its RocksDB, so truncation may trust it.

The active NameNode applies a command at once (MetaStore.execute, with its undo and redo records), appends its writes
with those of the commands executed meanwhile in one txn (group commit, shaped by _linger) and lets the replies go
once etcd committed it. Standbys apply each group in one RocksDB batch, reading nothing (the active did the work: a
standby costs a fraction of it), so a failover needs no long replay; a new leader applies the log to its end before it
serves. The active NameNode pushes each group etcd committed to the standbys (LogPush, over the services' frame RPC,
cheaper for the standby and for etcd than a watch of the log: see _tail); a standby watches only
the leader key, and reads the log past what it applied from etcd when a push leaves a gap or none came for POLL_S
(idle, lost, a standby the active does not know yet): etcd stays the only source of what is committed, a push only
carries a copy. A deposed
leader stops acknowledging (failed txn, lease gone, or its local lease deadline passed: before etcd could give the
lease to another), fails its waiting replies with NotLeader, rolls back what etcd never confirmed (undo.py) and
follows the new leader. The leader truncates the log below what every live member applied, and compacts etcd, so
etcd holds only the tail; a member behind the tail (or with no store) copies a checkpoint from a peer first.

Stale reads (the observer reads of HDFS): a standby answers the reads that ask for it (messages.StaleOk: manifests,
stat_many, the mount's reads by inode) from its own store, while it can vouch that it misses at most the last
NN_STALE_READ_MAX_S of writes: `fresh_at` is the send time of the last linearizable etcd read after which it had
applied every log group that read saw (check_stale), so every write acknowledged before fresh_at is in its store.
While reads come, such a read is made every half bound (one etcd round trip, keys only, the log's last key); a
standby that cannot confirm within the bound (frozen, cut off from etcd, its watch stalled, behind) answers TooStale
and the client asks the active NameNode. `min_seq` (read-your-writes) waits a moment for that command to be applied.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import logging
import shutil
import tarfile
import time
import zlib
from pathlib import Path
from typing import Callable

import httpx
import msgspec
from prometheus_client import Counter, Histogram

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.clients import StandbyClient
from epochfs.common.config import parse_addr
from epochfs.common.kv import RocksKV
from epochfs.common.rpc import RpcClient

from .. import commands as cmds
from . import undo
from .etcd import Compacted, Etcd, EtcdUnavailable, LeaseNotFound
from .journal import SECRET_HEADER, Journal

log = logging.getLogger("epochfs.namenode.ha")

LINGER_MIN_S = 0.002
MAX_GROUP_BYTES = 512 << 10  # a group of several commands stays well under etcd's request limit (a larger command
# goes alone; EtcdJournal.admit refuses one that could not fit even alone)
REQUEST_OVERHEAD = 16 << 10  # the append txn's key, guards and framing, next to its value, with room to spare
PUBLISH_S = 0.5
REPUBLISH_S = 10.0  # an unchanged member record is put again this often (_publish)
STALE_WAIT_S = 0.1  # a stale read waits at most this long for the log position it needs (min_seq, a confirmation)
TRUNCATE_S = 2.0
POLL_S = 0.5  # a standby that got no push for this long reads the log past what it applied from etcd (_poll); after
# a read that found nothing it waits twice as long, up to the lease TTL (an idle standby: one read per TTL, as before)
PUSH_MAX_BYTES = 8 << 20  # log groups queued for one standby at most (more: dropped, the standby reads them from etcd)
PUSH_TIMEOUT_S = 2.0
PUSH_RETRY_S = 0.5  # after a failed push, the next one waits this long (the standby reads from etcd meanwhile)

APPEND_SECONDS = Histogram("epochfs_nn_log_append_seconds", "Time of one log append txn in etcd (leader)",
                           buckets=(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2))
GROUPS_APPLIED = Counter("epochfs_nn_log_groups_applied_total",
                         "Log groups a standby applied, by how they came: pushed by the active NameNode, or read "
                         "from etcd (catching up, a gap, no push)", ["via"])
GROUP_SIZE = Histogram("epochfs_nn_log_group_commands", "Commands per log append (group commit)",
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024))

_pack = msgspec.msgpack.Encoder().encode
# a group: [first seq, [entry, ...]]; an entry is [command, writes]: the command as namenode/commands.encode made it
# (the log stays a log of replayable commands: audit, replay, tests compare both) and its redo record, the (key,
# value or None) pairs its batch wrote, which is what a standby applies (one decode reads the whole group, no reads,
# no re-execution); a bytes entry is a command alone, as the log held before redo records
Writes = list[tuple[bytes, bytes | None]]
Entry = bytes | tuple[bytes, Writes]
_decode = msgspec.msgpack.Decoder(tuple[int, list[Entry]]).decode
# A group larger than ZIP_MIN is stored zlib-compressed (level 1) behind the byte ZIP, which no group's MessagePack
# array starts with. The redo records repeat keys, field names and ETags: 15 PutObject commands, 8.2 KB -> 1.5 KB.
# etcd's cost grows with the bytes (bench/nn_ha_bench.py's etcd alone, a guarded txn: 1.9 ms of etcd CPU and 1.9 ms
# per append at 100 B, 2.9 ms and 2.5 ms at 10 KB); level 1 costs the active ~40-110 us per 8 KB group.
ZIP, ZIP_MIN = b"Z", 1024
MAX_GROUP_UNZIPPED = 64 << 20  # a compressed group never unpacks past this (etcd's request limit is far below)


def _pack_group(first: int, group: list[bytes]) -> bytes:
    value = _pack((first, [msgspec.Raw(raw) for raw in group]))
    return ZIP + zlib.compress(value, 1) if len(value) > ZIP_MIN else value


def _unpack(value: bytes | memoryview) -> tuple[int, list]:
    if value[:1] == ZIP:
        z = zlib.decompressobj()
        value = z.decompress(memoryview(value)[1:], MAX_GROUP_UNZIPPED)
        if z.unconsumed_tail or not z.eof:
            raise ValueError("a log group that unpacks past MAX_GROUP_UNZIPPED, or cut short")
    return _decode(value)


class Deposed(Exception):
    pass


class _Pusher:
    """The active NameNode's sender of committed log groups to one standby: in log order, every group queued while
    the previous push was in flight in the next one. Never on a client's path: a standby out of reach or slow loses
    the groups queued for it (over PUSH_MAX_BYTES, or a failed push) and reads them from etcd."""

    def __init__(self, client: StandbyClient) -> None:
        self.client = client
        self._queue: list[tuple[m.LogGroup, bytes]] = []
        self._bytes = 0
        self._kick = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def add(self, group: m.LogGroup, value: bytes) -> None:
        if self._bytes + len(value) > PUSH_MAX_BYTES:
            self._queue.clear()
            self._bytes = 0
        self._queue.append((group, value))
        self._bytes += len(value)
        self._kick.set()

    async def _run(self) -> None:
        try:
            while True:
                await self._kick.wait()
                self._kick.clear()
                batch, self._queue, self._bytes = self._queue, [], 0
                try:
                    await self.client.log_push([g for g, _ in batch], b"".join(v for _, v in batch))
                except Exception as e:  # noqa: BLE001 -- out of reach, refused, timed out: the standby reads etcd
                    log.debug("log push to %r: %r", self.client.rpc, e)
                    await asyncio.sleep(PUSH_RETRY_S)
        finally:
            await self.client.close()

    def close(self) -> None:
        self._task.cancel()


class EtcdJournal(Journal):
    def __init__(self, meta, settings, *, on_promote: Callable[[], None] = lambda: None) -> None:
        self.meta = meta
        self.settings = settings
        self.etcd = Etcd(settings.etcd_endpoints, timeout=max(0.5, settings.lease_ttl_s / 2))
        p = settings.etcd_prefix.rstrip("/").encode()
        self.k_leader, self.k_log, self.k_members = p + b"/leader", p + b"/log/", p + b"/members/"
        self.k_log_end = self.k_log[:-1] + b"0"  # the end of the log's key range
        self.name, self.addr, self.http = settings.member_name, settings.addr, settings.http_addr
        self.me = json.dumps({"name": self.name, "addr": self.addr, "http": self.http}).encode()
        self.ttl = settings.lease_ttl_s
        self.max_command_bytes = settings.etcd_max_request_bytes - REQUEST_OVERHEAD
        self.on_promote = on_promote
        self.role = "standby"
        self.epoch = 0
        self.leader = ""  # the active NameNode's RPC address, as far as we know
        self.confirmed = meta.seq  # commands up to here are in etcd's log (standby: applied from it)
        self.log_end = meta.seq
        self.log_first = 0
        self.lease = 0
        self.deadline = 0.0  # monotonic: past it the leader acknowledges nothing (its lease may be gone)
        self._pending: list[tuple[int, bytes]] = []  # executed, not appended yet
        self._waiters: list = []  # heap of (seq, n, future)
        self._n = itertools.count()
        self._kick = asyncio.Event()
        self._fill_at = 0  # submit resolves _filled once this many commands are pending (_linger)
        self._append_s = 0.0  # the recent appends' duration (moving average), which bounds the linger
        self._filled: asyncio.Future | None = None
        self._deposed: asyncio.Event | None = None
        self._store_lock = asyncio.Lock()  # the store is being replaced (rebuild): no WAL flush meanwhile
        # stale reads (check_stale): the freshness this standby can vouch for
        self.stale_max_s = settings.stale_read_max_s
        self.fresh_at = -1e18  # monotonic send time of the last etcd read showing the whole log applied
        self._tailing = False  # following the leader with the log applied to where the watch stands
        self._applied_rev = 0  # the etcd revision up to which the log is applied
        self._advanced = asyncio.Event()  # set (and replaced) whenever the applied position moves
        self._confirm: asyncio.Task | None = None
        self._fed_at = 0.0  # monotonic: when a push or a read of etcd last brought the log (else: _poll)
        self._poll_every = POLL_S
        self._poll_lock = asyncio.Lock()
        self._poll_task: asyncio.Task | None = None
        self._pushers: dict[str, _Pusher] = {}  # the active one's: per standby RPC address
        meta.writable = self.check_serving
        meta.journal = self

    # ---------------------------------------------------------------- the Journal interface
    def log_key(self, first: int) -> bytes:
        return self.k_log + b"%020d" % first

    def is_active(self) -> bool:
        return self.role == "active" and time.monotonic() < self.deadline

    def check_serving(self) -> None:
        """Raise NotLeader unless this NameNode is the active one and sure of its lease (the standby gate)."""
        if not self.is_active():
            raise errors.NotLeader(f"NameNode {self.name} is {self.role}", leader=self.leader)

    def admit(self, cmd) -> bytes:
        """The command's encoding, or EntityTooLarge if one log append holding it alone would exceed etcd's request
        limit (etcd would refuse every retry of it, and the leader would lose its lease over it)."""
        raw = cmds.encode(cmd)
        if len(raw) > self.max_command_bytes:
            raise errors.EntityTooLarge(
                f"the {type(cmd).__name__} command takes {len(raw)} bytes; the metadata log (etcd) takes at most "
                f"{self.max_command_bytes} per command (NN_ETCD_MAX_REQUEST_BYTES {self.settings.etcd_max_request_bytes}"
                f" less {REQUEST_OVERHEAD} for the append's key and guards)")
        return raw

    def admit_writes(self, cmd, raw: bytes | None, writes: bytes) -> None:
        """The log carries the command and its writes (which can be larger than the command): the same bound."""
        size = len(writes) + len(raw or b"")
        if size > self.max_command_bytes:
            raise errors.EntityTooLarge(
                f"the {type(cmd).__name__} command and its writes take {size} bytes; the metadata log (etcd) takes at most "
                f"{self.max_command_bytes} per command (NN_ETCD_MAX_REQUEST_BYTES "
                f"{self.settings.etcd_max_request_bytes} less {REQUEST_OVERHEAD} for the append's key and guards)")

    def submit(self, seq: int, cmd, raw: bytes | None = None, writes: bytes | None = None) -> None:
        """`raw`: the command's encoding (from `admit`); `writes`: its redo record (MetaStore keeps undo records in HA
        mode, and redo records with them). The log entry is both."""
        if raw is None or writes is None:
            raise ValueError("HA mode needs MetaStore(undo=True): the log carries each command and its writes")
        self._pending.append((seq, _pack((raw, msgspec.Raw(writes)))))
        self._kick.set()
        if self._filled is not None and len(self._pending) >= self._fill_at and not self._filled.done():
            self._filled.set_result(None)

    def durable_seq(self) -> int:
        return self.confirmed

    async def durable(self, seq: int) -> None:
        if seq <= self.confirmed:
            if self.role != "active" or time.monotonic() < self.deadline:
                return  # a standby's state came from the log; an active one is still sure of its lease
            raise errors.NotLeader(f"NameNode {self.name}: lease deadline passed", leader="")
        if self.role != "active":
            raise errors.NotLeader(f"NameNode {self.name} was deposed", leader=self.leader)
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (seq, next(self._n), fut))
        await fut

    def _release(self) -> None:
        while self._waiters and self._waiters[0][0] <= self.confirmed:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_result(None)

    def _fail_waiters(self) -> None:
        while self._waiters:
            fut = heapq.heappop(self._waiters)[2]
            if not fut.done():
                fut.set_exception(errors.NotLeader(f"NameNode {self.name} was deposed", leader=""))
                fut.exception()

    # ---------------------------------------------------------------- the main loop
    async def run(self) -> None:
        """Campaign, lead, follow; for as long as the NameNode runs."""
        tasks = [asyncio.create_task(self._keepalive()), asyncio.create_task(self._publish())]
        try:
            while True:
                try:
                    if not self.lease:  # the keepalive task grants one
                        await asyncio.sleep(0.05)
                        continue
                    cur = await self.etcd.get(self.k_leader)
                    if cur is None:
                        log.info("%s: no leader; campaigning at seq %d", self.name, self.meta.seq)
                        # with the lease held before the awaits: one found gone meanwhile (a member that had not
                        # applied its grant yet answered LeaseNotFound to another call) left self.lease 0, and a
                        # create with it made a leader key under no lease, which never expires: every NameNode,
                        # this one too (not _ours), followed it for good (a clean-clone suite run of
                        # test_ha_etcd_members, no leader for 40 s after quorum came back)
                        lease = self.lease
                        if await self._catch_up_locked() and lease and self.lease == lease and \
                                await self.etcd.create(self.k_leader, self.me, lease):
                            await self._lead()
                        continue
                    if self._ours(cur):  # our create committed, its answer never came (an etcd call that timed out):
                        await self._lead()  # followed as another's, the key under our live lease stayed for good
                        continue
                    log.info("%s: following %s (epoch %d)", self.name, cur.value[:200], cur.create_revision)
                    await self._follow(cur)
                except LeaseNotFound:
                    self._lease_lost()
                except (EtcdUnavailable, Compacted) as e:
                    log.warning("etcd: %s", e)
                    await asyncio.sleep(0.2)
                except Exception:  # a bug or a client library surprise: log it, keep the NameNode in the game
                    log.exception("HA loop")
                    await asyncio.sleep(0.5)
        finally:
            for t in tasks:
                t.cancel()

    async def _keepalive(self) -> None:
        """Keep the lease alive every TTL/3, and 0.1 s after a refresh that failed (etcd's members hedged: Etcd.keepalive);
        the leader's deadline is the send time of the last good refresh plus the TTL, less a margin: etcd cannot expire
        the lease before that."""
        margin = min(0.5, self.ttl / 4)
        while True:
            failed = False
            if not self.lease:
                try:
                    sent = time.monotonic()
                    self.lease = await self.etcd.grant(self.ttl)
                    self.deadline = sent + self.ttl - margin
                    log.info("%s: lease %x granted", self.name, self.lease)
                except Exception as e:  # noqa: BLE001 -- EtcdUnavailable, or anything: try again
                    log.warning("lease: %r", e)
            else:
                sent, lease = time.monotonic(), self.lease
                try:
                    left = await self.etcd.keepalive(lease)
                except EtcdUnavailable:
                    left = None
                except Exception:  # noqa: BLE001 -- never let the keepalive task die
                    log.exception("keepalive")
                    left = None
                failed = left is None
                log.debug("keepalive %x: %s in %.3f s", lease, left, time.monotonic() - sent)
                if lease != self.lease:
                    pass  # given up meanwhile (a deposed leader revokes its lease)
                elif left:
                    self.deadline = sent + min(self.ttl, left) - margin
                elif left == 0:  # expired: our member record and any leadership are gone
                    log.warning("lease %x expired", lease)
                    self.lease = 0
                    self._depose("lease expired")
                if self.role == "active" and time.monotonic() >= self.deadline:
                    self._depose("lease deadline passed without a refresh")
            await asyncio.sleep(0.1 if failed else self.ttl / 3)

    def _lease_lost(self) -> None:
        if self.lease:
            log.warning("lease %x is gone", self.lease)
        self.lease = 0  # the keepalive task grants a new one
        self._depose("lease gone")

    async def _publish(self) -> None:
        """The member record, with `applied` fsynced in the local WAL first; put again when it changed (or its lease),
        else every REPUBLISH_S only: an idle trio wrote 6 records a second to etcd, each a raft round and 3 fsyncs."""
        last, last_t, synced = None, 0.0, -1
        while True:
            try:
                if self.lease and self.role != "rebuilding":
                    async with self._store_lock:
                        seq = self.meta.seq
                        if seq != synced:
                            await asyncio.to_thread(self.meta.kv.flush)
                            synced = seq
                    rec = json.dumps({"name": self.name, "addr": self.addr, "http": self.http, "role": self.role,
                                      "applied": seq}).encode()
                    if (self.lease, rec) != last or time.monotonic() - last_t >= REPUBLISH_S:
                        await self.etcd.put(self.k_members + self.name.encode(), rec, self.lease)
                        last, last_t = (self.lease, rec), time.monotonic()
            except LeaseNotFound:
                self._lease_lost()
            except (EtcdUnavailable, Compacted) as e:
                log.debug("member record: %s", e)
            except Exception:  # noqa: BLE001 -- never let the publisher die
                log.exception("member record")
            await asyncio.sleep(PUBLISH_S)

    # ---------------------------------------------------------------- following
    def _apply_group(self, value: bytes | memoryview, via: str) -> None:
        """Apply a log group from the first command past ours: its runs of [command, writes] entries by their writes
        in one write batch each (a standby reads nothing to apply them), bare commands (an older log's) one by one.
        `via`: how it came (GROUPS_APPLIED)."""
        first, entries = _unpack(value)
        last = first + len(entries) - 1
        if first > self.meta.seq + 1:
            raise Gap(first)
        i = self.meta.seq + 1 - first
        if i < len(entries):
            GROUPS_APPLIED.labels(via).inc()
        while i < len(entries):
            j = i
            while j < len(entries) and not isinstance(entries[j], bytes):
                j += 1
            if j > i:
                self.meta.apply_writes(first + i, [e[1] for e in entries[i:j]])
            if j < len(entries):
                self.meta.apply_logged(first + j, cmds.decode(entries[j]))
                j += 1
            i = j
        self.confirmed = self.meta.seq
        self.log_end = max(self.log_end, last)

    async def _catch_up_locked(self) -> bool:
        """_catch_up, one at a time with _poll (a push's gap may have one running: never two rebuilds at once)."""
        async with self._poll_lock:
            return await self._catch_up()

    async def _catch_up(self) -> bool:
        """Apply the log to its end (rebuilding from a peer first if the log no longer reaches back to us); the
        revision read at. False: we need a checkpoint and none could be had (do not campaign)."""
        for _ in range(3):
            sent = time.monotonic()
            entries, rev = await self.etcd.range(self.k_log, self.k_log_end)
            self._read_rev = rev
            if entries:
                self.log_first = int(entries[0].key[len(self.k_log):])
                if self.log_first > self.meta.seq + 1:
                    if not await self._rebuild():
                        return False
                    continue
            try:
                for e in entries:
                    self._apply_group(e.value, "etcd")
            except Gap as gap:  # a hole in the log as one read saw it: the commands we need are gone as if truncated
                # (an old group put back below newer ones by a late append of a version without put_guarded's range
                # guard): only a checkpoint brings us past them
                log.warning("%s: the log lacks commands %d..%d; rebuilding from a peer", self.name,
                            self.meta.seq + 1, gap.args[0] - 1)
                self.log_first = gap.args[0]
                if not await self._rebuild():
                    return False
                continue
            self.log_end = max(self.log_end, self.meta.seq)
            self._applied(rev, sent)
            return True
        return False

    async def _follow(self, cur) -> None:
        """Standby until the leader key goes: catch up with the log, then tail it (_tail) from the revision the
        catch-up read at."""
        self.role = "standby"
        self._set_leader(cur)
        if not await self._catch_up_locked():
            await asyncio.sleep(1.0)
            return
        now = await self.etcd.get(self.k_leader)
        if now is None or self._ours(now):  # went (or became ours) before the revision we watch from
            return
        self._tailing = True
        try:
            await self._tail(cur)
        finally:
            self._tailing = False

    async def _tail(self, cur) -> None:
        """Follow the leader until its key goes. The log groups come pushed by the active NameNode (receive); a watch
        on the leader key alone tells when it goes (or changes), from the revision the leader was read at. Without a
        push for POLL_S the log past what is applied is read from etcd (_poll): no group is ever missed, a push only
        spares the read. Why pushes: through a watch of the log, a standby spent ~1.1 ms of CPU per group of 16 S3
        0-byte PUTs, most of it in gRPC's streaming in Python and aetcd's events (py-spy), and etcd sent each group
        to every standby. `bench/s3_bench.py --target ha --phases "PUT 0"`, old and new code alternating, CPU per PUT:
        standbys (both) 0.137 / 0.127 -> 0.087 / 0.093 ms, etcd 0.286 / 0.253 -> 0.194 / 0.216 (with GOMAXPROCS=1,
        frontends/cli's etcd_env), the whole HA cluster 3.04 / 2.93 -> 2.78 / 2.83 times the gateway's CPU."""
        while True:
            try:
                events = await self.etcd.watch(self.k_leader, self.k_leader + b"\0", self._read_rev + 1)
                try:
                    since = time.monotonic()
                    while True:
                        ev = await events.next(POLL_S)
                        if ev is not None:
                            if not ev.put or ev.value == self.me:
                                return  # the leader is gone (campaign), or the key is ours (run: lead)
                            self._set_leader(cur=None, value=ev.value, rev=ev.mod_revision)
                            since = time.monotonic()
                            continue
                        if time.monotonic() - self._fed_at >= self._poll_every and not await self._poll():
                            return
                        if time.monotonic() - since >= self.ttl:
                            break  # a stream to a member that died can stay silent: check by a read
                finally:
                    events.close()
            except (Gap, Compacted, EtcdUnavailable) as e:
                log.info("tailing the log: %r; reading it again", e)
            if not await self._poll():
                return
            got, rev = await self.etcd.range(self.k_leader, None)  # last: the watch starts where this read was
            if not got or self._ours(got[0]):
                return
            self._set_leader(got[0])
            self._read_rev = rev

    def receive(self, groups: list[m.LogGroup], data) -> int:
        """A LogPush: apply its groups (committed in etcd, in log order) while tailing; this NameNode's applied
        position. A group past the next command to apply (a push lost or dropped) has the log read from etcd."""
        if sum(g.size for g in groups) != len(data):
            raise errors.InvalidInput("log push: the groups' sizes do not add up to the payload")
        if self.role != "standby" or not self._tailing:
            return self.meta.seq
        view, off = memoryview(data), 0
        try:
            for g in groups:
                self._apply_group(view[off:off + g.size], "push")  # (_unpack reads a buffer: no copy)
                off += g.size
                self._applied(g.rev)
        except Gap:
            self._poll_soon()
            return self.meta.seq
        self._fed_at, self._poll_every = time.monotonic(), POLL_S
        return self.meta.seq

    def _poll_soon(self) -> None:
        if self._poll_task is None or self._poll_task.done():
            self._poll_task = asyncio.create_task(self._poll_logged())

    async def _poll_logged(self) -> None:
        try:
            if self.role == "standby" and self._tailing:
                await self._poll()
        except (Compacted, EtcdUnavailable) as e:
            log.info("reading the log: %r", e)
        except Exception:  # noqa: BLE001 -- the tail loop polls again
            log.exception("reading the log")

    async def _poll(self) -> bool:
        """Apply the log past what is applied, read from etcd (the whole log, and a checkpoint first if needed,
        when the group holding the next command starts before it); False as _catch_up."""
        async with self._poll_lock:
            sent = time.monotonic()
            entries, rev = await self.etcd.range(self.log_key(self.meta.seq + 1), self.k_log_end)
            try:
                for e in entries:
                    self._apply_group(e.value, "etcd")
            except Gap:
                return await self._catch_up()
            self._applied(rev, sent)
            self._fed_at = time.monotonic()
            self._poll_every = POLL_S if entries else min(self.ttl, 2 * self._poll_every)
            return True

    # ---------------------------------------------------------------- stale reads
    def _applied(self, rev: int, sent: float | None = None) -> None:
        """The log is applied up to etcd revision `rev` (`sent`: read by a range sent then, which saw the whole log)."""
        self._applied_rev = max(self._applied_rev, rev)
        if sent is not None:
            self.fresh_at = max(self.fresh_at, sent)
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def _wait_applied(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until done() (checked whenever the applied position moves), at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0 or not self._tailing:
                return False
            try:
                await asyncio.wait_for(self._advanced.wait(), left)
            except asyncio.TimeoutError:
                return done()
        return True

    async def _confirm_fresh(self) -> None:
        """One linearizable read of the log's last key: once the group it names is applied, everything committed
        before the read was sent is in the store (fresh_at moves to the send time)."""
        sent = time.monotonic()
        try:
            last, _ = await self.etcd.range(self.k_log, self.k_log_end, keys_only=True, descending=True,
                                            limit=1)
        except (EtcdUnavailable, Compacted, LeaseNotFound) as e:
            log.info("stale reads: cannot confirm the log's end: %s", e)
            return
        target = last[0].mod_revision if last else 0
        if await self._wait_applied(lambda: self._applied_rev >= target, STALE_WAIT_S):
            self.fresh_at = max(self.fresh_at, sent)

    async def check_stale(self, want: m.StaleOk) -> None:
        """Return if this NameNode may answer a stale read now (see the module's doc), else raise TooStale."""
        if self.is_active():
            return  # the active one answers every read
        try:
            if self.stale_max_s <= 0:
                raise errors.TooStale(f"NameNode {self.name} serves no stale reads (NN_STALE_READ_MAX_S 0)",
                                      leader=self.leader)
            if self.role != "standby" or not self._tailing:
                raise errors.TooStale(f"NameNode {self.name} is {self.role}, not tailing the log", leader=self.leader)
            age = time.monotonic() - self.fresh_at
            if age > self.stale_max_s / 2 and (self._confirm is None or self._confirm.done()):
                self._confirm = asyncio.create_task(self._confirm_fresh())  # one at a time, shared by every read
            if age > self.stale_max_s:
                await asyncio.wait_for(asyncio.shield(self._confirm), self.stale_max_s + STALE_WAIT_S)
                if time.monotonic() - self.fresh_at > self.stale_max_s:
                    raise errors.TooStale(f"NameNode {self.name} could not confirm it is within "
                                          f"{self.stale_max_s:g} s of the log's end", leader=self.leader)
            if want.min_seq > self.meta.seq and \
                    not await self._wait_applied(lambda: self.meta.seq >= want.min_seq, STALE_WAIT_S):
                raise errors.TooStale(f"NameNode {self.name} applied {self.meta.seq}, the read needs {want.min_seq}",
                                      leader=self.leader)
        except asyncio.TimeoutError:
            raise errors.TooStale(f"NameNode {self.name}: etcd did not answer in time", leader=self.leader) from None

    def _set_leader(self, cur, value: bytes | None = None, rev: int = 0) -> None:
        if cur is not None:
            value, rev = cur.value, cur.create_revision
        try:
            self.leader = json.loads(value)["addr"]
        except (ValueError, KeyError, TypeError):
            self.leader = ""
        if rev:
            self.epoch = rev

    # ---------------------------------------------------------------- leading
    def _ours(self, cur) -> bool:
        """The leader key is this NameNode's, under its current lease (one held under an earlier lease, by this
        NameNode before a restart, expires by itself)."""
        return cur.value == self.me and cur.lease == self.lease != 0

    async def _lead(self) -> None:
        cur = await self.etcd.get(self.k_leader)
        if cur is None or not self._ours(cur):
            return
        sent = time.monotonic()  # the lease let us win, but how long it has left is known only from a refresh
        if not await self.etcd.keepalive(self.lease):
            return
        self.deadline = sent + self.ttl - min(0.5, self.ttl / 4)
        self.epoch, self.leader = cur.create_revision, self.addr
        log.warning("%s won the election: epoch %d", self.name, self.epoch)
        if not await self._catch_up_locked():  # the log moved on while we campaigned: give way to one that can lead
            await self.etcd.delete(self.k_leader, cur.create_revision)
            return
        self.confirmed = self.meta.seq
        self._deposed = asyncio.Event()
        self.role = "active"
        self.meta.ensure_root()
        self.on_promote()
        log.warning("%s is active at seq %d (epoch %d)", self.name, self.meta.seq, self.epoch)
        tasks = [asyncio.create_task(self._append_loop()), asyncio.create_task(self._truncate_loop())]
        try:
            try:
                self._set_pushers((await self.etcd.range(self.k_members, self.k_members[:-1] + b"0"))[0])
            except (EtcdUnavailable, Compacted) as e:  # the truncation loop reads the members again
                log.info("members: %s", e)
            while not self._deposed.is_set():  # the deadline holds even while every etcd call hangs
                try:
                    await asyncio.wait_for(self._deposed.wait(), 0.1)
                except asyncio.TimeoutError:
                    if time.monotonic() >= self.deadline:
                        self._depose("lease deadline passed without a refresh")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._set_pushers([])
            self._demote()
            await self._give_up_lease()

    async def _give_up_lease(self) -> None:
        """A deposed leader may still hold the leader key (deposed by its own deadline while etcd kept the lease):
        revoking the lease frees it, so that an election can happen; a new lease is granted for the member record.
        If etcd cannot be reached, the lease (no longer refreshed) expires by itself."""
        lease, self.lease = self.lease, 0
        if lease:
            try:
                await self.etcd.revoke(lease)
            except (EtcdUnavailable, Compacted):
                pass

    def _depose(self, why: str) -> None:
        if self.role == "active":
            log.warning("%s deposed: %s", self.name, why)
            self.role = "deposed"  # acknowledges nothing from here on
            self._fail_waiters()
            if self._deposed is not None:
                self._deposed.set()

    def _demote(self) -> None:
        """Back to standby: drop what etcd never confirmed (undo records), then the log tells what stays."""
        self.role = "standby"
        self._fail_waiters()
        self._pending.clear()
        n = undo.rollback(self.meta.kv)
        self.meta.reset()
        self.confirmed = self.meta.seq
        log.warning("%s rolled back %d unconfirmed commands; standby at seq %d", self.name, n, self.meta.seq)

    async def _linger(self, target: int) -> None:
        """Wait until `target` commands are pending, or NN_GROUP_LINGER_S. Without it, under a steady load, appends
        alternate between one command (executed while the previous append was in flight) and all the others (sent by
        the callers that append released), and each caller waits for two appends. The target counts both, so a group
        split once (a linger that ran out on a busy machine) is whole again at the next append. It waits at most two
        recent appends' time (a caller that misses this append waits for the next one anyway), within
        LINGER_MIN_S..NN_GROUP_LINGER_S: on a loaded machine the callers took longer than a fixed 5 ms to come back,
        and each append cut short costs etcd's three members as much CPU as a full one (S3 tiny PUTs, 16 clients:
        8 commands per append with 5 ms, 15 with 15 ms, and 15-30% less server CPU per PUT)."""
        if len(self._pending) >= target:
            return
        loop = asyncio.get_running_loop()
        fut = self._filled = loop.create_future()
        self._fill_at = target
        wait = min(self.settings.group_linger_s, max(LINGER_MIN_S, 2 * self._append_s))
        timer = loop.call_later(wait, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            timer.cancel()
            self._filled = None

    async def _append_loop(self) -> None:
        target = 1  # the load's measure: what the last append carried and what was executed meanwhile (idle: 1)
        while True:
            await self._kick.wait()
            self._kick.clear()
            value = None
            while self._pending and self.role == "active":
                if value is None:  # else the append before failed without an answer: the same group again, for
                    # it may have committed after all (the check below finds it only if it is the same)
                    await self._linger(target)
                    group, size = [], 0
                    for seq, raw in self._pending:
                        if group and size + len(raw) > MAX_GROUP_BYTES:
                            break
                        group.append(raw)
                        size += len(raw)
                    first = self._pending[0][0]
                    value = _pack_group(first, group)
                    key = self.log_key(first)
                t0 = time.monotonic()
                try:
                    rev = await self.etcd.put_guarded(self.k_leader, self.epoch, key, self.k_log_end, value)
                    if not rev:  # a retried txn that had committed? else we are no longer the leader
                        e = await self.etcd.get(key)
                        lead = await self.etcd.get(self.k_leader)
                        if e is not None and e.value == value and lead is not None and \
                                lead.create_revision == self.epoch:
                            rev = e.mod_revision
                except EtcdUnavailable as e:
                    if time.monotonic() >= self.deadline:
                        self._depose(f"etcd unreachable past the lease deadline: {e}")
                        return
                    await asyncio.sleep(0.05)
                    continue
                if not rev:
                    self._depose("log append refused: another NameNode leads")
                    return
                took = time.monotonic() - t0
                APPEND_SECONDS.observe(took)
                self._append_s += (took - self._append_s) * 0.1
                GROUP_SIZE.observe(len(group))
                del self._pending[:len(group)]
                target = len(group) + len(self._pending)  # the callers released now come back, with the others
                last = first + len(group) - 1
                undo.confirm(self.meta.kv, first, last)
                self.confirmed = self.log_end = last
                self._release()
                if len(value) <= PUSH_MAX_BYTES:  # (a larger one is read from etcd by the standbys)
                    pushed = m.LogGroup(first=first, rev=rev, size=len(value))
                    for p in self._pushers.values():
                        p.add(pushed, value)
                value = None

    async def _truncate_loop(self) -> None:
        while True:
            try:
                await self.etcd.prefer_leader()  # the log appends go to etcd's leader (it can change: look again)
            except Exception:  # noqa: BLE001 -- only a preference
                log.exception("finding etcd's leader")
            await asyncio.sleep(TRUNCATE_S)
            try:
                await self.truncate_once()
            except (EtcdUnavailable, Compacted) as e:
                log.info("truncation: %s", e)

    def _set_pushers(self, recs) -> None:
        """Push to the NameNodes whose member records are in `recs`, but this one."""
        addrs = set()
        for r in recs:
            d = json.loads(r.value)
            if d.get("name") != self.name and d.get("addr"):
                addrs.add(d["addr"])
        for a in set(self._pushers) - addrs:
            self._pushers.pop(a).close()
        for a in addrs - set(self._pushers):
            host, port = parse_addr(a)
            self._pushers[a] = _Pusher(StandbyClient(RpcClient(host, port, self.settings.cluster_secret,
                                                               timeout=PUSH_TIMEOUT_S, max_idle=1)))

    async def truncate_once(self) -> int:
        """Delete the log groups every live member applied, then compact etcd; the new first seq (0: nothing)."""
        recs, _ = await self.etcd.range(self.k_members, self.k_members[:-1] + b"0")
        if self.role == "active":
            self._set_pushers(recs)
        applied = [json.loads(r.value).get("applied", 0) for r in recs]
        if not applied or not any(json.loads(r.value).get("name") == self.name for r in recs):
            return 0  # our own record is not there yet: nothing is known to be safe
        low = min(applied)
        keep, _ = await self.etcd.range(self.k_log, self.log_key(low + 2), keys_only=True, descending=True, limit=1)
        if not keep:
            return 0
        first = int(keep[0].key[len(self.k_log):])  # the group holding low+1 (or starting right after low)
        if first <= self.log_first:
            return 0
        rev = await self.etcd.delete_range(self.k_log, self.log_key(first))
        await self.etcd.compact(rev)
        self.log_first = first
        log.info("log truncated below %d (every member applied %d); etcd compacted at %d", first, low, rev)
        return first

    # ---------------------------------------------------------------- rebuilding from a peer's checkpoint
    async def _rebuild(self) -> bool:
        self.role = "rebuilding"
        try:
            recs, _ = await self.etcd.range(self.k_members, self.k_members[:-1] + b"0")
            peers = [json.loads(r.value) for r in recs]
            peers = sorted((p for p in peers if p.get("name") != self.name and p.get("http")
                            and p.get("applied", 0) + 1 >= self.log_first), key=lambda p: -p.get("applied", 0))
            for p in peers:
                try:
                    await self._install_checkpoint(p["http"])
                    log.warning("%s rebuilt from %s's checkpoint: seq %d", self.name, p["name"], self.meta.seq)
                    return True
                except Exception as e:  # noqa: BLE001 -- try the next peer
                    log.warning("checkpoint from %s failed: %r", p.get("name"), e)
            log.warning("%s is behind the log (seq %d < %d) and no peer has a checkpoint", self.name, self.meta.seq,
                        self.log_first - 1)
            return False
        finally:
            self.role = "standby"

    async def _install_checkpoint(self, http: str) -> None:
        data_dir = Path(self.settings.data_dir)
        tar_path, new, cur = data_dir / "meta.checkpoint.tar", data_dir / "meta.new", data_dir / "meta"
        async with httpx.AsyncClient(timeout=60.0) as c:
            async with c.stream("GET", f"http://{http}/internal/checkpoint",
                                headers={SECRET_HEADER: self.settings.cluster_secret}) as r:
                r.raise_for_status()
                with open(tar_path, "wb") as f:
                    async for chunk in r.aiter_bytes(1 << 20):
                        f.write(chunk)

        def unpack() -> None:
            shutil.rmtree(new, ignore_errors=True)
            with tarfile.open(tar_path) as t:
                t.extractall(new, filter="data")
            tar_path.unlink()
        await asyncio.to_thread(unpack)
        async with self._store_lock:
            self.meta.kv.close()
            old = data_dir / "meta.old"
            shutil.rmtree(old, ignore_errors=True)
            if cur.exists():
                cur.rename(old)
            new.rename(cur)
            kv = RocksKV.open(cur)
            undo.rollback(kv)  # a leader's checkpoint holds its unconfirmed commands: the log says what stays
            self.meta.reset(kv)
            shutil.rmtree(old, ignore_errors=True)
        self.confirmed = self.meta.seq

    # ---------------------------------------------------------------- status
    async def ha_state(self) -> m.HaState:
        members, log_end, log_first = [], self.log_end, self.log_first
        try:
            recs, _ = await self.etcd.range(self.k_members, self.k_members[:-1] + b"0")
            last, _ = await self.etcd.range(self.k_log, self.k_log_end, descending=True, limit=1)
            firsts, _ = await self.etcd.range(self.k_log, self.k_log_end, keys_only=True, limit=1)
            if last:
                f, raws = _unpack(last[0].value)
                log_end = f + len(raws) - 1
            if firsts:
                log_first = int(firsts[0].key[len(self.k_log):])
            for r in recs:
                d = json.loads(r.value)
                members.append(m.HaMember(name=d.get("name", ""), addr=d.get("addr", ""), http=d.get("http", ""),
                                          role=d.get("role", ""), applied=d.get("applied", 0),
                                          lag=max(0, log_end - d.get("applied", 0))))
        except (EtcdUnavailable, Compacted):
            pass
        return m.HaState(mode="etcd", name=self.name, role=self.role, epoch=self.epoch, leader=self.leader,
                         log_end=log_end, log_first=log_first, members=members, etcd=await self.etcd.health(),
                         stale_served=self.stale_served, stale_refused=self.stale_refused)


class Gap(Exception):
    """A log group starts past the next command to apply (missed events): read the log again."""
