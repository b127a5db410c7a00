"""pyfuse3 operations over the gateway's inode API (/_epochfs/fs, see gateway/s3/posix.py).

Inodes are the NameNode's own, so the kernel's inode numbers need no table here; only the mount's root (a bucket,
a directory below one, or the tree of all buckets) is renumbered to FUSE's root inode. Permissions are checked by the
kernel (default_permissions) from the mode/uid/gid we report.

Consistency is close-to-open. open() revalidates the attributes and keeps the kernel's page cache when the file is
unchanged (same mtime, size and ETag as at the last open); writes go to a local copy of the file (random writes and
truncates included, see Writer) that flush/fsync/close upload and commit, sending only the blocks that changed, so
once close() returns the new content is durable and visible through S3. In dataset mode the tree is taken as immutable: every attribute, name and
listing is fetched once and trusted for the life of the mount, and the mount is read-only. A shuffled epoch will read
every file of a directory soon, so the first read of a file there fetches the directory's small files in batches
(one request for many files, while the cache has room): epoch 1 pays per batch, not per file.
"""
from __future__ import annotations

import bisect
import collections
import errno
import functools
import itertools
import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyfuse3
import trio

from epochfs.common import defaults, errors
from epochfs.common.blocks import pieces_within
from epochfs.common.client import DIRECT_RETRY_S, PieceFailed, S3Client

from .. import errmap
from .cache import BlockCache
from .options import MountOptions

log = logging.getLogger("epochfs.mount")

NAME_MAX = 255
NN_ROOT = 1
FOREVER = 365 * 86400.0
UPLOAD_PIECE = 4 << 20
MAX_FILE_SIZE = defaults.MAX_OBJECT_SIZE  # S3's largest object
NOT_KEPT_XATTRS = (b"security.", b"system.")  # attribute namespaces namenode/posix.py refuses (EOPNOTSUPP)
# st_blksize: the page size, as local file systems and FUSE's default report it. Our 4 MiB block made tools scale
# their offsets by it (fsstress copies to up to 1,024 x st_blksize past EOF: gigabytes of zeros per file), while
# readers gain nothing from it: the kernel's readahead (mount.py) sets the size of the reads that reach the mount.
IO_BLKSIZE = 4096
LOCATE_SPAN = 256 << 20  # bytes of a file one locate answers for (its read token serves every read in them)
PLAN_MARGIN_S = 5        # a plan is dropped this long before its read token expires
MAX_PLANS = 1 << 16
LOCATE_FILES = 1024      # dataset mode: entries of a directory one locate answers for
# what a writer knows of a block of the version it started from
KEPT, CLEAN, DIRTY, GONE = range(4)  # only on DataNodes; also in the local copy, unchanged; changed; cut off


def _posix(fn):
    """Domain errors become the errno the NameNode chose, or the one errmap assigns; a failing local write buffer
    gives its own errno; anything else is logged and is EIO."""
    @functools.wraps(fn)
    async def wrapper(self, *args):
        try:
            return await fn(self, *args)
        except errors.DomainError as e:
            raise pyfuse3.FUSEError(e.details.get("errno") or errmap.to_errno(e)) from None
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        except pyfuse3.FUSEError:
            raise
        except Exception:  # a bug must fail one call, not end pyfuse3.main() and with it the mount
            log.exception("%s%r failed", fn.__name__, args)
            raise pyfuse3.FUSEError(errno.EIO) from None
    return wrapper


def _name(raw: bytes) -> str:
    if len(raw) > NAME_MAX:
        raise pyfuse3.FUSEError(errno.ENAMETOOLONG)
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise pyfuse3.FUSEError(errno.EINVAL) from None  # S3 keys are UTF-8


def _replaced(ino: int) -> errors.DomainError:
    """A writer's changes can't be saved: the version it started from was replaced (an S3 PUT) since. EIO, and
    logged, rather than a whole upload over the other writer's content: that would lose its update silently, and
    merging ours onto it could mix two files."""
    log.error("inode %s: changes not saved: the file was replaced since this mount began writing it", ino)
    return errors.PreconditionFailed(f"inode {ino} was replaced while being written", errno=errno.EIO)


def _version(a: dict) -> tuple:
    return a["mt"], a["size"], a["etag"]


class Writer:
    """The local copy of a file being written; every handle of the file shares it until the last one closes.

    It holds only what was written or read through it. The blocks of the version it started from (`base`, by ETag)
    stay on the DataNodes until a write covers part of one (then that block is fetched: read-modify-write of one
    block) or a read needs it; the local file has the file's size and is sparse where nothing was fetched. A commit
    keeps the untouched blocks by id and sends only the extents in between (gateway/s3/posix.py fs_write), so an
    fsync after a small write into a large file stores one block, not the file, and opening a file to append to it
    downloads nothing."""

    def __init__(self, tmpdir: Path | None, layout: dict) -> None:
        self.file = tempfile.TemporaryFile(dir=tmpdir)
        self.fd = self.file.fileno()
        self.size = layout["size"]
        os.ftruncate(self.fd, self.size)
        self.dirty = False
        self.refs = 0
        self.mtime_ns = 0
        self.mtime_set = False  # mtime_ns was set explicitly (utimens) after the last write: the commit keeps it
        self.lock = trio.Lock()
        self._rebase(layout["etag"], layout["blk"], {}, KEPT, layout.get("bs", UPLOAD_PIECE))

    def _rebase(self, etag: str, blk: list, known: dict[int, int], new: int, bs: int) -> None:
        self.base, self.bs = etag, bs
        self.ids = [b[0] for b in blk]
        self.starts = list(itertools.accumulate((b[1] for b in blk), initial=0))  # block i: [starts[i], starts[i+1])
        self.state = [known.get(b[0], new) for b in blk]

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

    def layout(self) -> tuple[dict, list[tuple[int, int]]]:
        """The commit's layout (blocks kept by id, new extents by length) and the new extents as (offset, length)."""
        segs, extents, pos = [], [], 0
        for i, bid in enumerate(self.ids):
            if self.state[i] in (KEPT, CLEAN):
                if self.starts[i] > pos:
                    segs.append(["n", self.starts[i] - pos])
                    extents.append((pos, self.starts[i] - pos))
                segs.append(["k", bid])
                pos = self.starts[i + 1]
        if self.size > pos:
            segs.append(["n", self.size - pos])
            extents.append((pos, self.size - pos))
        return {"base": self.base, "size": self.size, "segs": segs,
                **({"mt": self.mtime_ns} if self.mtime_set else {})}, extents

    def committed(self, etag: str, blk: list, bs: int) -> None:
        """The content is now version `etag` made of `blk`: kept blocks stay as they were, new ones are local."""
        self._rebase(etag, blk, {bid: st for bid, st in zip(self.ids, self.state) if st in (KEPT, CLEAN)}, CLEAN,
                     bs)
        self.dirty = self.mtime_set = False


@dataclass
class Handle:
    ino: int
    etag: str
    size: int
    writer: Writer | None = None
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=16))  # (start, end) of reads
    ahead: int = -1                          # the last chunk readahead was started for
    stream: bool = False                     # reading a large file front to back (see _track_stream)
    window: dict[int, list] = field(default_factory=dict)  # a stream's chunks: index -> [data, bytes not yet read]
    attr: dict = field(default_factory=dict)  # the file's attributes when it was opened


@dataclass
class _Plan:
    """Where a stretch of one file version is on the DataNodes, with the read token for it (a locate answer)."""
    etag: str
    size: int
    start: int
    end: int
    starts: list[int]                        # file offset of each piece
    pieces: list[list]                       # [block id, offset in it, length, [node, ...]]
    addrs: dict
    grant: dict

    def covers(self, etag: str, off: int, end: int) -> bool:
        return etag.strip('"') == self.etag and self.start <= off and min(end, self.size) <= self.end and \
            time.time() < self.grant["exp"] - PLAN_MARGIN_S

    def within(self, off: int, end: int) -> list[list]:
        """The pieces of bytes [off, end)."""
        return pieces_within(self.pieces, self.starts, off, end)


@dataclass
class _Fetch:
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | None = None                # None when done: a prefetch missed it, the reader fetches it itself
    error: BaseException | None = None


class EpochOperations(pyfuse3.Operations):
    def __init__(self, client: S3Client, opts: MountOptions) -> None:
        super().__init__()
        self.c, self.o = client, opts
        self.root = NN_ROOT
        self.cache = BlockCache(opts.cache_policy, opts.cache_mem, opts.cache_disk,
                                opts.cache_dir / "blocks" if opts.cache_dir else None)
        self.timeouts = (FOREVER, FOREVER) if opts.dataset else (opts.entry_timeout, opts.attr_timeout)
        self.bucket_of: dict[int, str] = {}
        self.writers: dict[int, Writer] = {}
        self.files: dict[int, Handle] = {}
        self.dirs: dict[int, list] = {}
        self.seen: dict[int, tuple] = {}                 # file version at its last open (keep_cache)
        self.attrs: dict[int, dict] = {}                 # dataset mode: every attribute seen
        self.names: dict[tuple[int, str], int] = {}      # dataset mode: (parent, name) -> inode
        self.listings: dict[int, list] = {}              # dataset mode: directory listings
        self.parent_of: dict[int, int] = {}              # dataset mode: a file's directory
        self.keys: dict[int, str] = {}                   # dataset mode: a directory's key prefix in its bucket
        self.prefetched: set[int] = set()                # dataset mode: directories whose files were prefetched
        self.dir_pos: dict[int, tuple[int, int]] = {}    # dataset mode: inode -> (directory, index in its listing)
        self.batches = trio.Semaphore(4)                 # prefetch batches under way at once
        self.inflight: dict[tuple, _Fetch] = {}
        self.plans: dict[int, _Plan] = {}               # inode -> where its blocks are (direct reads)
        self.direct_after = 0.0                          # monotonic time from which to try direct reads again
        self.locating: dict[int | tuple, trio.Event] = {}  # locates under way: of a file, of a (directory, page)
        self._fh = itertools.count(1)
        self.nursery: trio.Nursery | None = None

    async def start(self) -> None:
        """Find the mount's root: the tree of buckets, a bucket, or a directory below one."""
        if self.o.bucket is None:
            return
        a = await self.c.fs("lookup", self.o.bucket, parent=NN_ROOT, name=self.o.bucket)
        parts = [p for p in self.o.prefix.split("/") if p]
        for part in parts:
            a = await self.c.fs("lookup", self.o.bucket, parent=a["ino"], name=part)
        if not stat.S_ISDIR(a["mode"]):
            raise errors.NotADirectory(f"{self.o.bucket}/{self.o.prefix} is not a directory")
        self.root = a["ino"]
        self.bucket_of[self.root] = self.o.bucket
        self.keys[self.root] = "".join(p + "/" for p in parts)

    # ---------------------------------------------------------------- inodes and attributes
    def _nn(self, ino: int) -> int:
        return self.root if ino == pyfuse3.ROOT_INODE else ino

    def _fuse(self, ino: int) -> int:
        return pyfuse3.ROOT_INODE if ino == self.root else ino

    def _entry(self, a: dict) -> pyfuse3.EntryAttributes:
        e = pyfuse3.EntryAttributes()
        e.st_ino = self._fuse(a["ino"])
        e.generation = 0
        e.entry_timeout, e.attr_timeout = self.timeouts
        e.st_mode, e.st_nlink, e.st_uid, e.st_gid, e.st_rdev = a["mode"], a["nlink"], a["uid"], a["gid"], a["rdev"]
        e.st_atime_ns, e.st_mtime_ns, e.st_ctime_ns = a["at"], a["mt"], a["ct"]
        size = a["size"]
        w = self.writers.get(a["ino"])
        if w is not None:  # unsaved writes: the kernel must see the local size and time
            size = w.size
            if w.mtime_set:
                e.st_mtime_ns = w.mtime_ns
            elif w.dirty:
                e.st_mtime_ns = e.st_ctime_ns = max(w.mtime_ns, a["mt"])
        e.st_size = size
        e.st_blksize = IO_BLKSIZE
        e.st_blocks = (size + 511) // 512
        return e

    def _remember(self, parent: int, name: str, a: dict) -> None:
        ino = a["ino"]
        if parent == NN_ROOT and self.o.bucket is None:
            self.bucket_of[ino] = name
        elif parent in self.bucket_of:
            self.bucket_of[ino] = self.bucket_of[parent]
        if self.o.dataset:
            self.names[(parent, name)] = ino
            self.attrs[ino] = a
            self.parent_of[ino] = parent
            if parent == NN_ROOT and self.o.bucket is None:
                self.keys[ino] = ""
            elif stat.S_ISDIR(a["mode"]) and parent in self.keys:
                self.keys[ino] = f"{self.keys[parent]}{name}/"

    def _bucket(self, parent: int, other: int | None = None) -> str | None:
        """The bucket an operation happens in (the gateway checks the caller's permission on it; None: the root of
        the tree of buckets); EXDEV when it would cross buckets: they differ in block size and replication, like
        separate file systems."""
        bucket = self.bucket_of.get(parent, self.o.bucket)
        if other is not None and self.bucket_of.get(other, self.o.bucket) != bucket:
            raise pyfuse3.FUSEError(errno.EXDEV)
        return bucket

    def _writable(self) -> None:
        if self.o.read_only:
            raise pyfuse3.FUSEError(errno.EROFS)

    async def _getattr(self, ino: int) -> dict:
        if self.o.dataset and ino in self.attrs:
            return self.attrs[ino]
        a = await self.c.fs("getattr", self._bucket(ino), ino=ino)
        if self.o.dataset:
            self.attrs[ino] = a
        return a

    # ---------------------------------------------------------------- metadata
    @_posix
    async def lookup(self, parent_inode, name, ctx=None):
        s, p = _name(name), self._nn(parent_inode)
        if self.o.dataset:  # one listing answers every lookup in the directory, now and in every later epoch
            if p not in self.listings:
                for child, a in await self._list(p):
                    self._remember(p, child, a)
            ino = self.names.get((p, s))
            if ino is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._entry(self.attrs[ino])
        a = await self.c.fs("lookup", s if p == NN_ROOT else self._bucket(p), parent=p, name=s)
        self._remember(p, s, a)
        return self._entry(a)

    @_posix
    async def getattr(self, inode, ctx=None):
        ino = self._nn(inode)
        try:
            return self._entry(await self._getattr(ino))
        except errors.NotFound:
            # removed elsewhere (an S3 DELETE) while open here: like an unlinked file, its handles keep reading the
            # old content (the NameNode keeps its blocks for NN_FREE_GRACE_S), and the kernel revalidates it
            h = next((h for h in self.files.values() if h.ino == ino), None)
            if h is None:
                raise
            return self._entry({**h.attr, "etag": h.etag, "size": h.size, "nlink": 0})

    @_posix
    async def setattr(self, inode, attr, fields, fh, ctx):
        self._writable()
        ino = self._nn(inode)
        args = {}
        if fields.update_mode:
            args["mode"] = attr.st_mode
        if fields.update_uid:
            args["uid"] = attr.st_uid
        if fields.update_gid:
            args["gid"] = attr.st_gid
        if fields.update_atime:
            args["at"] = attr.st_atime_ns
        if fields.update_mtime:
            args["mt"] = attr.st_mtime_ns
            w = self.writers.get(ino)
            if w is not None:
                w.set_mtime(attr.st_mtime_ns)
        a = None
        if fields.update_size:
            a = await self._truncate(ino, attr.st_size)
        if args or a is None:
            a = await self.c.fs("setattr", self._bucket(ino), ino=ino, fields=args)
        return self._entry(a)

    async def _truncate(self, ino: int, size: int) -> dict | None:
        """Truncate (or extend) a file; returns its new attributes, or None while open handles hold the change."""
        if size > MAX_FILE_SIZE:
            raise pyfuse3.FUSEError(errno.EFBIG)
        w = self.writers.get(ino)
        if w is None and size == 0:
            self.cache.drop(ino)
            return self._changed(await self.c.fs("setattr", self._bucket(ino), ino=ino, fields={"size": 0}))
        w = await self._writer(ino)
        async with w.lock:
            await self._fill(ino, w, w.cut(size))
            os.ftruncate(w.fd, size)
            w.truncate(size)
            w.touched()
        if w.refs:
            return None
        try:
            return await self._upload(ino, w)
        finally:
            self._drop_writer(ino, w)

    @_posix
    async def readlink(self, inode, ctx):
        return (await self.c.fs("readlink", self._bucket(self._nn(inode)), ino=self._nn(inode))).encode("latin-1")

    @_posix
    async def opendir(self, inode, ctx):
        fh = next(self._fh)
        self.dirs[fh] = [self._nn(inode), None]
        return fh

    async def _list(self, ino: int) -> list:
        if self.o.dataset and ino in self.listings:
            return self.listings[ino]
        out, after = [], ""
        while True:
            page = await self.c.fs("readdir", self._bucket(ino), ino=ino, after=after)
            out += page["entries"]
            if page["next"] is None:
                break
            after = page["next"]
        if self.o.dataset:
            self.listings[ino] = out
            for i, (_, a) in enumerate(out):
                self.dir_pos[a["ino"]] = (ino, i)
        return out

    @_posix
    async def readdir(self, fh, start_id, token):
        d = self.dirs[fh]
        if d[1] is None:
            d[1] = await self._list(d[0])
        for i in range(start_id, len(d[1])):
            name, a = d[1][i]
            self._remember(d[0], name, a)
            if not pyfuse3.readdir_reply(token, name.encode(), self._entry(a), i + 1):
                return

    async def releasedir(self, fh):
        self.dirs.pop(fh, None)

    @_posix
    async def mkdir(self, parent_inode, name, mode, ctx):
        self._writable()
        p, s = self._nn(parent_inode), _name(name)
        a = await self.c.fs("mkdir", self._bucket(p), parent=p, name=s, mode=mode, uid=ctx.uid, gid=ctx.gid)
        self._remember(p, s, a)
        return self._entry(a)

    @_posix
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._writable()
        p, s = self._nn(parent_inode), _name(name)
        a = await self.c.fs("mknod", self._bucket(p), parent=p, name=s, mode=mode, uid=ctx.uid, gid=ctx.gid,
                            rdev=rdev)
        self._remember(p, s, a)
        return self._entry(a)

    @_posix
    async def symlink(self, parent_inode, name, target, ctx):
        self._writable()
        p, s = self._nn(parent_inode), _name(name)
        a = await self.c.fs("symlink", self._bucket(p), parent=p, name=s, target=target.decode("latin-1"),
                            uid=ctx.uid, gid=ctx.gid)
        self._remember(p, s, a)
        return self._entry(a)

    @_posix
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._writable()
        p, s = self._nn(new_parent_inode), _name(new_name)
        a = await self.c.fs("link", self._bucket(p, self._nn(inode)), ino=self._nn(inode), parent=p, name=s)
        self._remember(p, s, a)
        return self._entry(a)

    @_posix
    async def unlink(self, parent_inode, name, ctx):
        self._writable()
        p = self._nn(parent_inode)
        await self.c.fs("unlink", self._bucket(p), parent=p, name=_name(name))

    @_posix
    async def rmdir(self, parent_inode, name, ctx):
        self._writable()
        p = self._nn(parent_inode)
        await self.c.fs("rmdir", self._bucket(p), parent=p, name=_name(name))

    @_posix
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._writable()
        p, newp = self._nn(parent_inode_old), self._nn(parent_inode_new)
        await self.c.fs("rename", self._bucket(p, newp), parent=p, name=_name(name_old), newparent=newp,
                        newname=_name(name_new), flags=flags)

    @_posix
    async def statfs(self, ctx):
        r = await self.c.fs("statfs")
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = r["capacity"] // 4096
        s.f_bfree = s.f_bavail = max(r["capacity"] - r["used"], 0) // 4096
        s.f_files = max(r["files"], 0) + (1 << 32)
        s.f_ffree = s.f_favail = 1 << 32
        s.f_namemax = NAME_MAX
        return s

    # ---------------------------------------------------------------- extended attributes
    # Kept by the NameNode with the inode (namenode/posix.py: user.* of a file are its S3 metadata). The kernel
    # checks names, sizes and permissions first; pyfuse3 does XATTR_CREATE/XATTR_REPLACE with a getxattr. Names and
    # values are bytes, sent as latin-1 text (lossless). The root of the tree of buckets has none. The namespaces
    # the NameNode doesn't keep are refused here without a request: the kernel asks for security.capability
    # before every write() call.
    @_posix
    async def getxattr(self, inode, name, ctx):
        ino = self._nn(inode)
        bucket = self._xattr_bucket(ino, name)
        if bucket is None:
            raise pyfuse3.FUSEError(errno.ENODATA)
        return (await self.c.fs("getxattr", bucket, ino=ino, name=name.decode("latin-1"))).encode("latin-1")

    @_posix
    async def listxattr(self, inode, ctx):
        ino = self._nn(inode)
        bucket = self._bucket(ino)
        names = await self.c.fs("listxattr", bucket, ino=ino) if bucket is not None else []
        return [n.encode("latin-1") for n in names if ctx.uid == 0 or not n.startswith("trusted.")]

    @_posix
    async def setxattr(self, inode, name, value, ctx):
        self._writable()
        ino = self._nn(inode)
        await self.c.fs("setxattr", self._xattr_bucket(ino, name, write=True), ino=ino, name=name.decode("latin-1"),
                        value=value.decode("latin-1"))

    @_posix
    async def removexattr(self, inode, name, ctx):
        self._writable()
        ino = self._nn(inode)
        await self.c.fs("removexattr", self._xattr_bucket(ino, name, write=True), ino=ino, name=name.decode("latin-1"))

    def _xattr_bucket(self, ino: int, name: bytes, write: bool = False) -> str | None:
        """The bucket to ask about attribute `name` of `ino` (None: the tree's root, which has none)."""
        if name.startswith(NOT_KEPT_XATTRS):
            raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
        bucket = self._bucket(ino)
        if bucket is None and write:
            raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
        return bucket

    # ---------------------------------------------------------------- files
    def _open_handle(self, a: dict) -> int:
        fh = next(self._fh)
        self.files[fh] = Handle(a["ino"], a["etag"], a["size"], attr=a)
        return fh

    @_posix
    async def open(self, inode, flags, ctx):
        ino = self._nn(inode)
        if flags & (os.O_WRONLY | os.O_RDWR):
            self._writable()
        a = None
        if flags & os.O_TRUNC:  # libfuse asks the kernel for atomic O_TRUNC: it comes here, not as a setattr
            self._writable()
            a = await self._truncate(ino, 0)
        a = a or await self._getattr(ino)
        keep = self.o.dataset or (self.seen.get(ino) == _version(a) and ino not in self.writers)
        self.seen[ino] = _version(a)
        return pyfuse3.FileInfo(fh=self._open_handle(a), keep_cache=keep)

    @_posix
    async def create(self, parent_inode, name, mode, flags, ctx):
        self._writable()
        p, s = self._nn(parent_inode), _name(name)
        a = await self.c.fs("mknod", self._bucket(p), parent=p, name=s, mode=stat.S_IFREG | stat.S_IMODE(mode),
                            uid=ctx.uid, gid=ctx.gid)
        self._remember(p, s, a)
        self.seen[a["ino"]] = _version(a)
        fh = self._open_handle(a)
        w = self.files[fh].writer = self.writers[a["ino"]] = Writer(self.o.cache_dir, {
            "etag": a["etag"], "blk": [], "size": 0})  # a new file: nothing to ask about its layout
        w.refs += 1
        return pyfuse3.FileInfo(fh=fh), self._entry(a)

    @_posix
    async def read(self, fh, off, size):
        h = self.files[fh]
        w = h.writer or self.writers.get(h.ino)
        if w is not None:
            async with w.lock:
                await self._fill(h.ino, w, w.absent(off, min(off + size, w.size)))
                return os.pread(w.fd, size, off)
        if not self.cache.enabled:
            return await self._read(h.ino, h.etag, off, size, h.size)
        end = min(off + size, h.size)
        if end <= off:
            return b""
        cs = self.o.chunk_size
        first, last = off // cs, (end - 1) // cs
        p = self.parent_of.get(h.ino)
        if self.o.prefetch and p is not None and p not in self.prefetched and self.nursery is not None:
            self.prefetched.add(p)
            self._background(self._prefetch_dir, p)
        # sequential: the read adjoins a recent one. The kernel's readahead sends its reads together and trio may
        # run them in any order, so a sequential reader's read may come before the one it follows.
        seq = any(e == off or s == end for s, e in h.recent)
        self._track_stream(h, off, seq)
        h.recent.append((off, end))
        if not seq and not h.stream:
            h.ahead = last
        elif seq and self.nursery is not None:  # the next `readahead` chunks, each started once
            for i in range(max(last, h.ahead) + 1, min(last + 1 + self.o.readahead, (h.size + cs - 1) // cs)):
                if (h.ino, h.etag, i) not in self.inflight and i not in h.window:
                    self._background(self._chunk, h.ino, h.etag, i, h.size, h.window)
            h.ahead = max(h.ahead, last + self.o.readahead)
        # whether the handle streams is asked again for each chunk: a read that began before its stream was seen
        # would otherwise miss the chunks the stream keeps in its window only, and fetch them again
        pieces = [await self._chunk(h.ino, h.etag, i, h.size, h.window if h.stream else None)
                  for i in range(first, last + 1)]
        data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if h.stream:
            for i in range(first, last + 1):  # a chunk leaves the window once all its bytes were read
                kept = h.window.get(i)
                if kept is not None:
                    kept[1] -= min(end, (i + 1) * cs) - max(off, i * cs)
                    if kept[1] <= 0:
                        del h.window[i]
        return data[off - first * cs: end - first * cs]

    def _track_stream(self, h: Handle, off: int, seq: bool) -> None:
        """Is the handle a stream, reading a large file front to back? Its chunks then go to its window, not to the
        block cache's memory.

        A file larger than the readahead span read front to back is what the kernel's page cache keeps (across
        opens too): keeping its chunks in the block cache as well held every byte twice, and each new byte cost two
        first touches of memory. Measured on the 1 GiB sequential read of bench/mount_bench.py: see the README's
        mount benchmark. So a stream's chunks pass through a window of the handle, dropped once read (or, with a
        disk tier, kept there). Reads of small files and reads at random offsets (shuffled samples in one large
        file) go to the block cache as before: that is where the "none" policy beats the kernel's LRU.

        A handle becomes a stream with a sequential read (see read) and stays one while its reads stay within the
        readahead span of the last one (the kernel's readahead reads, served in any order); a seek elsewhere ends it.
        """
        cs = self.o.chunk_size
        span = (self.o.readahead + 1) * cs
        if h.size <= span:
            return
        if seq:
            h.stream = True
        elif h.stream and (not h.recent or abs(off - h.recent[-1][1]) > span):
            h.stream = False
        if not h.stream:
            h.window.clear()
            return
        for i in [i for i in h.window if (i + 1) * cs < off - span]:  # skipped over: never read whole
            del h.window[i]

    async def _chunk(self, ino: int, etag: str, idx: int, size: int, window: dict[int, list] | None = None) -> bytes:
        """Chunk `idx` of a file version: from the cache, from a fetch already under way, or read (_read). With a
        stream's `window`, a chunk read goes there (and to the cache's disk tier only), not to the memory tier."""
        if window is not None and idx in window:
            return window[idx][0]
        key = (ino, etag, idx)
        pos = self.dir_pos.get(ino) if idx == 0 and self.o.prefetch else None
        if pos is not None and size <= self.o.chunk_size and key not in self.inflight and key not in self.cache:
            await self._fetch_group(pos[0], pos[1] // self.o.prefetch)
        while (f := self.inflight.get(key)) is not None:
            await f.done.wait()
            if f.error is not None:
                raise f.error
            if f.data is not None:
                return self._keep(idx, f.data, window)
        data = self.cache.get(key)
        if data is not None:  # a stream keeps it at hand: each of the chunk's reads would read the disk tier again
            return self._keep(idx, data, window)
        f = self.inflight[key] = _Fetch()
        try:
            f.data = await self._read(ino, etag, idx * self.o.chunk_size, self.o.chunk_size, size)
            self.cache.put(key, f.data, memory=window is None)
            return self._keep(idx, f.data, window)
        except BaseException as e:
            f.error = e
            raise
        finally:
            del self.inflight[key]
            f.done.set()

    @staticmethod
    def _keep(idx: int, data: bytes, window: dict[int, list] | None) -> bytes:
        """`data`, chunk `idx`, also put in a stream's window (with all its bytes still to be read)."""
        if window is not None and data:
            window.setdefault(idx, [data, len(data)])
        return data

    async def _read(self, ino: int, etag: str, off: int, n: int, size: int) -> bytes:
        """Bytes [off, off + n) of version `etag` of a file of `size` bytes (short at its end), straight from the
        DataNodes where the mount knows where they are (_plan); else, and when that fails, through the gateway.
        A DataNode that can't be reached sends reads through the gateway for DIRECT_RETRY_S; a refused token or a
        bad replica sends this one read there (it falls back over replicas and repairs)."""
        bucket = self._bucket(ino)
        if time.monotonic() >= self.direct_after:
            try:
                plan = await self._plan(bucket, ino, etag, off, off + n, size)
                if plan is not None:
                    pieces = plan.within(off, off + n)
                    if not pieces:
                        return b""
                    got = await self.c.read_pieces(pieces, plan.addrs, plan.grant)
                    return got[0] if len(got) == 1 else b"".join(got)
            except errors.Unavailable as e:
                self._direct_failed(e)
            except (errors.DomainError, PieceFailed):
                self.plans.pop(ino, None)
        return await self.c.fs_read(bucket, ino, off, n)

    def _direct_failed(self, e: Exception) -> None:
        log.warning("reading from the DataNodes failed, through the gateway for %.0f s: %s", DIRECT_RETRY_S, e)
        self.direct_after = time.monotonic() + DIRECT_RETRY_S

    async def _plan(self, bucket: str, ino: int, etag: str, off: int, end: int, size: int) -> _Plan | None:
        """Where bytes [off, end) of the file are, or None when the gateway should read them.

        A large file is located LOCATE_SPAN at a time: one request for many block reads. A small file on its own
        is not worth a locate (a gateway read is one request too), but in dataset mode its directory is located
        LOCATE_FILES files at a time, so that an epoch's reads of small files cost one DataNode call each and no
        request to the gateway. Measured with bench/mount_bench.py, see the README's mount benchmark."""
        plan = self.plans.get(ino)
        if plan is not None and plan.covers(etag, off, end):
            return plan
        p = self.parent_of.get(ino)
        if size <= self.o.chunk_size:
            if p is None or p not in self.listings or p not in self.keys:
                return None
            await self._locate_dir(bucket, p, ino)
        else:
            # the readahead's fetches start together: one locates, the others wait for it, and locate themselves
            # (one at a time again) only if its answer doesn't cover their bytes
            while (plan := self.plans.get(ino)) is None or not plan.covers(etag, off, end):
                ev = self.locating.get(ino)
                if ev is not None:
                    await ev.wait()
                    continue
                ev = self.locating[ino] = trio.Event()
                try:
                    r = await self.c.fs_locate(bucket, ino, off, LOCATE_SPAN)
                    self._keep_plan(ino, r["etag"], r["size"], off, r["p"], r["addrs"], r["grant"])
                finally:
                    del self.locating[ino]
                    ev.set()
                break
        plan = self.plans.get(ino)
        return plan if plan is not None and plan.covers(etag, off, end) else None

    def _keep_plan(self, ino: int, etag: str, size: int, off: int, pieces: list, addrs: dict, grant: dict) -> None:
        starts, pos = [], off
        for p in pieces:
            starts.append(pos)
            pos += p[2]
        if len(self.plans) >= MAX_PLANS:
            del self.plans[next(iter(self.plans))]
        self.plans[ino] = _Plan(etag.strip('"'), size, off, min(off + LOCATE_SPAN, size), starts, pieces, addrs,
                                grant)

    async def _locate_dir(self, bucket: str, p: int, ino: int) -> None:
        """Dataset mode: locate the page of LOCATE_FILES entries of directory `p` that holds file `ino`, once
        (concurrent readers of the page wait for the one locate)."""
        listing = self.listings[p]
        page = (p, self.dir_pos.get(ino, (p, 0))[1] // LOCATE_FILES)
        ev = self.locating.get(page)
        if ev is not None:
            await ev.wait()
            return
        ev = self.locating[page] = trio.Event()
        try:
            files = [(n, a) for n, a in listing[page[1] * LOCATE_FILES:(page[1] + 1) * LOCATE_FILES]
                     if stat.S_ISREG(a["mode"]) and a["size"] <= self.o.chunk_size]
            r = await self.c.locate([(bucket, self.keys[p] + n, None, None) for n, _ in files])
            for (_, a), meta in zip(files, r["items"]):
                if "p" in meta:
                    self._keep_plan(a["ino"], meta["etag"], meta["size"], 0, meta["p"], r["addrs"], r["grant"])
        finally:
            del self.locating[page]
            ev.set()

    async def _prefetch_dir(self, p: int) -> None:
        """Dataset mode: fetch the small files of directory `p` group by group (_fetch_group) while the cache keeps
        them without evicting anything."""
        for g in range(0, -(-len(self.listings.get(p, ())) // self.o.prefetch)):
            async with self.batches:
                if not await self._fetch_group(p, g):
                    return

    async def _fetch_group(self, p: int, g: int) -> bool:
        """Dataset mode: fetch group `g` of directory `p` (its entries g*prefetch to (g+1)*prefetch) in one batch:
        the files that fit in one chunk and are neither cached nor on their way. A read that misses the cache
        fetches its file's group, not the file alone: a shuffled epoch reads the others soon, and one DataNode call
        per node for `prefetch` files costs far less than one per file. False when the cache has no room for them.
        """
        bucket = self._bucket(p)
        if bucket is None or p not in self.keys:
            return False
        n = self.o.prefetch
        todo = [a for _, a in self.listings[p][g * n:(g + 1) * n]
                if stat.S_ISREG(a["mode"]) and 0 < a["size"] <= self.o.chunk_size
                and (a["ino"], a["etag"], 0) not in self.inflight and (a["ino"], a["etag"], 0) not in self.cache]
        if not todo:
            return True
        if not self.cache.has_room(sum(a["size"] for a in todo)):
            return False
        await self._fetch_batch(bucket, todo)
        return True

    async def _fetch_batch(self, bucket: str, todo: list[dict]) -> None:
        """Read whole small files (their attributes) into the cache, one DataNode call per node and read token; a
        reader of one of them waits for it instead of asking. What can't be had directly is left to the readers."""
        keys = [(a["ino"], a["etag"], 0) for a in todo]
        fetches = [self.inflight.setdefault(k, _Fetch()) for k in keys]
        try:
            groups: dict[int, tuple[_Plan, list[int]]] = {}
            for i, a in enumerate(todo):
                plan = await self._plan(bucket, a["ino"], a["etag"], 0, a["size"], a["size"])
                if plan is not None:
                    groups.setdefault(id(plan.grant), (plan, []))[1].append(i)

            async def read_group(plan: _Plan, idx: list[int]) -> None:
                wanted = [self.plans[todo[i]["ino"]].within(0, todo[i]["size"]) for i in idx]
                got = iter(await self.c.read_pieces([q for w in wanted for q in w], plan.addrs, plan.grant))
                for i, w in zip(idx, wanted):
                    data = next(got) if len(w) == 1 else b"".join([next(got) for _ in w])
                    if len(data) == todo[i]["size"]:
                        self.cache.put(keys[i], data)
                        fetches[i].data = data

            async with trio.open_nursery() as n:
                for plan, idx in groups.values():
                    n.start_soon(read_group, plan, idx)
        except errors.Unavailable as e:
            self._direct_failed(e)
        except Exception:  # the readers fetch their files themselves; a background task must not end the mount
            log.exception("prefetch into the cache failed")
        finally:
            for k, f in zip(keys, fetches):
                self.inflight.pop(k, None)
                f.done.set()

    def _background(self, fn, *args) -> None:
        """Run speculative work (readahead, directory prefetch) in the mount's nursery. Its failures are the
        readers' to meet: they fetch the same bytes themselves and get the error; a bug in it is logged, for an
        exception out of a nursery task would end pyfuse3.main() and with it the mount."""
        async def guarded() -> None:
            try:
                await fn(*args)
            except (errors.DomainError, PieceFailed, OSError):
                pass
            except Exception:
                log.exception("background %s%r failed", fn.__name__, args)
        self.nursery.start_soon(guarded)

    async def _writer(self, ino: int) -> Writer:
        """The file's local copy; made empty, knowing only where the current version's blocks are."""
        w = self.writers.get(ino)
        if w is not None:
            return w
        layout = await self.c.fs("layout", self._bucket(ino), ino=ino)
        w = self.writers.get(ino)  # another call may have made one meanwhile
        if w is None:
            w = self.writers[ino] = Writer(self.o.cache_dir, layout)
        return w

    async def _fill(self, ino: int, w: Writer, blocks: list[int]) -> None:
        """Fetch blocks of the writer's base version into its local copy (the caller holds w.lock)."""
        for i in blocks:
            start, n = w.starts[i], w.starts[i + 1] - w.starts[i]
            data = await self.c.fs_read(self._bucket(ino), ino, start, n)
            if len(data) != n:  # the file was replaced meanwhile: its commit would be refused anyway
                raise _replaced(ino)
            os.pwrite(w.fd, data, start)
            w.state[i] = CLEAN

    def _drop_writer(self, ino: int, w: Writer) -> None:
        if self.writers.get(ino) is w:
            del self.writers[ino]
        w.file.close()

    @_posix
    async def write(self, fh, off, buf):
        h = self.files[fh]
        if off + len(buf) > MAX_FILE_SIZE:
            raise pyfuse3.FUSEError(errno.EFBIG)
        if h.writer is None:
            h.writer = await self._writer(h.ino)
            h.writer.refs += 1
        w = h.writer
        async with w.lock:
            await self._fill(h.ino, w, w.partly(off, off + len(buf)))
            os.pwrite(w.fd, buf, off)
            w.wrote(off, off + len(buf))
            w.touched()
        return len(buf)

    async def _upload(self, ino: int, w: Writer) -> dict | None:
        """Commit the local copy's unsaved changes, sending only what changed; returns the new attributes."""
        async with w.lock:
            if not w.dirty:
                return None
            layout, extents = w.layout()

            async def pieces():
                for start, n in extents:
                    for pos in range(start, start + n, UPLOAD_PIECE):
                        yield os.pread(w.fd, min(UPLOAD_PIECE, start + n - pos), pos)

            bucket = self.bucket_of.get(ino) or self.o.bucket
            if bucket is None:
                raise errors.Unavailable(f"bucket of inode {ino} unknown")
            try:
                a = await self.c.fs_write(bucket, ino, layout, pieces())
            except errors.PreconditionFailed:  # the NameNode refused the base version (namenode/posix.py commit)
                raise _replaced(ino) from None
            w.committed(a["etag"], a.pop("layout"), a.pop("bs"))
        self.cache.drop(ino)
        return self._changed(a)

    def _changed(self, a: dict) -> dict:
        """This mount changed a file's content: its open handles read the new version (a read short of the size
        the kernel knows would make the kernel shrink the file), and the kernel's pages, which already hold what
        was written, are kept at the next open."""
        for h in self.files.values():
            if h.ino == a["ino"]:
                h.etag, h.size = a["etag"], a["size"]
        self.seen[a["ino"]] = _version(a)
        return a

    @_posix
    async def flush(self, fh):
        if self.o.read_only:  # nothing to flush, ever: ENOSYS makes the kernel stop sending FLUSH at every close
            raise pyfuse3.FUSEError(errno.ENOSYS)
        h = self.files[fh]
        if h.writer is not None:
            await self._upload(h.ino, h.writer)

    @_posix
    async def fsync(self, fh, datasync):
        await self.flush.__wrapped__(self, fh)

    @_posix
    async def release(self, fh):
        h = self.files.pop(fh)
        w = h.writer
        if w is None:
            return
        w.refs -= 1
        try:
            if w.dirty:
                await self._upload(h.ino, w)
        except errors.DomainError as e:
            log.error("inode %s: unsaved changes lost at close: %s", h.ino, e)
        finally:
            if w.refs == 0:
                self._drop_writer(h.ino, w)

    async def close(self) -> None:
        await self.c.close()
