"""The mount's write path: the local copy of each file being written (Writer) and its commit (Writes).

Writes go to a local copy of the file (random writes and truncates included) that flush/fsync/close upload and
commit, sending only the blocks that changed, so once close() returns the new content is durable and visible through
S3. Consistency is close-to-open.

A new file (or one truncated to nothing) written front to back is streamed while it grows: once it holds
STREAM_AFTER bytes, one upload starts that sends each UPLOAD_PIECE as soon as it is written (the rest of the file is
collected in memory, in a front (front.py), whose slabs go to the local copy past the page cache and to the upload
as they are; bounded: the writes wait for the upload), so flush/fsync/close send only the tail and wait for the
commit. The upload is one request whose commit comes at its end, so nothing of the file is visible before then. At
most MAX_STREAMS files are streamed at once (each holds a connection until its file closes); another starts at its
next write after one ends, or goes up at close. A write into what was sent already, a truncate, or a utimens while
the stream goes through the gateway (whose commit's layout went first) cancels it (the gateway abandons its blocks)
and the usual upload takes over; a stream to the DataNodes takes a utimens, chmod or chown (`cp -p`, `tar x`) into
its commit.
"""
from __future__ import annotations

import bisect
import collections
import contextlib
import errno
import itertools
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

import msgspec
import trio

from epochfs.common import defaults, errors
from epochfs.common.client import S3Client
from epochfs.common.directwrite import (DIRECT_RETRY_S, ROUND_MAX, ROUNDS_IN_FLIGHT, WINDOW, DirectUnavailable,
                                        DirectWriter, of_several)
from epochfs.common.messages import (AttrChanges, BlockSpan, FileWrite, FileWriteDirect, KeepBlock, NewExtent,
                                     NewFile, RestOfBody, ZeroExtent)

from .cache import BlockCache
from .front import Front, Slabs, open_direct
from .inodes import InodeTable
from .options import MountOptions

log = logging.getLogger("epochfs.mount")

UPLOAD_PIECE = 4 << 20
# new bytes up to this size go in one request body, not streamed: common/http1.py's lean transport takes it (a tar of
# 1,000 files of 1-16 KiB into the mount: its busy samples (py-spy) 485 -> 374, the commits' 94 -> 47)
SMALL_UPLOAD = 1 << 20
STREAM_AFTER = 8 << 20  # bytes a new file holds before it is streamed (smaller files go up in one piece at close)
MAX_STREAMS = 8  # at most this many at once: each holds one of the client's connections (32) until its file closes
MAX_FILE_SIZE = defaults.MAX_OBJECT_SIZE  # S3's largest object
MAX_BATCH = 256          # write-back: files created in one request
BATCH_BYTES = 16 << 20   # and their bytes (the gateway takes 32 MiB)
CREATORS = 2             # batches in flight
INO_RESERVE = 1024       # inode numbers reserved at once
QUEUE_BYTES = 256 << 20  # write-back: bytes of closed files waiting for their create, at most
CREATE_RETRY_S = (0.2, 0.5, 1.0, 2.0, 4.0)  # write-back: a batch create left unanswered is sent again after these
# what a writer knows of a block of the version it started from
KEPT, CLEAN, DIRTY, GONE = range(4)  # only on DataNodes; also in the local copy, unchanged; changed; cut off


def _replaced(ino: int) -> errors.DomainError:
    """A writer's changes can't be saved: the version it started from was replaced (an S3 PUT) since. EIO, and
    logged, rather than a whole upload over the other writer's content: that would lose its update silently, and
    merging ours onto it could mix two files."""
    log.error("inode %s: changes not saved: the file was replaced since this mount began writing it", ino)
    return errors.PreconditionFailed(f"inode {ino} was replaced while being written")  # EIO (errmap)



class Writer:
    """The local copy of a file being written; every handle of the file shares it until the last one closes.

    It holds only what was written or read through it. The blocks of the version it started from (`base`, by ETag)
    stay on the DataNodes until a write covers part of one (then that block is fetched: read-modify-write of one
    block) or a read needs it; the local file has the file's size and is sparse where nothing was fetched. A commit
    keeps the untouched blocks by id and sends only the extents in between (gateway/s3/posix.py fs_write), so an
    fsync after a small write into a large file stores one block, not the file, and opening a file to append to it
    downloads nothing."""

    def __init__(self, tmpdir: Path | None, layout: dict, memory: bool = False) -> None:
        # a file made in write-back mode starts in memory (a memfd: cheaper to make and drop than a temporary
        # file), and moves to one once it outgrows STREAM_AFTER (spill); a memfd is kept as a bare descriptor (a
        # file object around it cost as much as making it)
        self.file = tempfile.TemporaryFile(dir=tmpdir) if not memory else None
        self.fd = self.file.fileno() if self.file is not None else os.memfd_create("epochfs-new")
        self.memory = memory
        self.size = layout["size"]
        if self.size:
            os.ftruncate(self.fd, self.size)
        self.dirty = False
        self.refs = 0
        self.mtime_ns = 0
        self.mtime_set = False  # mtime_ns was set explicitly (utimens) after the last write: the commit keeps it
        self.lock = trio.Lock()
        self.stream: Stream | None = None
        self.front: Front | None = None  # the end of a streamed file, in memory (front.py)
        self.attr: dict | None = None  # the attributes of its last committed version, if known (created here)
        self.attr_at = -1e9            # when (monotonic) the NameNode gave them: they answer getattr for attr_timeout
        self.pending: dict = {}        # chmod/chown/atime set while changes are unsaved, sent with their commit
        self.new: tuple[int, str] | None = None  # write-back: (directory, name) of a file not yet on the NameNode
        self.queued = False            # write-back: in the queue of files to create
        self.bare = False              # write-back: to be created empty (a large file, then streamed as usual)
        self.made_at = 0               # write-back: when it was made (its directory's mtime)
        self.made: trio.Event | None = None  # write-back: set once the NameNode has it (or its create failed)
        self.error: errors.DomainError | None = None  # write-back: why its create failed
        self._rebase(layout["etag"], layout["blk"], {}, KEPT, layout.get("bs", UPLOAD_PIECE))

    def known(self, attr: dict) -> None:
        """The NameNode gave these attributes just now."""
        self.attr, self.attr_at = attr, time.monotonic()

    def spill(self, tmpdir: Path | None) -> None:
        """Move the local copy from memory to a temporary file."""
        f = tempfile.TemporaryFile(dir=tmpdir)
        os.ftruncate(f.fileno(), self.size)
        for pos in range(0, self.size, UPLOAD_PIECE):  # (copy_file_range can't cross file systems on older kernels)
            os.pwrite(f.fileno(), os.pread(self.fd, min(UPLOAD_PIECE, self.size - pos), pos), pos)
        self.close()
        self.file, self.fd, self.memory = f, f.fileno(), False

    def pread(self, off: int, n: int) -> bytes:
        """Bytes [off, off + n) of the local copy (or as many as it holds)."""
        if self.front is not None:
            return self.front.read(off, min(n, max(self.size - off, 0)))[0]
        return os.pread(self.fd, n, off)

    def take(self, off: int, n: int) -> tuple[bytes | memoryview, tuple[Front, object] | None]:
        """Bytes [off, off + n) for the upload: a sealed slab of the front comes as it is, with (front, slab) to
        give back once sent (front.py)."""
        if self.front is None:
            return os.pread(self.fd, n, off), None
        data, slab = self.front.read(off, n, own=True)
        return data, None if slab is None else (self.front, slab)

    def unfront(self, keep: bool = True) -> None:
        """End the front (front.py): the local copy holds every byte again (`keep`)."""
        if self.front is not None:
            f, self.front = self.front, None
            f.end(keep)

    def close(self) -> None:
        """Drop the local copy."""
        self.unfront(keep=False)
        if self.file is not None:
            self.file.close()
        elif self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __del__(self) -> None:
        if self.file is None and getattr(self, "fd", -1) >= 0:
            os.close(self.fd)

    def _rebase(self, etag: str, blk: list, known: dict[int, int], new: int, bs: int) -> None:
        """Start from version `etag` made of `blk` (the layout's [id, size] spans, in order)."""
        spans = msgspec.convert(blk, list[BlockSpan]) if blk else []
        self.base, self.bs = etag, bs
        self.ids = [s.id for s in spans]
        # block i is bytes [starts[i], starts[i+1]) of the file
        self.starts = list(itertools.accumulate((s.size for s in spans), initial=0))
        self.state = [known.get(s.id, new) for s in spans]

    def _over(self, off: int, end: int) -> range:
        """The base blocks holding bytes of [off, end)."""
        return range(max(bisect.bisect_right(self.starts, off) - 1, 0),
                     min(bisect.bisect_left(self.starts, end), len(self.ids)))

    def absent(self, off: int, end: int) -> list[int]:
        """The blocks a read of [off, end) through the local copy needs fetched first."""
        return [i for i in self._over(off, end) if self.state[i] == KEPT]

    def _tail(self, end: int) -> list[int]:
        """The short block ending at EOF that growing the file to `end` rewrites together with the new bytes.
        Kept as it is, every append cycle (open, write, close) would leave one more short block behind."""
        if end <= self.size or not self.size:
            return []
        i = bisect.bisect_right(self.starts, self.size - 1) - 1
        if i < len(self.ids) and self.state[i] in (KEPT, CLEAN) and self.starts[i + 1] == self.size \
                and self.starts[i + 1] - self.starts[i] < self.bs:
            return [i]
        return []

    def partly(self, off: int, end: int) -> list[int]:
        """The blocks a write of [off, end) changes only in part, so needs fetched first."""
        return sorted({*(i for i in self.absent(off, end) if self.starts[i] < off or self.starts[i + 1] > end),
                       *(i for i in self._tail(end) if self.state[i] == KEPT)})

    def touched(self) -> None:
        """The content changed just now (a write, a truncate): the file's mtime is now again."""
        self.dirty, self.mtime_ns, self.mtime_set = True, time.time_ns(), False

    def set_mtime(self, mtime_ns: int) -> None:
        """utimens while changes are unsaved: the commit of those changes takes this time, not its own."""
        if self.dirty:
            self.mtime_ns, self.mtime_set = mtime_ns, True

    def wrote(self, off: int, end: int) -> None:
        for i in [*self._over(off, end), *self._tail(end)]:
            if self.state[i] != GONE:
                self.state[i] = DIRTY
        self.size = max(self.size, end)

    def cut(self, size: int) -> list[int]:
        """The block a truncate to `size` cuts in two (or the short last block it extends), if it needs fetched
        first."""
        return sorted({*(i for i in self.absent(size, size + 1) if self.starts[i] < size),
                       *(i for i in self._tail(size) if self.state[i] == KEPT)})

    def truncate(self, size: int) -> None:
        for i in self._tail(size):
            self.state[i] = DIRTY
        for i in self._over(size, max(self.size, size + 1)):
            self.state[i] = GONE if self.starts[i] >= size else DIRTY
        self.size = size

    def layout(self) -> tuple[FileWrite, list[tuple[int, int]]]:
        """The commit's layout (blocks kept by id, new extents by length, the local copy's holes as extents of
        zeros) and the new extents as (offset, length)."""
        segs: list[KeepBlock | NewExtent | ZeroExtent] = []
        extents, pos = [], 0

        def new(start: int, end: int) -> None:
            at = start
            for z, n in self._zero_runs(start, end):
                if z > at:
                    segs.append(NewExtent(length=z - at))
                    extents.append((at, z - at))
                segs.append(ZeroExtent(length=n))
                at = z + n
            if end > at:
                segs.append(NewExtent(length=end - at))
                extents.append((at, end - at))

        for i, bid in enumerate(self.ids):
            if self.state[i] in (KEPT, CLEAN):
                if self.starts[i] > pos:
                    new(pos, self.starts[i])
                segs.append(KeepBlock(id=bid))
                pos = self.starts[i + 1]
        if self.size > pos:
            new(pos, self.size)
        return FileWrite(base=self.base, size=self.size, segs=segs, mt=self.mtime_ns if self.mtime_set else None,
                         held=AttrChanges(**self.pending) if self.pending else None), extents

    def _zero_runs(self, start: int, end: int) -> list[tuple[int, int]]:
        """The holes of the local copy in new extent [start, end) as (offset, length), cut to whole blocks counted
        from `start` (the gateway cuts an extent into blocks from its start, so the blocks stay those of a layout
        without them): a file grown by a truncate or written past its end sends its hole as its size, not as
        zeros. Inside new extents a hole is zeros: the blocks of the base a write changes in part are fetched into
        the local copy first (`partly`, `cut`). None while a front holds bytes the local copy has not yet."""
        bs, out, pos = self.bs, [], start
        if self.front is not None or end - start < bs:
            return out
        while pos < end:
            try:
                data = min(os.lseek(self.fd, pos, os.SEEK_DATA), end)
            except OSError as e:  # ENXIO: no data from pos on; anything else: no holes known (all sent)
                if e.errno != errno.ENXIO:
                    return []
                data = end
            z0, z1 = start + -(-(pos - start) // bs) * bs, start + (data - start) // bs * bs
            if z1 > z0:
                out.append((z0, z1 - z0))
            if data >= end:
                break
            pos = os.lseek(self.fd, data, os.SEEK_HOLE)
        return out

    def fresh(self) -> bool:
        """All of the content is new (the version it started from is empty): it can be streamed as it grows."""
        return not self.ids and self.size >= STREAM_AFTER and not self.mtime_set

    def committed(self, etag: str, blk: list, bs: int) -> None:
        """The content is now version `etag` made of `blk`: kept blocks stay as they were, new ones are local."""
        self._rebase(etag, blk, {bid: st for bid, st in zip(self.ids, self.state) if st in (KEPT, CLEAN)}, CLEAN,
                     bs)
        self.dirty = self.mtime_set = False



class Stream:
    """A writer's upload under way: the pieces below `sent` are sent; `more` wakes the sender."""

    def __init__(self) -> None:
        self.sent = 0
        self.closing = False
        self.more = trio.Event()
        self.ended = trio.Event()
        self.scope = trio.CancelScope()
        self.result: dict | None = None
        self.error: BaseException | None = None
        self._asked = self._dropped = 0  # behind(): below these the local copy's pages were asked to go once, twice
        self.gave = trio.Event()  # set (and renewed) when it took or gave back slabs of its writer's front
        self.direct = False  # to the DataNodes: its commit comes at its end, so it can carry a later mtime and mode

    def behind(self, w: Writer) -> None:
        """The upload has read the local copy below `sent`: drop those pages from the page cache. A streamed file's
        local copy is written once and read once, and its fresh page-cache pages were most of the mount's CPU under a
        dd (perf: the pwrite's copy_folio_from_iter_atomic 60% of its samples); pages given back are the next
        writes' (recycled pages cost this VM ~6x less than fresh ones, see datanode/blockstore.py write_file). A
        page still dirty is not dropped, only written back: each range is asked twice, here and at the next call.
        `python bench/mount_write_bench.py --only dd`, four pairs against the tree before: mount CPU 1.5-2.0 against
        2.0-3.2 ms/MB; the machine's busy CPU during a 1 GiB dd (writeback included, /proc/stat) 6.5-7.6 against
        7.5-9.2 s. Nothing to drop in memory (a memfd) or in a tmpfs folder (fadvise does nothing there)."""
        if w.memory or self.sent <= self._asked:
            return
        os.posix_fadvise(w.fd, self._dropped, self.sent - self._dropped, os.POSIX_FADV_DONTNEED)
        self._dropped, self._asked = self._asked, self.sent

    def wake(self) -> None:
        self.more.set()
        self.more = trio.Event()

    def back(self) -> None:
        self.gave.set()
        self.gave = trio.Event()


class Writes:
    """The local copies of the files this mount is writing (one per file, shared by all its handles), and their
    commits. A commit returns the file's new attributes; applying them to open handles is the caller's."""

    def __init__(self, client: S3Client, opts: MountOptions, inodes: InodeTable, cache: BlockCache) -> None:
        self.c, self.o, self.inodes, self.cache = client, opts, inodes, cache
        self.writers: dict[int, Writer] = {}
        self.nursery: trio.Nursery | None = None  # the mount's (mount.py), where streams run
        self.streams = 0  # under way
        self.made_here: dict[int, Writer] = {}  # write-back: files not yet on the NameNode, by inode
        self.names: dict[tuple[int, str], int] = {}  # and by (directory, name)
        self._made_in: dict[int, tuple[int, int]] = {}  # directory -> (files made in it not yet created, last made_at)
        self.created_in: dict[int, tuple[int, float]] = {}  # directory -> (last made_at, monotonic time of its create)
        self.queue: collections.deque[Writer] = collections.deque()  # closed, to be created
        self.queued_bytes = 0
        self._more = trio.Event()
        self._creators = 0
        self._inos: dict[str, Iterator[int]] = {}  # write-back: inode numbers reserved, per bucket
        self._reserving = trio.Lock()
        self._direct_after = 0.0  # monotonic: streams go through the gateway until then (DataNodes unreachable)
        self.slabs = Slabs()  # the fronts' (front.py)
        self._fronts = True  # False once the local copies' file system refused O_DIRECT

    # ---------------------------------------------------------------- write-back creates
    # With --writeback a regular file created in a directory whose attributes the mount knows is made here: its
    # inode number comes from a range reserved on the NameNode, its attributes are the mount's, and it exists only
    # in this mount until it is created on the NameNode with its content, attributes and mtime in one batch
    # (gateway/s3/posix.py fs_create_files) after close() (at most MAX_BATCH files or BATCH_BYTES at once, CREATORS
    # batches in flight). fsync, and anything else that needs the file on the NameNode (a rename, an unlink, a link,
    # a listing of its directory, a stat of the directory, a second open, xattrs, a truncate, a stream once it
    # outgrows STREAM_AFTER) waits for its create first: `settle` one file, `settle_all` every one.
    def made_in(self, parent: int, seen: float | None) -> int:
        """When the last file made here in `parent` was made, while some made there are not yet on the NameNode or
        the directory's attributes were last seen (`seen`, monotonic) before their create (0: none)."""
        n, t = self._made_in.get(parent, (0, 0))
        if n:
            return t
        c = self.created_in.get(parent)
        if c is None:
            return 0
        if seen is not None and seen > c[1]:  # seen since: the NameNode's times include it
            del self.created_in[parent]
            return 0
        return c[0]

    def named(self, parent: int, name: str) -> Writer | None:
        """The file this mount made as `name` in `parent` and has not created on the NameNode yet."""
        ino = self.names.get((parent, name))
        return None if ino is None else self.made_here.get(ino)

    async def next_ino(self, bucket: str) -> int:
        """An inode number for a file made in `bucket`, from numbers reserved there: a bucket that can't take the
        mount's writes (one that encrypts new objects) refuses the reservation, so the create fails at once."""
        async with self._reserving:
            ino = next(self._inos.get(bucket, iter(())), None)
            if ino is None:  # none reserved yet, or used up
                self._inos[bucket] = iter(await self.c.fs_reserve_inodes(bucket, INO_RESERVE))
                ino = next(self._inos[bucket])
            return ino

    def make(self, ino: int, parent: int, name: str, attr: dict) -> Writer:
        """A file created in this mount only (write-back): its local copy, for its first handle."""
        w = self.new(ino, attr, memory=True)
        w.new, w.made, w.dirty, w.mtime_ns, w.made_at = (parent, name), trio.Event(), True, attr["mt"], attr["ct"]
        self.made_here[ino] = w
        self.names[(parent, name)] = ino
        n, _ = self._made_in.get(parent, (0, 0))
        self._made_in[parent] = (n + 1, w.made_at)
        return w

    def later(self, w: Writer) -> None:
        """Queue the file's create (after its close): the creators send it with the next batch."""
        if w.new is None or w.queued:
            return
        w.queued = True
        self.queue.append(w)
        self.queued_bytes += w.size
        self._more.set()
        if self._creators == 0 and self.nursery is not None:
            for _ in range(CREATORS):
                self._creators += 1
                self.nursery.start_soon(self._creator)

    async def closing(self, w: Writer) -> None:
        """A handle of a file made here is being closed (flush): queue its create. Memory is bounded: while
        QUEUE_BYTES wait to be sent, the close waits for the file's create."""
        self.later(w)
        if self.queued_bytes > QUEUE_BYTES:
            await self.settle(w)

    async def settle(self, w: Writer) -> None:
        """Wait until the file exists on the NameNode (queueing its create now if need be)."""
        if w.new is None:
            if w.error is not None:
                raise w.error
            return
        self.later(w)
        await w.made.wait()
        if w.error is not None:
            raise w.error

    async def settle_all(self, parent: int | None = None) -> None:
        """Every file made here (in directory `parent`, or anywhere) created on the NameNode; their errors are
        logged (each file's own calls report them)."""
        for w in [w for w in self.made_here.values() if parent is None or w.new and w.new[0] == parent]:
            try:
                await self.settle(w)
            except errors.DomainError:
                pass

    async def _creator(self) -> None:
        try:
            while True:
                while not self.queue:
                    self._more = trio.Event()
                    await self._more.wait()
                batch, size = [], 0
                while self.queue and len(batch) < MAX_BATCH and (not batch or size + self.queue[0].size <= BATCH_BYTES):
                    w = self.queue.popleft()
                    batch.append(w)
                    size += w.size
                    self.queued_bytes -= w.size
                await self._create(batch)
        finally:
            self._creators -= 1

    async def _create(self, batch: list[Writer]) -> None:
        """Create a batch of files on the NameNode with their content (each writer's lock held meanwhile: a write
        waits, as it does for an upload)."""
        async with contextlib.AsyncExitStack() as stack:
            for w in batch:
                await stack.enter_async_context(w.lock)
            files = []
            for w in batch:
                a = {**w.attr, **w.pending}
                parent, name = w.new
                size = 0 if w.bare else w.size
                files.append((NewFile(ino=a["ino"], parent=parent, name=name, mode=a["mode"], uid=a["uid"],
                                      gid=a["gid"], at=a["at"], mt=w.mtime_ns, size=size, ct=a["ct"],
                                      dt=w.made_at),
                              os.pread(w.fd, size, 0) if size else b""))
            bucket = self._bucket(batch[0].attr["ino"])
            for wait in (*CREATE_RETRY_S, None):
                try:
                    res = await self.c.fs_create_files(bucket, files)
                    break
                except errors.Unavailable as e:  # no answer (it may have been made): the same batch again; the
                    if wait is None:             # NameNode answers files it made already as it did the first time
                        res = [e] * len(batch)
                        break
                    log.warning("write-back create of %d files: %s; sending them again in %.1f s", len(batch), e,
                                wait)
                    await trio.sleep(wait)
                except errors.DomainError as e:
                    res = [e] * len(batch)
                    break
                except Exception as e:  # noqa: BLE001 -- a bug: the files' calls report EIO, the log says why
                    log.exception("write-back create failed")
                    res = [errors.DomainError(repr(e))] * len(batch)
                    break
            for w, (f, _), r in zip(batch, files, res):
                ino = w.attr["ino"]
                self.names.pop(w.new, None)
                self.made_here.pop(ino, None)
                n, t = self._made_in.pop(w.new[0], (1, 0))
                if n > 1:
                    self._made_in[w.new[0]] = (n - 1, t)
                else:
                    if len(self.created_in) > 100_000:
                        self.created_in.clear()
                    self.created_in[w.new[0]] = (t, time.monotonic())
                w.new, w.queued = None, False
                if isinstance(r, errors.DomainError):
                    log.error("inode %s (%r): not saved: %s", ino, f.name, r)
                    if isinstance(r, errors.EncryptedObject):  # encrypting since the reservation: the next create
                        self._inos.pop(bucket, None)  # asks again, and is refused at once
                    w.error, w.dirty = r, False
                elif w.bare:  # made empty: the content stays to be written (streamed) as a new file's
                    w._rebase(r["etag"], [], {}, CLEAN, r.pop("bs"))
                    r.pop("layout")
                    w.pending = {}
                    w.known(r)
                else:
                    w.committed(r["etag"], r.pop("layout"), r.pop("bs"))
                    w.pending = {}
                    w.known(r)
                w.made.set()
        for w in batch:
            if w.refs == 0:
                self.drop(w.attr["ino"], w)

    def of(self, ino: int) -> Writer | None:
        """The file's local copy, if it has one."""
        return self.writers.get(ino)

    def new(self, ino: int, attr: dict, memory: bool = False) -> Writer:
        """The local copy of a file just created (`attr`: its attributes), for its first handle: nothing to ask
        about its layout."""
        w = self.writers[ino] = Writer(self.o.cache_dir, {"etag": attr["etag"], "blk": [], "size": 0}, memory)
        w.known(attr)
        w.refs += 1
        return w

    def forget_attrs(self) -> None:
        """The attributes the NameNode gave may have changed by another route: ask it again at the next getattr."""
        for w in self.writers.values():
            w.attr_at = -1e9

    def defer(self, w: Writer, fields: dict) -> dict | None:
        """chmod/chown/utimens of a file with unsaved changes (an archiver restoring a file's attributes before
        closing it), kept to be sent with the commit at flush/fsync/close instead of a request of its own; returns
        the attributes the file now has, or None where it can't be deferred: no unsaved changes (or a commit under
        way), a stream through the gateway under way (it sent its mtime already; a stream to the DataNodes sends
        them with its commit), or set-id and sticky bits, whose rules (cleared by chown, by a write) are the
        NameNode's to apply."""
        if not w.dirty or w.attr is None or w.stream is not None and not w.stream.direct or w.lock.locked() \
                or set(fields) - {"mode", "uid", "gid", "at", "mt"} \
                or (w.attr["mode"] | fields.get("mode", 0)) & 0o7000:
            return None
        if "mt" in fields:
            w.set_mtime(fields.pop("mt"))
        if fields:
            w.pending.update(fields)
            w.attr = {**w.attr, **fields, "ct": time.time_ns()}
        return w.attr

    async def attach(self, ino: int) -> Writer:
        """The file's local copy, for one more handle (the first write through it)."""
        w = await self._writer(ino)
        w.refs += 1
        return w

    async def _writer(self, ino: int) -> Writer:
        """The file's local copy; made empty, knowing only where the current version's blocks are."""
        w = self.writers.get(ino)
        if w is not None:
            return w
        layout = await self.c.fs_layout(self.inodes.bucket(ino), ino=ino)
        w = self.writers.get(ino)  # another call may have made one meanwhile
        if w is None:
            w = self.writers[ino] = Writer(self.o.cache_dir, layout)
        return w

    async def fill(self, ino: int, w: Writer, blocks: list[int]) -> None:
        """Fetch blocks of the writer's base version into its local copy (the caller holds w.lock)."""
        for i in blocks:
            start, n = w.starts[i], w.starts[i + 1] - w.starts[i]
            data = await self.c.fs_read(self.inodes.bucket(ino), ino, start, n)
            if len(data) != n:  # the file was replaced meanwhile: its commit would be refused anyway
                raise _replaced(ino)
            os.pwrite(w.fd, data, start)
            w.state[i] = CLEAN

    def drop(self, ino: int, w: Writer) -> None:
        if self.writers.get(ino) is w:
            del self.writers[ino]
        if w.stream is not None:  # not committed (an upload failed before it): abandoned
            w.stream.scope.cancel()
            w.stream = None
        w.close()

    async def read(self, ino: int, w: Writer, off: int, size: int) -> bytes:
        """Bytes [off, off + size) of the file, from its local copy (fetching the base blocks they need first)."""
        async with w.lock:
            await self.fill(ino, w, w.absent(off, min(off + size, w.size)))
            return w.pread(off, size)

    async def write(self, ino: int, w: Writer, off: int, buf: bytes) -> None:
        if w.new is not None and max(w.size, off + len(buf)) >= STREAM_AFTER:  # large: streamed, once it exists
            w.bare = True
            await self.settle(w)
        async with w.lock:
            if w.memory and off + len(buf) > STREAM_AFTER:
                w.spill(self.o.cache_dir)
            if w.stream is not None and off < w.stream.sent:
                await self.unstream(w)
            await self.fill(ino, w, w.partly(off, off + len(buf)))
            if w.front is not None and not w.front.takes(off):
                w.unfront()
            done = await self._to_front(ino, w, off, buf) if w.front is not None else 0
            if done < len(buf):
                os.pwrite(w.fd, memoryview(buf)[done:], off + done)
            w.wrote(off, off + len(buf))
            w.touched()
            if w.stream is not None:
                w.stream.wake()
            elif w.fresh() and self.nursery is not None and self.streams < MAX_STREAMS:
                w.stream = Stream()
                self.streams += 1
                self.nursery.start_soon(self._stream, ino, w, w.stream)
                self._start_front(w)

    def _start_front(self, w: Writer) -> None:
        """The rest of a file whose stream just started goes through a front (front.py)."""
        if not self._fronts or w.memory:
            return
        dfd = open_direct(w.fd)
        if dfd is None:
            log.info("the local copies' file system does not take O_DIRECT: streamed files go through the page cache")
            self._fronts = False
            return
        w.front = Front(w.fd, dfd, w.size, self.slabs)

    async def _to_front(self, ino: int, w: Writer, off: int, buf: bytes) -> int:
        """Write `buf` at `off` into the writer's front; the bytes it took (the front ended before the rest: the
        upload ended, or it waited for room and the file was dropped meanwhile). A full slab goes to the local copy
        (from a thread: the device's time, not the mount's) and to the upload; while the front holds as many slabs as
        it may, the write waits for the upload to send some."""
        f, st = w.front, w.stream
        mv, done = memoryview(buf), 0
        while done < len(mv):
            done += f.put(off + done, mv[done:])
            if not f.full():
                continue
            try:
                await trio.to_thread.run_sync(f.write_slab)
            except OSError as e:  # O_DIRECT refused after all, or a full disk: the usual way (which reports the latter)
                log.info("inode %s: a write past the page cache failed (%s): through it from here", ino, e)
                if e.errno == errno.EINVAL:
                    self._fronts = False
                w.unfront()
                break
            f.seal()
            w.wrote(off, off + done)  # the upload may take it now
            st.wake()
            while w.front is f and not f.room() and not st.ended.is_set():
                await st.gave.wait()
            if w.front is not f or st.ended.is_set():
                w.unfront()  # (the slabs of an upload that ended are not taken: its re-upload reads the local copy)
                break
            f.next()
        return done

    async def _stream(self, ino: int, w: Writer, st: Stream) -> None:
        """Upload the writer's content while it is written (see the module's doc); ends when it is committed,
        failed or cancelled."""
        async def pieces():
            while True:
                end = w.size
                if end - st.sent >= UPLOAD_PIECE or st.closing and end > st.sent:
                    n = min(UPLOAD_PIECE, end - st.sent)
                    st.sent += n  # before the read: a write below this point from now on cancels the stream
                    piece, lent = w.take(st.sent - n, n)
                    if lent is not None:  # (through the gateway: the rare path, a copy)
                        piece = bytes(piece)
                        lent[0].give(lent[1])
                    st.back()
                    st.behind(w)
                    yield piece
                elif st.closing:
                    return
                else:
                    await st.more.wait()

        try:
            with st.scope:
                bucket = self._bucket(ino)
                if self.o.direct_writes and time.monotonic() >= self._direct_after:
                    st.direct = True
                    try:
                        st.result = await self._stream_direct(bucket, ino, w, st)
                        return
                    except DirectUnavailable as e:  # nothing committed: through the gateway, from the start
                        log.info("inode %s: direct write unavailable (%s): through the gateway", ino, e)
                        self._direct_after = time.monotonic() + DIRECT_RETRY_S
                        st.direct = False
                        st.sent = 0
                        if w.mtime_set:  # a utimens kept for the commit that won't come: close uploads with it
                            raise DirectUnavailable("an mtime was set for the direct commit") from None
                st.result = await self.c.fs_write(bucket, ino, FileWrite(base=w.base, size=0, segs=[RestOfBody()]),
                                                  pieces())
        except Exception as e:  # noqa: BLE001 -- the upload at flush/close reports it, or uploads again
            st.error = e
        finally:
            self.streams -= 1
            st.ended.set()
            st.back()

    async def _stream_direct(self, bucket: str, ino: int, w: Writer, st: Stream) -> dict:
        """The stream's content stored on the DataNodes by this mount (common/directwrite.py: write tokens from the
        gateway, asked for 1, 2, 4, ... ROUND_MAX blocks at a time; up to WINDOW blocks stored per round, one call
        per primary node, ROUNDS_IN_FLIGHT rounds at once: the next round is sent while the DataNodes store and
        replicate the one before), then committed by the gateway (fs_write_direct) once closing; the blocks of a
        stream that ends otherwise are given back. DirectUnavailable (the DataNodes can't be reached, a refused token)
        before the commit: nothing is committed, the caller goes through the gateway."""
        dw = DirectWriter(self.c)
        grants: list = []
        free: list = []
        rnd = 1

        async def slots(n: int) -> list:
            nonlocal rnd
            while len(free) < n:
                g = await self.c.fs_allocate(bucket, max(rnd, n - len(free)))
                rnd = min(rnd * 2, ROUND_MAX)
                if grants and g.size != grants[0].size:
                    raise DirectUnavailable("the bucket's block size changed during the write")
                grants.append(g)
                free.extend((g, i) for i in range(len(g.blocks)))
            out = free[:n]
            del free[:n]
            return out

        done = False
        rounds: list[list] = []  # each round's receipts, in the file's order (filled as its stores answer)
        failed: list[Exception] = []
        in_flight = trio.Semaphore(ROUNDS_IN_FLIGHT)

        async def store(places: list, data: list, lent: list, got: list, fast: bool, cancel: trio.CancelScope
                        ) -> None:
            try:
                got[:] = await dw.store_slots(places, data, fast)
            except Exception as e:  # noqa: BLE001 -- raised as itself below (not in a MultiError)
                failed.append(e)
                cancel.cancel()
            finally:
                in_flight.release()
                data.clear()
                for front, slab in lent:
                    front.give(slab)
                st.back()

        try:
            free.extend(await slots(1))  # the block size
            bs = grants[0].size
            async with trio.open_nursery() as nursery:
                while True:
                    end = w.size
                    full = (end - st.sent) // bs
                    if not full and not (st.closing and end > st.sent):
                        if st.closing:
                            break
                        await st.more.wait()
                        continue
                    await in_flight.acquire()  # rounds overlap: one is sent while the one before is stored
                    count = max(1, min((w.size - st.sent) // bs, WINDOW))
                    places = await slots(count)
                    data, lent = [], []  # (from here to the store's start nothing waits: it gives back the slabs)
                    for _ in range(count):
                        n = min(bs, w.size - st.sent)
                        st.sent += n  # before the read: a write below this point from now on cancels the stream
                        piece, slab = w.take(st.sent - n, n)
                        data.append(piece)
                        if slab is not None:
                            lent.append(slab)
                    st.back()
                    st.behind(w)
                    # a full block while the file is open: more may follow (if none does, a file of exactly a
                    # block gets a multipart-form ETag)
                    fast = of_several(len(rounds), len(data), more_may_come=not st.closing)
                    rounds.append([None] * len(data))
                    nursery.start_soon(store, places, data, lent, rounds[-1], fast, nursery.cancel_scope)
            if failed:
                raise failed[0]
            receipts = [r for got in rounds for r in got]
            used = {r.id for r in receipts}
            held = AttrChanges(**w.pending) if w.pending else None  # (final: upload() holds the lock)
            res = await self.c.fs_write_direct(bucket, ino, FileWriteDirect(
                base=w.base, grants=[g for g in grants if any(p.id in used for p in g.blocks)], receipts=receipts,
                mt=w.mtime_ns if w.mtime_set else None, held=held))
            done = True
            if held is not None:
                w.pending = {}
            return res
        finally:
            if grants and (free or not done):  # never committed: given back (the pending expiry would, later)
                with trio.CancelScope(shield=True):
                    await dw.abandon(bucket, grants)

    async def unstream(self, w: Writer) -> None:
        """Cancel the writer's stream (the caller holds w.lock): its blocks are abandoned, the local copy stays."""
        st, w.stream = w.stream, None
        if st is not None:
            st.scope.cancel()
            await st.ended.wait()
            # it can't have committed: its body ends only once upload() says so, holding w.lock
        w.unfront()

    async def set_mtime(self, w: Writer, mtime_ns: int) -> None:
        """utimens while the file has unsaved changes: their commit takes that time (a stream through the gateway,
        which sent the commit's layout first, is cancelled)."""
        async with w.lock:
            if w.dirty and w.stream is not None and not w.stream.direct:
                await self.unstream(w)
            w.set_mtime(mtime_ns)

    def _bucket(self, ino: int) -> str:
        bucket = self.inodes.bucket_of.get(ino) or self.o.bucket
        if bucket is None:
            raise errors.Unavailable(f"bucket of inode {ino} unknown")
        return bucket

    async def upload(self, ino: int, w: Writer) -> dict | None:
        """Commit the local copy's unsaved changes, sending only what changed; returns the new attributes."""
        async with w.lock:
            stream_failed = False
            if w.stream is not None:
                st, w.stream = w.stream, None
                st.closing = True
                st.wake()
                await st.ended.wait()
                w.unfront()
                if st.result is not None:
                    a = st.result
                    w.committed(a["etag"], a.pop("layout"), a.pop("bs"))
                    a = await self._settle(ino, w, a)
                    self.cache.drop(ino)
                    return a
                log.info("inode %s: streamed upload failed (%r), uploading again", ino, st.error)
                stream_failed = True
            if not w.dirty:
                return None
            layout, extents = w.layout()

            async def pieces():
                for start, n in extents:
                    for pos in range(start, start + n, UPLOAD_PIECE):
                        yield os.pread(w.fd, min(UPLOAD_PIECE, start + n - pos), pos)

            new = sum(n for _, n in extents)
            try:
                a = await self.c.fs_write(self._bucket(ino), ino, layout, pieces() if new > SMALL_UPLOAD else
                                          b"".join([os.pread(w.fd, n, start) for start, n in extents]))
                if layout.held is not None:  # set with the commit
                    w.pending = {}
            except errors.PreconditionFailed:  # the NameNode refused the base version (namenode/posix.py commit)
                # a stream whose answer was lost (a timeout after the gateway committed) did replace it: with
                # our very bytes, then this upload is done
                a = await self._ours(ino, w) if stream_failed else None
                if a is None:
                    raise _replaced(ino) from None
            w.committed(a["etag"], a.pop("layout"), a.pop("bs"))
            a = await self._settle(ino, w, a)
        self.cache.drop(ino)
        return a

    async def _ours(self, ino: int, w: Writer) -> dict | None:
        """The file's current version if it holds exactly the local copy's bytes (as a commit's answer: attributes,
        layout, bs), else None. Compared byte for byte, read back piece by piece: the rare path after a stream's
        answer was lost, where the ETag can't tell (it depends on the path the stream took)."""
        bucket = self._bucket(ino)
        lay = await self.c.fs_layout(bucket, ino=ino)
        if lay["size"] != w.size:
            return None
        for pos in range(0, w.size, UPLOAD_PIECE):
            n = min(UPLOAD_PIECE, w.size - pos)
            if await self.c.fs_read(bucket, ino, pos, n) != os.pread(w.fd, n, pos):
                return None
        a = await self.c.fs_getattr(bucket, ino=ino)
        if a.get("etag", lay["etag"]) != lay["etag"]:  # replaced again meanwhile
            return None
        log.info("inode %s: the failed stream had committed (its bytes are the file's): done", ino)
        return {**a, "etag": lay["etag"], "layout": lay["blk"], "bs": lay["bs"]}

    async def _settle(self, ino: int, w: Writer, a: dict) -> dict:
        """After a commit: send the chmod/chown/atime deferred until it; returns the file's attributes."""
        if w.pending:
            fields, w.pending = w.pending, {}
            a = {**a, **await self.c.fs_setattr(self._bucket(ino), ino=ino, fields=fields)}
        if w.attr is not None:
            w.known(a)
        return a

    async def truncate(self, ino: int, size: int) -> dict | None:
        """Truncate (or extend) a file; returns its new attributes, or None while open handles hold the change."""
        w = self.writers.get(ino)
        if w is None and size == 0:
            self.cache.drop(ino)
            return await self.c.fs_setattr(self.inodes.bucket(ino), ino=ino, fields={"size": 0})
        w = await self._writer(ino)
        async with w.lock:
            await self.unstream(w)
            if w.memory and size > STREAM_AFTER:
                w.spill(self.o.cache_dir)
            await self.fill(ino, w, w.cut(size))
            os.ftruncate(w.fd, size)
            w.truncate(size)
            w.touched()
        if w.refs:
            return None
        try:
            return await self.upload(ino, w)
        finally:
            self.drop(ino, w)

    async def release(self, ino: int, w: Writer) -> dict | None:
        """One handle of the file closed: commit its unsaved changes (a failure is logged: close can't report it)
        and drop the local copy after its last handle; returns the new attributes, if it committed."""
        w.refs -= 1
        if w.new is not None:  # write-back: the creator drops it once the file is created
            self.later(w)
            return None
        try:
            if w.dirty:
                return await self.upload(ino, w)
        except errors.DomainError as e:
            log.error("inode %s: unsaved changes lost at close: %s", ino, e)
        finally:
            if w.refs == 0:
                self.drop(ino, w)
        return None
