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
from dataclasses import dataclass
from typing import AsyncIterator
from urllib.parse import urlsplit

import aetcd
from aetcd import rpc

log = logging.getLogger("epochfs.namenode.etcd")


class EtcdUnavailable(Exception):
    """No etcd endpoint answered (or the cluster has no quorum)."""


class Compacted(Exception):
    """A watch or read asked for revisions etcd compacted away: read the current state instead."""


@dataclass(frozen=True)
class Entry:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int


@dataclass(frozen=True)
class Event:
    put: bool  # False: a delete
    key: bytes
    value: bytes
    mod_revision: int


def _entry(kv) -> Entry:
    return Entry(kv.key, kv.value, kv.create_revision, kv.mod_revision)


class Etcd:
    def __init__(self, endpoints: str | list[str], *, timeout: float = 2.0) -> None:
        eps = [e.strip() for e in endpoints.split(",")] if isinstance(endpoints, str) else list(endpoints)
        self.endpoints = [e for e in eps if e]
        if not self.endpoints:
            raise ValueError("no etcd endpoint")
        self.timeout = timeout
        self._clients: list[aetcd.Client | None] = [None] * len(self.endpoints)
        self._cur = 0

    async def _client(self, i: int) -> aetcd.Client:
        c = self._clients[i]
        if c is None:
            u = urlsplit(self.endpoints[i] if "//" in self.endpoints[i] else "http://" + self.endpoints[i])
            c = aetcd.Client(host=u.hostname, port=u.port or 2379, timeout=self.timeout,
                             connect_wait_timeout=max(1, int(self.timeout)))
            await c.connect()
            self._clients[i] = c
        return c

    async def _call(self, fn):
        """fn(client) on the current endpoint, then on each next one while etcd cannot be reached."""
        last: Exception | None = None
        for k in range(len(self.endpoints)):
            i = (self._cur + k) % len(self.endpoints)
            try:
                out = await asyncio.wait_for(fn(await self._client(i)), self.timeout + 0.5)
                self._cur = i
                return out
            except aetcd.RevisionCompactedError as e:
                raise Compacted(str(e)) from None
            except (aetcd.ClientError, OSError, asyncio.TimeoutError, rpc.AioRpcError) as e:
                last = e
                await self._drop(i)
        raise EtcdUnavailable(f"no etcd endpoint of {self.endpoints} answered: {last!r}")

    async def _drop(self, i: int) -> None:
        c, self._clients[i] = self._clients[i], None
        if c is not None:
            try:
                await c.close()
            except Exception:  # noqa: BLE001 -- the channel is being thrown away
                pass

    async def close(self) -> None:
        for i in range(len(self._clients)):
            await self._drop(i)

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

    async def put_guarded(self, guard: bytes, guard_rev: int, key: bytes, value: bytes) -> bool:
        """Put new `key` only while `guard` is the key created at revision `guard_rev` (the leader's log append)."""
        async def fn(c):
            tx = c.transactions
            ok, _ = await c.transaction(compare=[tx.create(guard) == guard_rev, tx.create(key) == 0],
                                        success=[tx.put(key, value)], failure=[])
            return ok
        return await self._call(fn)

    async def delete_range(self, start: bytes, end: bytes) -> int:
        async def fn(c):
            return (await c.delete_range(start, end)).header.revision
        return await self._call(fn)

    async def delete(self, key: bytes) -> None:
        await self._call(lambda c: c.delete(key))

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
        """Refresh the lease; its remaining TTL (s), 0 if it expired already."""
        async def fn(c):
            return (await c.refresh_lease(lease)).TTL
        return await self._call(fn)

    async def revoke(self, lease: int) -> None:
        await self._call(lambda c: c.revoke_lease(lease))

    # ------------------------------------------------------------------ watch, status
    async def watch(self, start: bytes, end: bytes, revision: int) -> AsyncIterator[Event]:
        """Events on [start, end) from `revision` on; Compacted if etcd no longer has it, EtcdUnavailable when the
        stream breaks. The caller reads the current state then and watches again."""
        c = await self._client(self._cur)
        try:
            w = await c.watch(start, range_end=end, start_revision=revision)
        except aetcd.RevisionCompactedError as e:
            raise Compacted(str(e)) from None
        except (aetcd.ClientError, rpc.AioRpcError) as e:
            await self._drop(self._cur)
            self._cur = (self._cur + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"watch: {e!r}") from None
        try:
            async for ev in w:
                yield Event(ev.kind == aetcd.EventKind.PUT, ev.kv.key, ev.kv.value, ev.kv.mod_revision)
        except aetcd.RevisionCompactedError as e:
            raise Compacted(str(e)) from None
        except (aetcd.ClientError, rpc.AioRpcError) as e:
            await self._drop(self._cur)
            self._cur = (self._cur + 1) % len(self.endpoints)
            raise EtcdUnavailable(f"watch: {e!r}") from None
        finally:
            try:
                await asyncio.wait_for(w.cancel(), 1.0)
            except Exception:  # noqa: BLE001 -- the stream is gone already
                pass

    async def health(self) -> list[dict]:
        """Per endpoint: {"endpoint", "healthy", "leader", "db_size", "revision", "error"} (for ha_status)."""
        out = []
        for i, ep in enumerate(self.endpoints):
            try:
                c = await self._client(i)
                r = await asyncio.wait_for(c.maintenancestub.Status(rpc.StatusRequest(), timeout=self.timeout,
                                                                    metadata=c.metadata), self.timeout + 0.5)
                out.append({"endpoint": ep, "healthy": True, "leader": r.leader == r.header.member_id,
                            "db_size": r.dbSize, "revision": r.header.revision, "error": ""})
            except Exception as e:  # noqa: BLE001 -- reported, not raised
                await self._drop(i)
                out.append({"endpoint": ep, "healthy": False, "leader": False, "db_size": 0, "revision": 0,
                            "error": repr(e)[:200]})
        return out
