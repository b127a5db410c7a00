"""Typed clients of the epochfs services: one method per operation, mirroring the handlers one to one.

Every call between services goes through these (never a string op name): the gateway, the DataNodes, the mount, the
fsspec filesystem and the CLI. Each method builds the request message of common/messages.py, sends it over the frame
RPC of common/rpc.py and returns the typed reply (and, for block reads, the raw payload).
"""
from __future__ import annotations

import asyncio
import time

from . import errors
from . import messages as m
from .rpc import RpcClient, TrioRpcClient


class DataNodeClient:
    """Block I/O with one DataNode (datanode/api.py), over an asyncio or a trio connection pool."""

    def __init__(self, rpc: RpcClient | TrioRpcClient) -> None:
        self.rpc = rpc

    def __repr__(self) -> str:
        return f"DataNodeClient({self.rpc.host}:{self.rpc.port})"

    async def close(self) -> None:
        await self.rpc.close()

    async def has(self, blocks: list[int]) -> list[bool]:
        """Which of `blocks` the node stores."""
        reply, _ = await self.rpc.request(m.Has(blocks=blocks))
        return reply.has

    # (end of DataNodeClient)


# NameNodeClient's methods, grouped by subject as the NameNode's handler modules are (namenode/api/).

class _NodeCalls:
    """Nodes, heartbeats and the orders that ride on them."""
    _call = None  # NameNodeClient._call

    async def register(self, req: m.Register) -> int:
        """Register a DataNode; its node id."""
        return (await self._call(req)).node_id

    async def heartbeat(self, req: m.Heartbeat) -> m.HeartbeatOrders:
        """A DataNode's heartbeat; the orders riding on the reply."""
        return await self._call(req)

    async def report_bad_replica(self, block_id: int, node: int, good: int | None = None) -> bool:
        """The copy of `block_id` on `node` is corrupt or missing (`good`: a holder read successfully); whether a
        repair was ordered."""
        return (await self._call(m.ReportBadReplica(block_id=block_id, node=node, good=good))).queued

    # (end of nodes)


class _BucketObjectCalls:
    """Buckets, objects, versions, listing."""
    _call = None

    # (end of buckets and objects)


class _MultipartCalls:
    """Multipart uploads."""
    _call = None

    # (end of multipart)


class _BlockCalls:
    """Block allocation, commits' bookkeeping and GC."""
    _call = None

    # (end of blocks and GC)


class _PosixCalls:
    """The POSIX namespace, batch reads and manifests."""
    _call = None

    async def stat_many(self, items: list[tuple[str, str]]) -> m.ReadStats:
        """What reading each (bucket, key) needs, or why it can't be read, in one call."""
        return await self._call(m.StatMany(items=items))

    async def manifest(self, bucket: str, prefix: str = "", after: str = "", limit: int = 10_000) -> m.ManifestPage:
        """A page of the keys under `prefix` after `after`."""
        return await self._call(m.Manifest(bucket=bucket, prefix=prefix, after=after, limit=limit))

    # The namespace by inode: each takes its request as the mount sent it (the gateway has set its scope, `bi`).
    async def fs_lookup(self, req: m.FsLookup) -> m.InodeAttr:
        return await self._call(req)

    async def fs_getattr(self, req: m.FsGetattr) -> m.InodeAttr:
        return await self._call(req)

    async def fs_readdir(self, req: m.FsReaddir) -> m.DirPage:
        return await self._call(req)

    async def fs_readlink(self, req: m.FsReadlink) -> m.LinkTarget:
        return await self._call(req)

    async def fs_layout(self, req: m.FsLayout) -> m.FileLayout:
        return await self._call(req)

    async def fs_mkdir(self, req: m.FsMkdir) -> m.InodeAttr:
        return await self._call(req)

    async def fs_mknod(self, req: m.FsMknod) -> m.InodeAttr:
        return await self._call(req)

    async def fs_symlink(self, req: m.FsSymlink) -> m.InodeAttr:
        return await self._call(req)

    async def fs_link(self, req: m.FsLink) -> m.InodeAttr:
        return await self._call(req)

    async def fs_unlink(self, req: m.FsUnlink) -> m.Done:
        return await self._call(req)

    async def fs_rmdir(self, req: m.FsRmdir) -> m.Done:
        return await self._call(req)

    async def fs_rename(self, req: m.FsRename) -> m.Done:
        return await self._call(req)

    async def fs_setattr(self, req: m.FsSetattr) -> m.InodeAttr:
        return await self._call(req)

    async def fs_getxattr(self, req: m.FsGetxattr) -> m.XattrValue:
        return await self._call(req)

    async def fs_listxattr(self, req: m.FsListxattr) -> m.XattrNames:
        return await self._call(req)

    async def fs_setxattr(self, req: m.FsSetxattr) -> m.Done:
        return await self._call(req)

    async def fs_removexattr(self, req: m.FsRemovexattr) -> m.Done:
        return await self._call(req)

    async def fs_statfs(self) -> m.FsUsage:
        return await self._call(m.FsStatfs())

    async def fs_blocks(self, ino: int, bi: int) -> m.FileBlocks:
        """File `ino`'s blocks (it must lie in the bucket of directory inode `bi`) and their holders' addresses."""
        return await self._call(m.FsBlocks(ino=ino, bi=bi))

    async def fs_commit(self, req: m.FsCommit) -> m.Committed:
        """New content of a file (its new blocks are durable on DataNodes); its new attributes and layout."""
        return await self._call(req)

    # (end of POSIX)


class _KeyJobCalls:
    """Access keys, jobs and operator calls."""
    _call = None

    # (end of keys and jobs)


class NameNodeClient(_NodeCalls, _BucketObjectCalls, _MultipartCalls, _BlockCalls, _PosixCalls, _KeyJobCalls):
    """The NameNode's typed client. While the NameNode is unreachable (a restart), a call is retried for `retry_s`
    before Unavailable is raised (0: no retry); a DomainError the NameNode raises is raised at once."""

    def __init__(self, rpc: RpcClient, *, retry_s: float = 0.0) -> None:
        self.rpc = rpc
        self.retry_s = retry_s

    def __repr__(self) -> str:
        return f"NameNodeClient({self.rpc.host}:{self.rpc.port})"

    async def close(self) -> None:
        await self.rpc.close()

    async def _call(self, req: m.Request, payload=b"", *, timeout: float | None = None,
                    retry_not_enough: bool = False):
        """Send `req`; its typed reply (the reply payload is dropped: NameNode replies carry none). NotEnoughReplicas
        is the NameNode's answer, not a NameNode out of reach: retried only with `retry_not_enough` (an allocation
        while DataNodes are still registering)."""
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        while True:
            try:
                reply, _ = await self.rpc.request(req, payload, timeout=timeout)
                return reply
            except errors.Unavailable as e:
                if isinstance(e, errors.NotEnoughReplicas) and not retry_not_enough or \
                        time.monotonic() + delay > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
