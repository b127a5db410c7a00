"""A thin async wrapper over the etcd client: the calls the HA NameNode makes, on bytes keys, over several endpoints.

Client: aetcd (asyncio, gRPC), chosen by measurement against etcd3gw (etcd's JSON gateway over requests, synchronous,
so run in a worker thread): bench/etcd_client.py, one guarded append txn of 2 KiB, etcd 3.4 on this machine:
aetcd 0.9-1.15 ms p50 and 400-590 us of client CPU per append one at a time (310 us with 8 in flight, ~1,000
appends/s); etcd3gw 2.8-3.1 ms p50 and 1,550 us of CPU per append (1,430-1,510 us with 8 in flight, fewer than 250
appends/s: the thread hop and JSON+base64 cost more than the append itself). The NameNode appends on its own event
loop, so the client's CPU is the NameNode's CPU. aetcd also gives watches as async iterators, with no thread.

Neither library follows several endpoints: this wrapper keeps one client per endpoint and moves to the next one when
a call fails to reach etcd (a member down), raising EtcdUnavailable once every endpoint failed. Calls are bounded by
`timeout` so that a silent member cannot hold the leader past its lease.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aetcd
from aetcd import rpc

log = logging.getLogger("epochfs.namenode.etcd")
# gRPC's own 4 MiB receive bound would stop a watch or a range carrying a log group of a command near etcd's request
# limit (NN_ETCD_MAX_REQUEST_BYTES, up to 64 MiB), or many groups: the bound is etcd's, not the channel's
GRPC_OPTIONS = {"grpc.max_receive_message_length": 256 << 20, "grpc.max_send_message_length": 80 << 20}


class EtcdUnavailable(Exception):
    """No etcd endpoint answered (or the cluster has no quorum)."""


class LeaseNotFound(Exception):
    """The lease a call named expired (or was revoked): grant a new one."""


class Compacted(Exception):
    """A watch or read asked for revisions etcd compacted away: read the current state instead."""


_UNREACHABLE = (aetcd.ClientError, OSError, asyncio.TimeoutError, rpc.AioRpcError)  # this member did not answer


@dataclass(frozen=True)
class Entry:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int  # 0: none


@dataclass(frozen=True)
class Event:
    put: bool  # False: a delete
    key: bytes
    value: bytes
    mod_revision: int


def _entry(kv) -> Entry:
    return Entry(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease)


class Etcd:
    def __init__(self, endpoints: str | list[str], *, timeout: float = 2.0) -> None:
        eps = [e.strip() for e in endpoints.split(",")] if isinstance(endpoints, str) else list(endpoints)
        self.endpoints = [e for e in eps if e]
        if not self.endpoints:
            raise ValueError("no etcd endpoint")
        self.timeout = timeout
        self._clients: list[aetcd.Client | None] = [None] * len(self.endpoints)
        self._locks = [asyncio.Lock() for _ in self.endpoints]
        self._closing: set[asyncio.Task] = set()
        self._cur = 0

    async def _client(self, i: int) -> aetcd.Client:
        async with self._locks[i]:
            c = self._clients[i]
            if c is None:
                u = urlsplit(self.endpoints[i] if "//" in self.endpoints[i] else "http://" + self.endpoints[i])
                c = aetcd.Client(host=u.hostname, port=u.port or 2379, timeout=self.timeout,
                                 connect_wait_timeout=max(1, int(self.timeout)), options=GRPC_OPTIONS)
                await self._bounded(c.connect(), self.timeout + 0.5)
                self._clients[i] = c
            return c

    async def _call(self, fn):
        """fn(client) on the current endpoint, then on each next one while etcd cannot be reached."""
        last: Exception | None = None
        start = self._cur
        for k in range(len(self.endpoints)):
            i = (start + k) % len(self.endpoints)
            try:
                out = await self._attempt(i, fn)
                self._cur = i
                return out
            except _UNREACHABLE as e:
                last = e
        raise EtcdUnavailable(f"no etcd endpoint of {self.endpoints} answered: {last!r}")

    async def _hedged(self, fn, hedge_s: float):
        """fn(client) on the current endpoint, then on the next one (round and round: a member that forwarded to a
        raft leader that hangs answers once it knows the new one) whenever `hedge_s` passed with no answer or an
        attempt failed, for at most one call timeout; the first answer, whose endpoint becomes the current one.
        For idempotent calls only."""
        n, start = len(self.endpoints), self._cur
        end = time.monotonic() + self.timeout + 0.5
        running: dict[asyncio.Task, int] = {}
        launched, last, next_at = 0, None, 0.0
        try:
            while True:
                now = time.monotonic()
                # a new attempt each hedge_s, and at once after a failure while some member was not tried yet (every
                # member refusing costs a few attempts a round, not a busy loop)
                if now < end and (now >= next_at or (not running and launched < n)):
                    i = (start + launched) % n
                    running[asyncio.ensure_future(self._attempt(i, fn))] = i
                    launched += 1
                    next_at = now + hedge_s
                wait = max(0.0, min(next_at, end) - now) if now < end else None
                if not running:
                    if wait is None:
                        raise EtcdUnavailable(f"no etcd endpoint of {self.endpoints} answered: {last!r}")
                    await asyncio.sleep(wait)
                    continue
                done, _ = await asyncio.wait(running, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    i = running.pop(t)
                    if t.exception() is None:
                        self._cur = i
                        return t.result()
                    if not isinstance(t.exception(), _UNREACHABLE):
                        raise t.exception()
                    last = t.exception()
        finally:
            for t in running:
                self._abandon(t)

    async def _attempt(self, i: int, fn):
        """fn(client of endpoint i), bounded; a client that failed to reach etcd is dropped."""
        c = None
        try:
            c = await self._client(i)
            return await self._bounded(fn(c), self.timeout + 0.5)
        except aetcd.RevisionCompactedError as e:
            raise Compacted(str(e)) from None
        except _UNREACHABLE as e:
            if "lease not found" in str(e):  # etcd's answer, not a member out of reach
                raise LeaseNotFound(str(e)) from None
            await self._drop(i, c)
            raise

    async def _drop(self, i: int, c: aetcd.Client | None) -> None:
        """Throw away the client that failed (a new one is made on next use: a gRPC channel that failed to connect
        backs off for up to minutes before it tries again, a member back from the dead would stay unused)."""
        if c is None or self._clients[i] is not c:
            return  # another caller replaced it already
        self._clients[i] = None
        if self._cur == i:
            self._cur = (i + 1) % len(self.endpoints)
        self._background(c.close())  # closing a channel to a dead member can hang: never on a caller's path

    async def _bounded(self, coro, timeout: float):
        """`await coro` for at most `timeout` s. Not asyncio.wait_for: it waits for the cancelled call to finish,
        and a gRPC call to a dead member (a connect, a watch cancel) may not, which held a NameNode's election loop
        for good in a test; a call that overruns is cancelled and left to finish in the background."""
        task = asyncio.ensure_future(coro)
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError:
            self._abandon(task)
            raise
        if not done:
            self._abandon(task)
            raise asyncio.TimeoutError()
        if task.cancelled():  # grpc.aio cancels the calls of a channel being closed (another caller dropped it)
            raise ConnectionError("etcd call cancelled: its channel was closed")
        return task.result()

    def _abandon(self, task: asyncio.Task) -> None:
        task.cancel()
        self._closing.add(task)
        task.add_done_callback(lambda t: (self._closing.discard(t), t.cancelled() or t.exception()))

    def _background(self, coro) -> None:
        """Run a clean-up call (closing a channel, cancelling a watch) off every caller's path, bounded in time."""
        async def run():
            try:
                await self._bounded(coro, 5.0)
            except BaseException:  # noqa: BLE001 -- what it cleans up is being thrown away
                pass
        task = asyncio.get_running_loop().create_task(run())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for i in range(len(self._clients)):
            await self._drop(i, self._clients[i])

    # ------------------------------------------------------------------ keys
    async def get(self, key: bytes) -> Entry | None:
        got, _ = await self.range(key, None)
        return got[0] if got else None

    async def range(self, start: bytes, end: bytes | None, *, limit: int = 0, keys_only: bool = False,
                    descending: bool = False) -> tuple[list[Entry], int]:
        """Keys in [start, end) (end None: the one key), at most `limit` (0: all); and the revision read at."""
        req = rpc.RangeRequest(key=start, range_end=end or b"", limit=limit, keys_only=keys_only,
                               sort_order=rpc.RangeRequest.DESCEND if descending else rpc.RangeRequest.NONE,
                               sort_target=rpc.RangeRequest.KEY)

        async def fn(c):
            r = await c.kvstub.Range(req, timeout=self.timeout, metadata=c.metadata)
            return [_entry(kv) for kv in r.kvs], r.header.revision
        return await self._call(fn)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> int:
        return await self._call(lambda c: self._put(c, key, value, lease))

    @staticmethod
    async def _put(c, key, value, lease):
        return (await c.put(key, value, lease=lease or None)).header.revision

    async def create(self, key: bytes, value: bytes, lease: int = 0) -> bool:
        """Put `key` only if it does not exist (an election)."""
        async def fn(c):
            tx = c.transactions
            ok, _ = await c.transaction(compare=[tx.create(key) == 0], success=[tx.put(key, value, lease=lease)],
                                        failure=[])
            return ok
        return await self._call(fn)

    async def put_guarded(self, guard: bytes, guard_rev: int, key: bytes, end: bytes, value: bytes) -> int:
        """Put `key` only while `guard` is the key created at revision `guard_rev` and no key in [key, end) exists
        (the leader's log append, `end` the log's prefix end); the revision that wrote it, 0 if the guards refused it.
        Not only `key` absent: a request can reach etcd long after it was sent (held in a member that hung, or in a
        socket, while the call timed out and was retried elsewhere), and by then its key may have been truncated
        away: a guard on the key alone let such a late append put an old log group back below newer ones, a hole
        no NameNode behind it could get past (test_ha_etcd_members' late-request test)."""
        async def fn(c):
            tx = c.transactions
            req = rpc.TxnRequest(compare=[(tx.create(guard) == guard_rev).build_message(),
                                          rpc.Compare(result=rpc.Compare.EQUAL, target=rpc.Compare.CREATE, key=key,
                                                      range_end=end, create_revision=0)],
                                 success=[rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value))])
            r = await c.kvstub.Txn(req, timeout=self.timeout, metadata=c.metadata)
            return r.header.revision if r.succeeded else 0
        return await self._call(fn)

    async def delete_range(self, start: bytes, end: bytes) -> int:
        async def fn(c):
            return (await c.delete_range(start, end)).header.revision
        return await self._call(fn)

    async def delete(self, key: bytes, create_revision: int) -> bool:
        """Delete `key` only if it is the key created at `create_revision` (a request that reaches etcd late must
        not delete a newer key of the same name: another NameNode's leadership, say)."""
        async def fn(c):
            tx = c.transactions
            ok, _ = await c.transaction(compare=[tx.create(key) == create_revision], success=[tx.delete(key)],
                                        failure=[])
            return ok
        return await self._call(fn)

    async def compact(self, revision: int) -> None:
        async def fn(c):
            try:
                await c.compact(revision)
            except aetcd.ClientError as e:
                if "compacted" not in str(e):  # compacted already (by another leader): the goal is met
                    raise
        await self._call(fn)

    # ------------------------------------------------------------------ leases
    async def grant(self, ttl: float) -> int:
        return await self._call(lambda c: self._grant(c, ttl))

    @staticmethod
    async def _grant(c, ttl):
        return (await c.lease(max(1, round(ttl)))).id

    async def keepalive(self, lease: int) -> int:
        """Refresh the lease; its remaining TTL (s), 0 if it expired already. Hedged (a quarter of the call timeout
        per member): a member that hangs (stopped, its disk stalled) held the refresh for the whole call timeout, and
        an active NameNode with a 2 s lease was deposed though the other two members had a quorum (seen once in
        test_ha_stale_reads, which stops a member: it was etcd's raft leader, where the NameNode's calls went)."""
        async def fn(c):
            return (await c.refresh_lease(lease)).TTL
        try:
            return await self._hedged(fn, self.timeout / 4)
        except LeaseNotFound:
            return 0

    async def revoke(self, lease: int) -> None:
        await self._call(lambda c: c.revoke_lease(lease))

    # ------------------------------------------------------------------ watch, status
    async def health(self) -> list[dict]:
        """Per endpoint: {"endpoint", "healthy", "leader", "db_size", "revision", "error"} (for ha_status), asked of
        every endpoint at once, each within `timeout`: a dead member costs one timeout, not one per member."""
        async def one(i: int, ep: str) -> dict:
            c = None
            try:
                c = await self._bounded(self._client(i), self.timeout)
                r = await self._bounded(c.maintenancestub.Status(rpc.StatusRequest(), timeout=self.timeout,
                                                                 metadata=c.metadata), self.timeout)
                return {"endpoint": ep, "healthy": True, "leader": r.leader == r.header.member_id,
                        "db_size": r.dbSize, "revision": r.header.revision, "error": ""}
            except Exception as e:  # noqa: BLE001 -- reported, not raised
                await self._drop(i, c)
                return {"endpoint": ep, "healthy": False, "leader": False, "db_size": 0, "revision": 0,
                        "error": repr(e)[:200]}
        return list(await asyncio.gather(*(one(i, ep) for i, ep in enumerate(self.endpoints))))

    async def prefer_leader(self) -> None:
        """Send the next calls to the member that leads etcd's raft: a follower forwards a write to the leader and
        answers only once the entry is committed and applied on itself too (one more hop, and CPU on two members)."""
        for i, h in enumerate(await self.health()):
            if h["leader"]:
                self._cur = i
                return

    async def watch(self, start: bytes, end: bytes, revision: int) -> "Watch":
        """A stream of the events on [start, end) from `revision` on (Watch.next); Compacted if etcd no longer has
        that revision, EtcdUnavailable when the stream cannot be set up or breaks. The caller reads the current
        state then and watches again."""
        i, c = self._cur, None
        try:
            c = await self._client(i)
            w = await self._bounded(c.watch(start, range_end=end, start_revision=revision), self.timeout + 0.5)
        except aetcd.RevisionCompactedError as e:
            raise Compacted(str(e)) from None
        except (aetcd.ClientError, rpc.AioRpcError, OSError, asyncio.TimeoutError) as e:
            await self._drop(i, c)
            raise EtcdUnavailable(f"watch: {e!r}") from None
        return Watch(self, w, i, c)


class Watch:
    """An etcd watch read by a task of its own into a queue: waiting for the next event is a plain queue wait that a
    timeout ends cleanly (cancelling aetcd's iterator, or its cancel call on a dead stream, may hang)."""

    def __init__(self, etcd: Etcd, w, i: int, c) -> None:
        self._etcd, self._w = etcd, w
        self._q: asyncio.Queue = asyncio.Queue()
        self._pump = asyncio.get_running_loop().create_task(self._run(i, c))

    async def _run(self, i: int, c) -> None:
        try:
            async for ev in self._w:
                self._q.put_nowait(Event(ev.kind == aetcd.EventKind.PUT, ev.kv.key, ev.kv.value, ev.kv.mod_revision))
            self._q.put_nowait(EtcdUnavailable("watch: the stream ended"))
        except aetcd.RevisionCompactedError as e:
            self._q.put_nowait(Compacted(str(e)))
        except (aetcd.ClientError, rpc.AioRpcError, OSError) as e:
            await self._etcd._drop(i, c)
            self._q.put_nowait(EtcdUnavailable(f"watch: {e!r}"))

    async def next(self, timeout: float) -> Event | None:
        """The next event; None after `timeout` s without one (a stream to a dead member may stay silent)."""
        try:
            item = await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            return None
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._etcd._abandon(self._pump)
        self._etcd._background(self._w.cancel())
