"""Typed clients of the epochfs services: one method per operation, mirroring the handlers one to one.

Every call between services goes through these (never a string op name): the gateway, the DataNodes, the mount, the
fsspec filesystem and the CLI. Each method builds the request message of common/messages.py, sends it over the frame
RPC of common/rpc.py and returns the typed reply (and, for block reads, the raw payload).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import msgspec

from . import errors
from . import messages as m
from .blocks import ZERO_MIN, crc32c, zero_size
from .config import parse_addr
from .localread import LocalReader
from .metrics import NN_LEADER_CHANGES, NN_REDIRECTS, NN_STALE_READS
from .rpc import RpcClient, TrioRpcClient

log = logging.getLogger("epochfs.clients")

# The fewest bytes a call reads through a DataNode's local socket (common/localread.py): fewer go over RPC. Measured
# with `python bench/s3_bench.py --target epochfs --phases "GET 128K,RANGE 1M,GET stream warm"` (EPOCHFS_LOCAL_READS
# 1 against 0, two pairs): 128 KiB objects, each read once after its PUT (from the disk: a worker thread each),
# 2,405-2,568 against 3,045-3,076 GETs/s, gateway 0.33-0.38 against 0.26-0.27 ms of CPU per GET; 1 MiB ranges 1.40-1.63
# against 1.73-1.87 ms of server CPU; a 1 GiB stream 540-860 against 870-1,190 ms.
LOCAL_MIN = 512 << 10


def _piece_views(lens: list[int], data) -> list[memoryview | None]:
    """The pieces of a read reply's payload by index (None for a failed one)."""
    view, pos, out = memoryview(data), 0, []
    for n in lens:
        out.append(view[pos:pos + n] if n >= 0 else None)
        pos += max(n, 0)
    if pos != len(view):
        raise errors.Unavailable(f"a read reply's pieces add up to {pos} bytes, its payload has {len(view)}")
    return out


def _failed_checks(head: m.Pieces, data, node) -> list[int]:
    """The pieces a DataNode sent unread (`head.unchecked`) whose chunks fail their CRC32C, by index."""
    if not head.unchecked:
        return []
    pieces, cs, bad = _piece_views(head.lens, data), head.chunk, []
    for i, crcs in sorted(head.unchecked.items()):
        piece = pieces[i] if 0 <= i < len(pieces) else None
        if piece is None or cs <= 0 or len(crcs) != -(-len(piece) // cs):
            raise errors.Unavailable(f"{node}: a read reply's checks don't fit its pieces")
        if any(crc32c(piece[k * cs:(k + 1) * cs]) != crc for k, crc in enumerate(crcs)):
            log.warning("%s: piece %d of a read failed its CRC32C check; asking the node to read it again", node, i)
            bad.append(i)
    return bad


def _zeros_as_sizes(heads: list[m.ReplicaHead], data) -> tuple[list[m.ReplicaHead], list]:
    """The blocks of a batch (`heads`, their bytes back to back in `data`: bytes-like, or a list of them) with each
    large block of zeros marked `zero` and left out of the payload; the payload as a list of views (not joined)."""
    if all(h.size < ZERO_MIN for h in heads):  # (a batch of small blocks: as it is)
        return heads, data
    bufs = [memoryview(b).cast("B") for b in (data if isinstance(data, list) else [data])]
    out_heads, payload, i, off = [], [], 0, 0
    for h in heads:
        views, need = [], h.size
        while need:
            if i >= len(bufs):
                raise errors.InvalidInput("the blocks' sizes add up to more than their bytes")
            take = bufs[i][off:off + need]
            views.append(take)
            need -= len(take)
            off += len(take)
            if off == len(bufs[i]):
                i, off = i + 1, 0
        if zero_size(views):
            out_heads.append(msgspec.structs.replace(h, zero=True))
        else:
            out_heads.append(h)
            payload.extend(views)
    return out_heads, payload


class DataNodeClient:
    """Block I/O with one DataNode (datanode/api.py), over an asyncio or a trio connection pool."""

    def __init__(self, rpc: RpcClient | TrioRpcClient, local: LocalReader | None = None) -> None:
        """`local`: reads go through the node's local socket while it can serve them (the node is on this
        machine: common/localread.py), else over `rpc`."""
        self.rpc = rpc
        self.local = local

    def __repr__(self) -> str:
        return f"DataNodeClient({self.rpc.host}:{self.rpc.port})"

    async def close(self) -> None:
        if self.local is not None:
            self.local.close()
        await self.rpc.close()

    async def read_local(self, reads: list[m.BlockRead], grant: m.ReadGrant | None = None, *,
                         timeout: float | None = None) -> list | None:
        """Each read's bytes, read from the node's files through its local socket and checked, or None when that
        can't serve them all (no local socket, a block not in a file, an error, a failed check): then read them
        over RPC, which also has bad copies repaired. Unavailable if the node does not answer in `timeout` (the
        RPC timeout by default)."""
        if self.local is None or not self.local.usable() or \
                sum(r.length if r.length >= 0 else LOCAL_MIN for r in reads) < LOCAL_MIN:
            return None
        got = await self.local.read(reads, grant, timeout=timeout or self.rpc.timeout)
        return None if got is None or any(x is None for x in got) else got

    async def put(self, block_id: int, crc: int, data, secondaries: Sequence[m.Secondary] = (), acks: int = 1, *,
                  timeout: float | None = None) -> None:
        """Store `data` (bytes-like, or a list of them sent without joining) as the block's primary; it replicates
        to `secondaries` and returns once `acks` copies, its own included, are on disk. A large block of zeros (a
        file's hole uploaded through the mount) is sent as its size alone."""
        zero = zero_size(data)
        await self.rpc.request(m.Put(block_id=block_id, crc=crc, secondaries=list(secondaries), acks=acks, zero=zero),
                               b"" if zero else data, timeout=timeout)

    async def put_replica(self, block_id: int, crc: int, data, *, fresh: bool = False) -> None:
        """Store a replica: from its primary (fresh, the write's own replication) or a repair copy (zeros as in
        put)."""
        zero = zero_size(data)
        await self.rpc.request(m.PutReplica(block_id=block_id, crc=crc, fresh=fresh, zero=zero), b"" if zero else data)

    async def put_replicas(self, heads: list[m.ReplicaHead], data, *, fresh: bool = False) -> dict[int, str]:
        """Store several copies, their bytes back to back in `data`: repair copies, or a primary's fresh ones (a
        put_many batch's replication, answered once on disk): the error class of each one (by index in `heads`)
        that was not stored. Large blocks of zeros are sent as their sizes."""
        heads, data = _zeros_as_sizes(heads, data)
        reply, _ = await self.rpc.request(m.PutReplicas(blocks=heads, fresh=fresh), data)
        return reply.errs

    async def put_many(self, blocks: list[m.NewBlock], data, addrs: dict[str, str], acks: int = 1, *,
                       timeout: float | None = None) -> dict[int, str]:
        """Store many blocks as their primary (their bytes back to back in `data`, a list sent without joining), in
        one write batch; it replicates them and answers once `acks` copies of each are on disk: the error class of
        each block (by index) that was not stored."""
        reply, _ = await self.rpc.request(m.PutMany(blocks=blocks, addrs=addrs, acks=acks), data, timeout=timeout)
        return reply.errs

    async def get(self, block_id: int, offset: int = 0, length: int = -1, *, timeout: float | None = None):
        """Bytes [offset, offset + length) of a block (length -1: to its end), checked against its CRCs."""
        got = await self.read_local([m.BlockRead(block_id, offset, length)], timeout=timeout)
        if got is not None:
            return got[0]
        req = m.Get(block_id=block_id, offset=offset, length=length)
        head, data = await self.rpc.request(req, timeout=timeout)
        if _failed_checks(head, data, self):
            # the node reads its copy and checks it itself: CorruptBlock if the copy is bad (the caller reads
            # another replica and has this one repaired), the bytes if they were damaged on their way
            _, data = await self.rpc.request(msgspec.structs.replace(req, check=True), timeout=timeout)
        return data

    async def get_many(self, reads: list[m.BlockRead], *, timeout: float | None = None) -> tuple[m.Pieces, bytes]:
        """Several pieces in one round trip: (their sizes and errors, the pieces back to back), checked."""
        got = await self.read_local(reads, timeout=timeout)
        if got is not None:
            return m.Pieces(lens=[len(x) for x in got]), b"".join(got)
        return await self._checked(m.GetMany(reads=reads), timeout)

    async def read_tokened(self, reads: list[m.BlockRead], grant: m.ReadGrant, *,
                           timeout: float | None = None) -> tuple[m.Pieces, bytes]:
        """get_many on a connection without the cluster secret, with a gateway's read token."""
        return await self._checked(m.ReadTokened(reads=reads, grant=grant), timeout)

    async def _checked(self, req: m.GetMany | m.ReadTokened, timeout: float | None) -> tuple[m.Pieces, bytes]:
        """A batch read whose pieces sent unread are checked here: those that fail are read again with `check`,
        the node reading and checking them itself (a bad copy then fails as a piece with CorruptBlock, which a
        tokened read also notes for the node's next heartbeat), and the reply is put together again."""
        head, data = await self.rpc.request(req, timeout=timeout)
        bad = _failed_checks(head, data, self)
        if not bad:
            return head, data
        again, more = await self.rpc.request(msgspec.structs.replace(req, reads=[req.reads[i] for i in bad],
                                                                       check=True), timeout=timeout)
        if len(again.lens) != len(bad):
            raise errors.Unavailable(f"{self}: a check read answered {len(again.lens)} pieces for {len(bad)}")
        redone = dict(zip(bad, range(len(bad))))
        old, new = _piece_views(head.lens, data), _piece_views(again.lens, more)
        lens, errs, out = [], {}, []
        for i, n in enumerate(head.lens):
            j = redone.get(i)
            n, piece, err = (n, old[i], head.errs.get(i)) if j is None else (again.lens[j], new[j], again.errs.get(j))
            lens.append(n)
            if err is not None:
                errs[i] = err
            if piece is not None:
                out.append(piece)
        return m.Pieces(lens=lens, errs=errs), b"".join(out)

    async def write_tokened(self, grant: m.WriteGrant, heads: list[m.ReplicaHead], data,
                            fast: bool = False, *, timeout: float | None = None) -> m.Receipts:
        """Store blocks as their primary on a connection without the cluster secret, with a gateway's write token
        (their bytes back to back in `data`, a list sent without joining): per block its receipt or error (`fast`:
        blocks of an object of several, receipted with XXH3-128s, not MD5s). Large blocks of zeros are sent as their
        sizes."""
        heads, data = _zeros_as_sizes(heads, data)
        reply, _ = await self.rpc.request(m.WriteTokened(grant=grant, blocks=heads, fast=fast), data, timeout=timeout)
        return reply

    async def delete(self, blocks: list[int]) -> None:
        await self.rpc.request(m.Delete(blocks=blocks))

    async def blocks(self) -> list[int]:
        """Every block id the node stores."""
        reply, _ = await self.rpc.request(m.Blocks())
        return reply.blocks

    async def has(self, blocks: list[int]) -> list[bool]:
        """Which of `blocks` the node stores."""
        reply, _ = await self.rpc.request(m.Has(blocks=blocks))
        return reply.has

    async def replicate_once(self) -> m.ReplicationPass:
        """One replication pass over every queued job, now."""
        reply, _ = await self.rpc.request(m.ReplicateOnce())
        return reply

    # (end of DataNodeClient)


# NameNodeClient's methods, grouped by subject as the NameNode's handler modules are (namenode/api/).

class StandbyClient:
    """The active NameNode's one call to a standby NameNode (HA, namenode/ha/etcd_journal.py): the log groups etcd
    committed, pushed in log order."""

    def __init__(self, rpc: RpcClient) -> None:
        self.rpc = rpc

    async def close(self) -> None:
        await self.rpc.close()

    async def log_push(self, groups: list[m.LogGroup], data) -> int:
        """Send the groups (`data`: their values, one after the other); the standby's applied position."""
        reply, _ = await self.rpc.request(m.LogPush(groups=groups), data)
        return reply.seq


class _NodeCalls:
    """Nodes, heartbeats and the orders that ride on them."""
    _call = None  # NameNodeClient._call

    async def register(self, req: m.Register) -> m.Registered:
        """Register a DataNode: its node id and the registering NameNode's fencing epoch."""
        return await self._call(req)

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

    async def bucket_create(self, bucket: str, *, owner: str = "", acl="private", location: str = "",
                            write_policy: str | None = None, ownership: str | None = None,
                            block_size: int | None = None, replication: int | None = None,
                            object_lock: bool = False) -> m.BucketRecord:
        return await self._call(m.BucketCreate(bucket=bucket, owner=owner, acl=acl, location=location,
                                                write_policy=write_policy, ownership=ownership,
                                                block_size=block_size, replication=replication,
                                                object_lock=object_lock))

    async def bucket_delete(self, bucket: str) -> None:
        await self._call(m.BucketDelete(bucket=bucket))

    async def bucket_info(self, bucket: str) -> m.BucketRecord:
        return await self._call(m.BucketInfo(bucket=bucket))

    async def bucket_list(self) -> list[m.BucketRecord]:
        return (await self._call(m.BucketList())).buckets

    async def bucket_settings(self, bucket: str, **settings) -> m.BucketRecord:
        """Change some of a bucket's settings (the fields of messages.BucketSettings; Unset() removes one)."""
        return await self._call(m.BucketSettings(bucket=bucket, **settings))

    async def bucket_tags(self, bucket: str, tags: dict[str, str] | None) -> m.BucketRecord:
        """Replace the bucket's tag set (None: delete it)."""
        return await self._call(m.BucketTags(bucket=bucket, tags=tags))

    async def bucket_lifecycle(self, bucket: str, rules: list[m.LifecycleRule] | m.Unset) -> m.BucketRecord:
        """Replace the bucket's lifecycle configuration (Unset(): delete it)."""
        return await self._call(m.BucketLifecycle(bucket=bucket, rules=rules))

    async def bucket_usage(self, bucket: str | None = None) -> dict[str, m.BucketUsed]:
        """{bucket: its bytes and objects} for `bucket`, or for every bucket."""
        return (await self._call(m.BucketUsage(bucket=bucket))).usage

    async def put_object(self, bucket: str, key: str, obj: m.ObjectRecord, blocks=(), *,
                         if_match: str | None = None, if_none_match: str | None = None) -> m.Committed:
        return await self._call(m.PutObject(bucket=bucket, key=key, obj=obj, blocks=tuple(blocks),
                                            if_match=if_match, if_none_match=if_none_match))

    async def put_objects(self, bucket: str, items: list[m.PutItem]) -> m.CommittedMany:
        """Commit many objects of one bucket in one command; each item's Committed or its own error (only blocks
        allocated and not committed yet are taken, as put_object's)."""
        return await self._call(m.PutObjects(bucket=bucket, items=items))

    async def stat(self, bucket: str, key: str, version_id: str | None = None,
                   range: tuple[int, int | None] | None = None) -> m.Located:
        return await self._call(m.Stat(bucket=bucket, key=key, version_id=version_id, range=range))

    async def delete_object(self, bucket: str, key: str, version_id: str | None = None, *,
                            if_match: str | None = None, if_mtime: int | None = None,
                            if_size: int | None = None, bypass: bool = False) -> m.Deleted:
        return await self._call(m.DeleteObject(bucket=bucket, key=key, version_id=version_id, if_match=if_match,
                                               if_mtime=if_mtime, if_size=if_size, bypass=bypass))

    async def bucket_logging(self, bucket: str, target: m.LoggingTarget | None) -> m.BucketRecord:
        """Set a bucket's server access logging target, or remove it (None)."""
        return await self._call(m.BucketLogging(bucket=bucket, target=target))

    async def bucket_object_lock(self, bucket: str, config: m.ObjectLockConfig) -> m.BucketRecord:
        return await self._call(m.BucketObjectLock(bucket=bucket, config=config))

    async def object_lock_set(self, bucket: str, key: str, version_id: str | None = None, *,
                              retention: bool = False, mode: str | None = None, until: int | None = None,
                              legal_hold: bool | None = None, bypass: bool = False) -> m.ObjectRecord:
        """Set a version's retention (retention=True; mode None removes it) and/or its legal hold."""
        return await self._call(m.ObjectLockSet(bucket=bucket, key=key, version_id=version_id,
                                                retention=retention, mode=mode, until=until,
                                                legal_hold=legal_hold, bypass=bypass))

    async def object_settings(self, bucket: str, key: str, *, acl=None, version_id: str | None = None) -> None:
        await self._call(m.ObjectSettings(bucket=bucket, key=key, acl=acl, version_id=version_id))

    async def object_tags(self, bucket: str, key: str, tags: dict[str, str],
                          version_id: str | None = None) -> m.TagsSet:
        """Replace the tags of the key's current version (or of `version_id`); {} deletes them."""
        return await self._call(m.ObjectTags(bucket=bucket, key=key, tags=tags, version_id=version_id))

    async def list_objects(self, bucket: str, prefix: str = "", delimiter: str = "", after: str = "",
                           max_keys: int = 1000) -> m.Listing:
        return await self._call(m.ListObjects(bucket=bucket, prefix=prefix, delimiter=delimiter, after=after,
                                              max_keys=max_keys))

    async def list_versions(self, bucket: str, prefix: str = "", delimiter: str = "", key_marker: str = "",
                            vid_marker: str = "", max_keys: int = 1000) -> m.VersionListing:
        return await self._call(m.ListVersions(bucket=bucket, prefix=prefix, delimiter=delimiter,
                                               key_marker=key_marker, vid_marker=vid_marker, max_keys=max_keys))

    # (end of buckets and objects)


class _MultipartCalls:
    """Multipart uploads."""
    _call = None

    async def mpu_create(self, bucket: str, key: str, attrs: m.UploadAttrs) -> str:
        """A new upload's id."""
        return (await self._call(m.MpuCreate(bucket=bucket, key=key, attrs=attrs))).upload_id

    async def mpu_get(self, bucket: str, key: str, upload_id: str) -> m.UploadRecord:
        return await self._call(m.MpuGet(bucket=bucket, key=key, upload_id=upload_id))

    async def mpu_put_part(self, bucket: str, key: str, upload_id: str, number: int, part: m.PartRecord,
                           blocks=()) -> None:
        await self._call(m.MpuPutPart(bucket=bucket, key=key, upload_id=upload_id, number=number, part=part,
                                      blocks=tuple(blocks)))

    async def mpu_list_parts(self, bucket: str, key: str, upload_id: str) -> m.Parts:
        return await self._call(m.MpuListParts(bucket=bucket, key=key, upload_id=upload_id))

    async def mpu_complete(self, bucket: str, key: str, upload_id: str, parts: list[m.PartChoice], *,
                           checksum: dict[str, str] | None = None, if_match: str | None = None,
                           if_none_match: str | None = None) -> m.Completed:
        return await self._call(m.MpuComplete(bucket=bucket, key=key, upload_id=upload_id, parts=parts,
                                              checksum=checksum or {}, if_match=if_match,
                                              if_none_match=if_none_match))

    async def mpu_abort(self, bucket: str, key: str, upload_id: str) -> None:
        await self._call(m.MpuAbort(bucket=bucket, key=key, upload_id=upload_id))

    async def mpu_list(self, bucket: str) -> list[m.UploadRecord]:
        return (await self._call(m.MpuList(bucket=bucket))).uploads

    # (end of multipart)


class _BlockCalls:
    """Block allocation, commits' bookkeeping and GC."""
    _call = None

    async def allocate(self, bucket: str, count: int = 1, seed: int = 0, index: int = 0) -> m.Allocation:
        """Blocks to write (retried while DataNodes are still registering)."""
        return await self._call(m.Allocate(bucket=bucket, count=count, seed=seed, index=index),
                                retry_not_enough=True)

    async def abandon(self, blocks: list[int]) -> None:
        await self._call(m.Abandon(blocks=blocks))

    async def report_short(self, blocks: list[tuple[int, int]]) -> None:
        await self._call(m.ReportShort(blocks=blocks))

    async def gc_once(self) -> m.GcPass:
        return await self._call(m.GcOnce())

    async def stats(self) -> m.BlockStats:
        return await self._call(m.Stats())

    async def pending(self) -> list[int]:
        return (await self._call(m.Pending())).blocks

    async def referenced(self) -> list[int]:
        return (await self._call(m.Referenced())).blocks

    # (end of blocks and GC)


class _PosixCalls:
    """The POSIX namespace, batch reads and manifests."""
    _call = None

    async def stat_many(self, items: list[tuple[str, str]], *, stale: m.StaleOk | None = None) -> m.ReadStats:
        """What reading each (bucket, key) needs, or why it can't be read, in one call. `stale`: a standby may answer
        (messages.StaleOk)."""
        return await self._call(m.StatMany(items=items, stale=stale))

    async def manifest(self, bucket: str, prefix: str = "", after: str = "", limit: int = 10_000, *,
                       stale: m.StaleOk | None = None) -> m.ManifestPage:
        """A page of the keys under `prefix` after `after`. `stale`: a standby may answer (messages.StaleOk)."""
        return await self._call(m.Manifest(bucket=bucket, prefix=prefix, after=after, limit=limit, stale=stale))

    # The namespace by inode: each takes its request as the mount sent it (the gateway has set its scope, `bi`).
    async def fs_lookup(self, req: m.FsLookup) -> m.InodeAttr:
        return await self._call(req)

    async def fs_getattr(self, req: m.FsGetattr) -> m.InodeAttr:
        return await self._call(req)

    async def fs_readdir(self, req: m.FsReaddir) -> m.DirPage:
        return await self._call(req)

    async def fs_dirs(self, req: m.FsDirs) -> m.DirsNames:
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

    async def fs_unlink(self, req: m.FsUnlink) -> m.Changed:
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

    async def fs_blocks(self, ino: int, bi: int, *, stale: m.StaleOk | None = None) -> m.FileBlocks:
        """File `ino`'s blocks (it must lie in the bucket of directory inode `bi`) and their holders' addresses.
        `stale`: a standby may answer (messages.StaleOk)."""
        return await self._call(m.FsBlocks(ino=ino, bi=bi, stale=stale))

    async def fs_reserve_inodes(self, req: m.FsReserveInodes) -> m.InodeRange:
        return await self._call(req)

    async def fs_create_files(self, req: m.FsCreateFiles) -> m.FilesCreated:
        """Many files with their content (stored on DataNodes already): each one's attributes or error."""
        return await self._call(req)

    async def fs_commit(self, req: m.FsCommit) -> m.FsCommitted:
        """New content of a file (its new blocks are durable on DataNodes); its new attributes and layout."""
        return await self._call(req)

    # (end of POSIX)


class _KeyJobCalls:
    """Access keys, jobs and operator calls."""
    _call = None

    async def key_create(self, access_key: str, secret_key: str, *, owner_id: str = "", name: str = "",
                         admin: bool = False, buckets: dict[str, str] | None = None) -> m.AccessKeyRecord:
        return await self._call(m.KeyCreate(access_key=access_key, secret_key=secret_key, owner_id=owner_id,
                                            name=name, admin=admin, buckets=buckets or {}))

    async def key_get(self, access_key: str) -> m.AccessKeyRecord:
        return await self._call(m.KeyGet(access_key=access_key))

    async def key_list(self) -> list[m.AccessKeyRecord]:
        return (await self._call(m.KeyList())).keys

    async def key_update(self, access_key: str, **fields) -> m.AccessKeyRecord:
        """Change some of name, owner_id, admin, disabled, buckets."""
        return await self._call(m.KeyUpdate(access_key=access_key, **fields))

    async def key_delete(self, access_key: str) -> None:
        await self._call(m.KeyDelete(access_key=access_key))

    async def kms_key_create(self, key_id: str, description: str = "") -> m.KmsKeyRecord:
        return await self._call(m.KmsKeyCreate(key_id=key_id, description=description))

    async def kms_key_list(self) -> list[m.KmsKeyRecord]:
        return (await self._call(m.KmsKeyList())).keys

    async def nodes(self) -> list[m.NodeInfo]:
        return (await self._call(m.Nodes())).nodes

    async def decommission(self, node: int) -> m.JobInfo:
        return await self._call(m.Decommission(node=node))

    async def jobs(self) -> list[m.JobInfo]:
        return (await self._call(m.Jobs())).jobs

    async def job_start(self, kind: str, node: int | None = None) -> m.JobInfo:
        return await self._call(m.JobStart(kind=kind, node=node))

    async def ha_status(self, addr: str | None = None) -> m.HaState:
        """Who is active and how far each NameNode applied the metadata log, as the NameNode at `addr` (default:
        the one this client talks to) sees it; a standby answers too. A NameNode that does not know the call (one
        without HA) is described as the embedded NameNode it is."""
        if addr is None:
            addr = self.address
        try:
            reply, _ = await self._pool(addr).request(m.HaStatus())
            return reply
        except errors.InvalidInput:  # "bad rpc request": its server has no such op
            return m.HaState(mode="embedded", name=addr, role="embedded", leader=addr,
                             members=[m.HaMember(name=addr, addr=addr, role="embedded")])

    async def log_position(self) -> int:
        """The active NameNode's log position: a stale read carrying it (StaleOk.min_seq) sees every write
        acknowledged before this call (the gateway's `msync` for its callers)."""
        return (await self._call(m.Msync())).seq

    async def msync(self) -> int:
        """The active NameNode's log position (HDFS's msync); from now on this client's stale reads are answered
        only by standbys that applied at least that far, so they see every write acknowledged before this call
        (read-your-writes)."""
        seq = await self.log_position()
        self.seen_seq = max(self.seen_seq, seq)
        return seq

    # (end of keys and jobs)


def parse_addrs(addrs: str) -> list[str]:
    """"h1:p1,h2:p2" -> ["h1:p1", "h2:p2"] (spaces and empty items dropped, duplicates kept once, order kept)."""
    out: list[str] = []
    for a in addrs.split(","):
        a = a.strip()
        if a and a not in out:
            out.append(a)
    if not out:
        raise ValueError(f"no NameNode address in {addrs!r}")
    return out


class NameNodeClient(_NodeCalls, _BucketObjectCalls, _MultipartCalls, _BlockCalls, _PosixCalls, _KeyJobCalls):
    """The NameNode's typed client, over one NameNode or several (HA: one active, the others standbys).

    It keeps the address of the one that answered last. A standby answers NotLeader with the active one's address
    (`details["leader"]`, "" while none is elected): the call goes there at once (an address not configured is
    added: the leader advertises itself). An address out of reach (or answering Unavailable) sends the call to the
    next. Once every address failed in a row the client waits (50 ms, doubling up to MAX_BACKOFF_S) and goes round
    again, until `retry_s` has passed since the call began; then the last error is raised (Unavailable or NotLeader:
    503 at the gateway). With retry_s 0 each address is tried once. A DomainError the NameNode raises is raised at once;
    NotEnoughReplicas is its answer too, retried only with `retry_not_enough`.

    `leader_changes` and `redirects` count moves to another address and NotLeader answers (Prometheus counters of
    common/metrics.py too). One connection pool per address.

    Stale reads (HA observer reads): a request whose `stale` field is set (messages.StaleOk: the manifest,
    stat_many, the mount's reads by inode) goes to a standby first, the standbys taken in turn; one that refuses
    (TooStale) is left alone for STALE_REFUSED_S (unless the read asked for a log position of its own caller's
    beyond this client's: a gateway's caller after its writes), one out of reach (or slower than STALE_TIMEOUT_S) for
    STALE_DOWN_S, and the read goes to the next standby, at most STALE_TRIES, then to the active NameNode as any
    call; so does a read a standby answers NotLeader (it needs the active one). After `msync()` such reads carry
    its log position (StaleOk.min_seq): read-your-writes."""

    MAX_ADDRS = 16  # addresses learnt from NotLeader answers are added up to this many
    # the longest wait between two rounds: a failover is seen at most this long after the new leader serves (a
    # round costs a NotLeader answer or a refused connection per address, next to nothing for a NameNode)
    MAX_BACKOFF_S = 0.25
    # with several NameNodes: a connection to one whose host stops answering (cut off, powered off: no RST comes)
    # fails within about this long (RpcClient liveness_s), so a call in flight moves on to the new leader instead of
    # waiting its own timeout (the gateway's 30 s); a slow NameNode's kernel still answers, so a long call is not cut
    LIVENESS_S = 1.5
    STALE_TIMEOUT_S = 1.0  # a stale read a standby has not answered by then goes to the active NameNode
    STALE_REFUSED_S = 1.0  # a standby that answered TooStale gets no stale read for this long
    STALE_DOWN_S = 5.0     # nor one out of reach (or too slow) for this long
    STALE_TRIES = 2        # standbys tried per stale read before the active NameNode
    WATCH_S = 1.0          # a call waiting this long has the other NameNodes asked which one is active (_watch)

    def __init__(self, rpc: RpcClient | Sequence[RpcClient], *, retry_s: float = 0.0, follow: bool = True) -> None:
        """`follow` False: the client stays with the addresses it was given (a NotLeader naming another one is raised,
        not followed): for asking one particular NameNode, as operators' tools and tests do."""
        self.follow = follow
        pools = [rpc] if isinstance(rpc, RpcClient) else list(rpc)
        if not pools:
            raise ValueError("NameNodeClient needs at least one address")
        if len(pools) > 1:  # HA: a call in flight to a NameNode cut off fails over in seconds, not its timeout
            for p in pools:
                p.liveness_s = p.liveness_s or self.LIVENESS_S
                p.connect_timeout = min(p.connect_timeout, self.LIVENESS_S)
        self._watcher: asyncio.Task | None = None
        self._down: dict[str, float] = {}  # address -> when a call to it last failed to get through (monotonic)
        self._pools: dict[str, RpcClient] = {f"{p.host}:{p.port}": p for p in pools}
        self.rpc = pools[0]  # the pool of the NameNode calls go to
        self.retry_s = retry_s
        self.leader_changes = 0
        self.redirects = 0
        self.seen_seq = 0  # the active NameNode's log position at this client's last msync
        self._stale_turn = 0
        self._stale_skip: dict[str, float] = {}  # standby address -> monotonic time it may get stale reads again
        self.stale_reads = 0  # stale reads answered by a standby / by the active one after all
        self.stale_fallbacks = 0

    @classmethod
    def connect(cls, addrs: str, secret: str, *, timeout: float = 30.0, retry_s: float = 0.0) -> "NameNodeClient":
        """A client of the NameNodes at `addrs` ("host:port", or several comma-separated)."""
        return cls([RpcClient(*parse_addr(a), secret, timeout=timeout) for a in parse_addrs(addrs)],
                   retry_s=retry_s)

    def __repr__(self) -> str:
        return f"NameNodeClient({','.join(self._pools)}; at {self.address})"

    @property
    def address(self) -> str:
        """The NameNode calls go to now, "host:port"."""
        return f"{self.rpc.host}:{self.rpc.port}"

    @property
    def addresses(self) -> list[str]:
        return list(self._pools)

    def _pool(self, addr: str) -> RpcClient:
        pool = self._pools.get(addr)
        if pool is None:
            if not self.follow:
                raise errors.Unavailable(f"not following the NameNode to {addr!r}")
            host, port = parse_addr(addr)
            if not port or len(self._pools) >= self.MAX_ADDRS:
                raise errors.Unavailable(f"cannot follow the NameNode to {addr!r}")
            first = next(iter(self._pools.values()))
            pool = self._pools[addr] = RpcClient(host, port, first.secret, timeout=first.timeout,
                                                 connect_timeout=min(first.connect_timeout, self.LIVENESS_S),
                                                 liveness_s=first.liveness_s or self.LIVENESS_S)
            pool.track_busy()
        return pool

    def _move(self, failed: RpcClient, leader: str = "") -> None:
        """A call to `failed` was refused or did not get through: send the next calls to `leader` (named by a
        standby), else to the address after `failed`'s -- unless a concurrent call moved on already."""
        if leader and self._down.get(leader, -1e9) > time.monotonic() - self.LIVENESS_S * 2:
            leader = ""  # a standby still names the leader this client just failed to reach (its etcd lease has not
            # run out yet): not back there, round the others until one is elected
        if leader and leader != f"{failed.host}:{failed.port}":
            try:
                pool = self._pool(leader)
            except errors.Unavailable:
                pool = None
            if pool is not None:
                self._set(pool)
                return
        if self.rpc is failed:
            pools = list(self._pools.values())
            start = pools.index(failed) + 1 if failed in pools else 0
            ring = [pools[(start + i) % len(pools)] for i in range(len(pools))]
            # the next address that has not just failed to get through (a host cut off costs a connect timeout)
            recent = time.monotonic() - self.LIVENESS_S * 2
            self._set(next((p for p in ring if self._down.get(f"{p.host}:{p.port}", -1e9) < recent), ring[0]))

    def move_on(self) -> None:
        """The NameNode this client talks to answered as a deposed leader would (a fencing epoch below one already
        seen): send the next calls to the next address."""
        self._move(self.rpc)

    def _set(self, pool: RpcClient) -> None:
        if pool is not self.rpc:
            log.info("NameNode calls go to %s:%s now (were going to %s)", pool.host, pool.port, self.address)
            self.rpc = pool
            self.leader_changes += 1
            NN_LEADER_CHANGES.inc()

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        for pool in self._pools.values():
            await pool.close()

    async def _watch(self) -> None:
        """HA: a NameNode whose process stopped or hangs (SIGSTOP, a VM paused, a long pause) answers nothing while
        its kernel keeps the connections open, so no liveness probe fails them: the calls waited their whole timeout
        (the gateway's 30 s) and the new ones went there too, for as long as it stayed stopped, though its etcd
        lease had run out and another NameNode was active within seconds (measured: S3 PUTs stalled 25 s with the
        active NameNode stopped 25 s). So while a call to the NameNode in use has waited WATCH_S, another NameNode
        is asked which one is active (`_active_elsewhere`); if another one is, the calls under way are given up
        (Unavailable: `_call` sends each again, as after a broken connection) and the next ones go there. A
        NameNode that is merely slow is still the active one: its calls wait."""
        while True:
            await asyncio.sleep(self.WATCH_S)
            rpc = self.rpc
            since = rpc.busy_since()
            if since is None or time.monotonic() - since < self.WATCH_S:
                continue
            try:
                active = await self._active_elsewhere(rpc)
                pool = self._pool(active) if active else None
            except errors.DomainError:
                continue
            if pool is None or pool is rpc:
                continue
            n = rpc.give_up_busy()
            log.warning("NameNode %s:%s has not answered for %.1f s and %s is active now: %d calls under way go there",
                        rpc.host, rpc.port, time.monotonic() - since, active, n)
            self._down[f"{rpc.host}:{rpc.port}"] = time.monotonic()
            self._set(pool)

    async def _active_elsewhere(self, rpc: RpcClient) -> str | None:
        """The address of the active NameNode if another than `rpc`'s, as the other NameNodes see it: one answers
        msync (it is active) or names the leader in its NotLeader. None if none knows of another."""
        mine = f"{rpc.host}:{rpc.port}"
        for addr, pool in list(self._pools.items()):
            if pool is rpc:
                continue
            try:
                await pool.request(m.Msync(), timeout=self.WATCH_S)
                return addr
            except errors.NotLeader as e:
                leader = str(e.details.get("leader") or "")
                if leader and leader != mine:
                    return leader
            except errors.DomainError:
                continue
        return None

    async def _stale_call(self, req: m.Request, timeout: float | None):
        """A stale read at a standby: its reply, or None if no standby answered it (see the class doc)."""
        if self.seen_seq > req.stale.min_seq:
            req = msgspec.structs.replace(req, stale=m.StaleOk(min_seq=self.seen_seq))
        pools = list(self._pools.values())
        for _ in range(min(self.STALE_TRIES, len(pools) - 1)):
            now = time.monotonic()
            ring = [pools[(self._stale_turn + i) % len(pools)] for i in range(len(pools))]
            rpc = next((p for p in ring if p is not self.rpc
                        and self._stale_skip.get(f"{p.host}:{p.port}", 0.0) <= now), None)
            if rpc is None:
                break
            self._stale_turn = (pools.index(rpc) + 1) % len(pools)
            addr = f"{rpc.host}:{rpc.port}"
            try:
                reply, _ = await rpc.request(req, timeout=min(timeout or rpc.timeout, self.STALE_TIMEOUT_S))
            except errors.TooStale:  # not sure to be fresh enough (or no longer a standby: deposed, rebuilding)
                if req.stale.min_seq <= self.seen_seq:  # (one caller's position, further on, says nothing of others')
                    self._stale_skip[addr] = time.monotonic() + self.STALE_REFUSED_S
                continue
            except errors.NotLeader:  # this read needs the active NameNode (it writes on the way, say)
                break
            except errors.Unavailable:
                self._stale_skip[addr] = time.monotonic() + self.STALE_DOWN_S
                continue
            self.stale_reads += 1
            NN_STALE_READS.labels("standby").inc()
            return reply
        self.stale_fallbacks += 1
        NN_STALE_READS.labels("active").inc()
        return None

    async def _call(self, req: m.Request, payload=b"", *, timeout: float | None = None,
                    retry_not_enough: bool = False):
        """Send `req` to the active NameNode (a stale read to a standby first); its typed reply (the reply payload is
        dropped: NameNode replies carry none)."""
        if len(self._pools) > 1 and getattr(req, "stale", None) is not None:
            reply = await self._stale_call(req, timeout)
            if reply is not None:
                return reply
        if len(self._pools) > 1 and (self._watcher is None or self._watcher.done()):
            # several NameNodes (given, or learnt from a NotLeader): watch for one that stops answering, on this
            # event loop (again after the loop it ran on ended: asyncio.run cancels it)
            for p in self._pools.values():
                p.track_busy()
            self._watcher = asyncio.get_running_loop().create_task(self._watch())
        deadline = time.monotonic() + self.retry_s
        delay = 0.05
        failed = 0  # addresses that failed in a row
        tried_again = False
        while True:
            rpc = self.rpc
            try:
                reply, _ = await rpc.request(req, payload, timeout=timeout)
                return reply
            except errors.NotLeader as e:
                self.redirects += 1
                NN_REDIRECTS.inc()
                failed += 1
                self._move(rpc, str(e.details.get("leader") or ""))
                err = e
            except errors.Unavailable as e:
                if isinstance(e, errors.NotEnoughReplicas):
                    if not retry_not_enough:
                        raise
                    failed = len(self._pools)  # the NameNode's answer: wait before asking again
                else:
                    if not tried_again and (self.retry_s > 0 or len(self._pools) > 1):
                        # once per call: the NameNode may have carried it out before the connection broke, and gets
                        # it again (a commit sent again answers as it did: NameNode's fresh commits)
                        log.warning("%s%s to %s failed (%s): sending it again", m.op_name(type(req)),
                                    f" of {req.key!r}" if isinstance(getattr(req, "key", None), str) else "",
                                    rpc.host + ":" + str(rpc.port), e)
                        tried_again = True
                    failed += 1
                    self._down[f"{rpc.host}:{rpc.port}"] = time.monotonic()
                    self._move(rpc)
                err = e
            if failed >= len(self._pools):
                if time.monotonic() + delay > deadline:
                    raise err
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.MAX_BACKOFF_S)
                failed = 0
