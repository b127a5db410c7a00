"""pyfuse3 operations over the gateway's inode API (/_epochfs/fs, see gateway/s3/posix.py).

This class only translates pyfuse3's calls to the mount's parts and maps their errors to errnos (frontends/errmap.py):
the inode table (inodes.py), the read path with its cache, locates, prefetch and stream window (reader.py), and the
write path, local copies committed at flush/fsync/close (writer.py). Permissions are checked by the kernel
(default_permissions) from the mode/uid/gid we report.

Consistency is close-to-open. open() revalidates the attributes and keeps the kernel's page cache when the file is
unchanged (same mtime, size and ETag as at the last open); once close() returns the new content is durable and
visible through S3. In dataset mode the tree is taken as immutable (every attribute, name and listing is fetched once
and trusted for the life of the mount) and the mount is read-only.
"""
from __future__ import annotations

import errno
import functools
import itertools
import logging
import hashlib
import os
import stat
import time

import pyfuse3
import trio

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.client import S3Client

from .. import errmap
from .inodes import NN_ROOT, InodeTable
from .options import MountOptions
from .reader import Handle, Reader
from .writer import MAX_FILE_SIZE, Writes

log = logging.getLogger("epochfs.mount")

NAME_MAX = 255
ADOPT_AFTER = 8  # lookups of missing names in a folder within entry_timeout before the mount keeps its names too
ADOPT_MAX_NAMES = 2000  # a larger folder is not kept: renewing its names twice a second would cost more than the
# lookups it saves (an fs_dirs of 2,000 names: ~4 ms of gateway and NameNode CPU and 0.9 ms of the client's, about
# 8 lookups' worth; kept at all, the folder is being probed 8 times a second or more)
ADOPT_RETRY_S = 60.0  # a folder found too large to keep is not tried again for this long
FOREVER = 365 * 86400.0
NOT_KEPT_XATTRS = (b"security.", b"system.")  # attribute namespaces namenode/posix.py refuses (EOPNOTSUPP)
EMPTY_ETAG = f'"{hashlib.md5(b"").hexdigest()}"'
RENAME_EXCHANGE = 2


def _posix(fn):
    """Domain errors become the errno errmap gives them (its one table); a failing local write buffer gives its own
    errno; anything else is logged and is EIO."""
    @functools.wraps(fn)
    async def wrapper(self, *args):
        try:
            return await fn(self, *args)
        except errors.DomainError as e:
            raise pyfuse3.FUSEError(errmap.to_errno(e)) from None
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


class Listed:
    """The names in a directory this mount made (or looked up many missing names in: `_missed`), from its making or a
    listing at `at` (monotonic), each with its inode if it is a subdirectory (None: a file, or a name made or
    changed here since).

    They answer lookups of names that don't exist (and of subdirectories, with the attributes kept of them) for
    entry_timeout after the listing, as the kernel's own entries are trusted, without a round trip: unpacking an
    archive into new folders costs per file its create and its commit, not a lookup before each. A name made
    elsewhere in that time can be missed, as a kernel entry would miss it; a create that meets it learns it (EEXIST
    for O_EXCL, else the kernel looks it up again and opens it: `create`)."""
    __slots__ = ("at", "names")

    def __init__(self, at: float, names: dict[str, int | None]) -> None:
        self.at, self.names = at, names


def _version(a: dict) -> tuple:
    return a["mt"], a["size"], a["etag"]


class EpochOperations(pyfuse3.Operations):
    def __init__(self, client: S3Client, opts: MountOptions) -> None:
        super().__init__()
        self.c, self.o = client, opts
        self.inodes = InodeTable(client, opts)
        self.reader = Reader(client, opts, self.inodes)
        self.writes = Writes(client, opts, self.inodes, self.reader.cache)
        self.timeouts = (FOREVER, FOREVER) if opts.dataset else (opts.entry_timeout, opts.attr_timeout)
        self.files: dict[int, Handle] = {}
        self.dirs: dict[int, list] = {}
        self.seen: dict[int, tuple] = {}                 # file version at its last open (keep_cache)
        self.dir_attrs: dict[int, dict] = {}             # the last attributes seen of each directory
        self.dir_seen: dict[int, float] = {}             # when (monotonic), trusted for attr_timeout
        self.known: dict[int, Listed] = {}               # the names in each directory made here (Listed)
        self.dir_changed: dict[int, float] = {}          # when this mount last changed each directory
        self.using: set[int] = set()                     # directories used since the last renewal (_renewer)
        self._renewing = False
        self._inflight: dict[int, trio.Event] = {}       # directories being renewed, until answered
        self._misses: dict[int, tuple[int, float]] = {}  # lookups of missing names in a folder, since when (_missed)
        self._unkept: dict[int, float] = {}              # folders whose names are not to be kept, until when
        self._fh = itertools.count(1)

    @property
    def nursery(self) -> trio.Nursery | None:
        """The mount's nursery (mount.py sets it), where the reader runs readahead and prefetch."""
        return self.reader.nursery

    @nursery.setter
    def nursery(self, nursery: trio.Nursery | None) -> None:
        self.reader.nursery = self.writes.nursery = nursery

    async def start(self) -> None:
        """Find the mount's root: the tree of buckets, a bucket, or a directory below one."""
        await self.inodes.start()

    # ---------------------------------------------------------------- inodes and attributes
    def _saw_dir(self, a: dict, at: float) -> None:
        """Directory attributes `a` as the NameNode had them at `at` (monotonic), unless newer are known. They answer
        getattr for attr_timeout, as the kernel's own cache would: a create here makes the kernel drop the folder's
        attributes and ask again before the next name's lookup (its permission check), and tar creates file after
        file (a round trip per file, with the NameNode counting the folder's subdirectories each time)."""
        if at >= self.dir_seen.get(a["ino"], -1.0):
            if len(self.dir_attrs) > 100_000:
                self.dir_attrs.clear()
                self.dir_seen.clear()
            self.dir_attrs[a["ino"]], self.dir_seen[a["ino"]] = a, at

    def _kept_dir(self, ino: int) -> dict | None:
        """The attributes kept of directory `ino`, while attr_timeout trusts them."""
        a = self.dir_attrs.get(ino)
        return a if a is not None and time.monotonic() - self.dir_seen.get(ino, -1e9) <= self.o.attr_timeout else None

    def _entry(self, a: dict, cached: bool = False, seen_at: float | None = None) -> pyfuse3.EntryAttributes:
        """`seen_at`: when (monotonic) the NameNode gave attributes kept here: the kernel keeps them only for what
        is left of attr_timeout, so none is older than that when it uses it."""
        e = pyfuse3.EntryAttributes()
        e.st_ino = self.inodes.fuse(a["ino"])
        e.generation = 0
        e.entry_timeout, e.attr_timeout = self.timeouts
        if seen_at is not None:
            e.attr_timeout = max(0.0, e.attr_timeout - (time.monotonic() - seen_at))
        e.st_mode, e.st_nlink, e.st_uid, e.st_gid, e.st_rdev = a["mode"], a["nlink"], a["uid"], a["gid"], a["rdev"]
        e.st_atime_ns, e.st_mtime_ns, e.st_ctime_ns = a["at"], a["mt"], a["ct"]
        if not cached and not self.o.dataset and stat.S_ISDIR(a["mode"]):
            self._saw_dir(a, time.monotonic())
        size = a["size"]
        w = self.writes.of(a["ino"])
        if w is not None:  # unsaved writes: the kernel must see the local size and time
            size = w.size
            if w.pending:  # and the chmod/chown/atime to be sent with them
                p = w.pending
                e.st_mode, e.st_uid, e.st_gid = p.get("mode", e.st_mode), p.get("uid", e.st_uid), p.get("gid", e.st_gid)
                e.st_atime_ns, e.st_ctime_ns = p.get("at", e.st_atime_ns), max(e.st_ctime_ns, w.attr["ct"])
            if w.mtime_set:
                e.st_mtime_ns = w.mtime_ns
            elif w.dirty:
                e.st_mtime_ns = e.st_ctime_ns = max(w.mtime_ns, a["mt"])
        e.st_size = size
        # st_blksize (`--blksize`, 1 MiB): the largest write the kernel sends (FUSE's max_write with libfuse 3), what
        # writers size their buffers by: cp (coreutils) writes max(128 KiB, st_blksize) at a time, Python's open()
        # and stdio buffer st_blksize. Each request costs the mount about as much as its bytes: `cp` of a 512 MiB
        # file, 1 MiB against 4096 (cp's 128 KiB), 2 pairs: 231-275 against 192-201 MiB/s, mount 1.17-1.45 against
        # 2.11-2.19 ms of CPU per MiB. fsstress copies to up to 1,024 x st_blksize past EOF: its holes go as their
        # sizes (writer.py _zero_runs) and the DataNodes keep blocks of zeros as metadata, so `fsstress -n 1000 -p
        # 2` runs 35 s and leaves 3.6 GB on the disk with 1 MiB (44 GB when holes were stored as zeros; 15 s and
        # 168 MB with 4096); readers gain nothing from it (the kernel's readahead, mount.py, sets the size of the
        # reads that reach the mount).
        e.st_blksize = self.o.blksize
        e.st_blocks = (size + 511) // 512
        return e

    def _writable(self) -> None:
        if self.o.read_only:
            raise pyfuse3.FUSEError(errno.EROFS)

    # ---------------------------------------------------------------- metadata
    @_posix
    async def lookup(self, parent_inode, name, ctx=None):
        s, p = _name(name), self.inodes.nn(parent_inode)
        if self.o.dataset:  # one listing answers every lookup in the directory, now and in every later epoch
            if p not in self.inodes.listings:
                for child, a in await self.inodes.listing(p):
                    self.inodes.remember(p, child, a)
            ino = self.inodes.names.get((p, s))
            if ino is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._entry(self.inodes.attrs[ino])
        w = self.writes.named(p, s)
        if w is not None:  # made here, not yet on the NameNode (write-back)
            return self._entry(w.attr)
        k = await self._listed(p) if p in self.known else None
        if k is not None:
            if s not in k.names:
                raise pyfuse3.FUSEError(errno.ENOENT)
            sub = k.names[s]
            if sub is not None and self._kept_dir(sub) is None:
                await self._wait_renewal(sub)
            a = self._kept_dir(sub) if sub is not None else None
            if a is not None:
                self._use(sub)  # a directory: its attributes as last renewed
                self.inodes.remember(p, s, a)
                return self._entry(a, cached=True, seen_at=self.dir_seen.get(sub))
        try:
            a = await self.c.fs_lookup(s if p == NN_ROOT else self.inodes.bucket(p), parent=p, name=s)
        except errors.NotFound:
            await self._missed(p)
            raise
        self.inodes.remember(p, s, a)
        return self._entry(a)

    async def _missed(self, p: int) -> None:
        """A lookup in `p` found no such name. After ADOPT_AFTER of those within entry_timeout (files being made in a
        folder made elsewhere, or before this mount; a search path being probed) the mount keeps the folder's names
        as it does for the folders it makes (Listed): one fs_dirs request, then none per lookup."""
        now = time.monotonic()
        if self.o.entry_timeout <= 0 or p == NN_ROOT or p in self.known or self.inodes.bucket(p) is None \
                or now < self._unkept.get(p, 0.0):
            return
        n, since = self._misses.get(p, (0, now))
        if now - since > self.o.entry_timeout:
            n, since = 0, now
        if n + 1 < ADOPT_AFTER:
            if len(self._misses) > 10_000:
                self._misses.clear()
            self._misses[p] = (n + 1, since)
            return
        self._misses.pop(p, None)
        self.known[p] = Listed(-1e9, {})  # what the listing below brings (_renewed keeps names made meanwhile)
        try:
            await self._renew([p])
        except Exception as e:  # noqa: BLE001 -- not kept: lookups ask the NameNode, as before
            log.debug("names of directory %s not kept: %r", p, e)
        k = self.known.get(p)
        if k is None or k.at < 0 or len(k.names) > ADOPT_MAX_NAMES:  # gone, not listed, or too many names to keep
            self.known.pop(p, None)
            if len(self._unkept) > 10_000:
                self._unkept.clear()
            self._unkept[p] = time.monotonic() + ADOPT_RETRY_S

    async def _listed(self, p: int) -> Listed | None:
        """The names kept of directory `p` (Listed). They answer lookups for entry_timeout after
        the listing they come from, as the kernel's own entries would (a name made elsewhere in that time may be
        missed). While the directory is in use its listing is renewed in the background (_renewer), and here if it
        is older. A name kept here that is gone only costs a lookup. None: no longer kept (the directory is gone, or
        now has too many names), the NameNode answers."""
        self._use(p)
        k = self.known[p]
        if time.monotonic() - k.at > self.o.entry_timeout:
            await self._wait_renewal(p)  # one under way: its answer (a loaded machine's are slow)
            if self.known.get(p) is k:
                await self._renew([p])
        return self.known.get(p)

    async def _wait_renewal(self, ino: int) -> None:
        ev = self._inflight.get(ino)
        if ev is not None:
            await ev.wait()

    def _use(self, ino: int) -> None:
        """Directory `ino` (its names or attributes) is in use: renew them in the background."""
        self.using.add(ino)
        if not self._renewing and self.nursery is not None:
            self._renewing = True
            self.nursery.start_soon(self._renewer)

    async def _renewer(self) -> None:
        """Every half timeout, the names and attributes of the directories used since the last round,
        in one request per FsDirs' 256 (a request per directory and period was most of the cluster's work during
        an unpack into many directories); ends after a round with none in use."""
        try:
            while True:
                period = max(min(self.o.entry_timeout, self.o.attr_timeout), 0.1) / 2  # (a 0 timeout: no busy loop)
                await trio.sleep_until(trio.current_time() + period)
                todo, self.using = self.using, set()
                if not todo:
                    return
                try:
                    await self._renew(sorted(todo))
                except Exception as e:  # noqa: BLE001 -- the gateway away: lookups renew (or fail) themselves
                    log.debug("directories not renewed: %r", e)
        finally:
            self._renewing = False

    async def _renew(self, inos: list[int]) -> None:
        """The names and attributes of directories `inos` (of one bucket or more) from the NameNode."""
        by_bucket: dict[str, list[int]] = {}
        for ino in inos:
            bucket = self.inodes.bucket(ino)
            if bucket is not None:
                by_bucket.setdefault(bucket, []).append(ino)
            else:
                self.known.pop(ino, None)
        for bucket, group in by_bucket.items():
            for i in range(0, len(group), 256):
                part = group[i:i + 256]
                before = {p: set(self.known[p].names) for p in part if p in self.known}
                at, ev = time.monotonic(), trio.Event()
                for p in part:
                    self._inflight[p] = ev
                try:
                    for d in await self.c.fs_dirs(bucket, part):
                        self._renewed(d, at, before.get(d.ino))
                finally:
                    for p in part:
                        if self._inflight.get(p) is ev:
                            del self._inflight[p]
                    ev.set()

    def _renewed(self, d, at: float, before: set[str] | None) -> None:
        p = d.ino
        if d.attr is None:  # gone, or no longer a directory of the bucket
            self.known.pop(p, None)
            self.dir_attrs.pop(p, None)
            self.dir_seen.pop(p, None)
            return
        if self.dir_changed.get(p, -1.0) < at:  # (not changed here while the answer was on its way)
            self._saw_dir(m.to_builtins(d.attr), at)
        k = self.known.get(p)
        if k is None or before is None:
            return
        if d.names is None:  # too many to keep: lookups ask the NameNode
            del self.known[p]
            return
        names: dict[str, int | None] = {}
        for n, ino in zip(d.names, d.inos):
            if n.endswith("/"):
                names[n[:-1]] = ino
            else:
                names[n] = None
        for (pp, n) in self.writes.names:
            if pp == p:
                names.setdefault(n, None)
        names.update({n: k.names[n] for n in set(k.names) - before})  # made here meanwhile
        self.known[p] = Listed(at, names)

    def _attrs_moved(self) -> None:
        """A change whose reply does not give every attribute it changed (a link, unlink or rename changes the
        file's or folder's ctime and link count, an xattr its ctime): the attributes kept to answer getattr here
        (folders', files' being written) are fetched again."""
        self.dir_seen.clear()
        self.writes.forget_attrs()

    def _changed_dir(self, p: int, add: str | None = None, drop: str | None = None, t: int | None = None) -> None:
        """Directory `p` changed through this mount: its attributes are fetched again (`t`: a file, symlink or link
        made in it at NameNode time `t`, which is all that changed: its mtime and ctime, kept), its names kept."""
        a = self._kept_dir(p) if t is not None else None
        if a is not None:
            self.dir_attrs[p] = {**a, "mt": t, "ct": t}
        else:
            self.dir_seen.pop(p, None)
        if len(self.dir_changed) > 100_000:
            self.dir_changed.clear()
        self.dir_changed[p] = time.monotonic()
        k = self.known.get(p)
        if k is not None:
            if add is not None:
                k.names[add] = None
            if drop is not None:
                k.names.pop(drop, None)

    @_posix
    async def getattr(self, inode, ctx=None):
        ino = self.inodes.nn(inode)
        if self.writes.made_here:
            w = self.writes.made_here.get(ino)
            if w is not None:
                return self._entry(w.attr)
        w = self.writes.of(ino)
        if w is not None and w.attr is not None and time.monotonic() - w.attr_at <= self.o.attr_timeout:
            # created here and being written: the kernel dropped its attributes at a write
            return self._entry(w.attr, seen_at=w.attr_at)
        try:
            a = self._kept_dir(ino)
            cached = a is not None
            if not cached and ino in self._inflight:  # being renewed: its answer, sent since they went stale
                seen = self.dir_seen.get(ino)
                await self._wait_renewal(ino)
                a = self.dir_attrs.get(ino)
                cached = a is not None and self.dir_seen.get(ino) != seen
            seen_at = self.dir_seen.get(ino) if cached else None
            if not cached:
                a = await self.inodes.getattr(ino)
            if self.o.writeback and stat.S_ISDIR(a["mode"]):
                self._use(ino)
            t = self.writes.made_in(ino, self.dir_seen.get(ino)) \
                if (self.writes.made_here or self.writes.created_in) and stat.S_ISDIR(a["mode"]) else 0
            if t > a["mt"]:  # files made here since: the directory changed then (the NameNode stamps their create)
                a, cached = {**a, "mt": t, "ct": max(t, a["ct"])}, True
            return self._entry(a, cached, seen_at)
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
        ino = self.inodes.nn(inode)
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
        w = self.writes.of(ino)
        if w is not None and args and not fields.update_size:
            a = self.writes.defer(w, dict(args))
            if a is not None:
                return self._entry(a)
        if w is not None and w.new is not None:  # write-back: the NameNode makes this change, once it has the file
            await self.writes.settle(w)
        if w is not None and "mt" in args:
            await self.writes.set_mtime(w, attr.st_mtime_ns)
        a = None
        if fields.update_size:
            if attr.st_size > MAX_FILE_SIZE:
                raise pyfuse3.FUSEError(errno.EFBIG)
            a = self._changed(await self.writes.truncate(ino, attr.st_size))
        if args or a is None:
            if w is not None:  # sent now, after what was deferred: the commit must not set it back
                for k in args:
                    w.pending.pop(k, None)
            a = await self.c.fs_setattr(self.inodes.bucket(ino), ino=ino, fields=args)
        if w is not None and w.attr is not None:  # what a later deferred change answers with, not the old mode
            w.known(a)
        return self._entry(a)

    @_posix
    async def readlink(self, inode, ctx):
        ino = self.inodes.nn(inode)
        return (await self.c.fs_readlink(self.inodes.bucket(ino), ino=ino)).encode("latin-1")

    @_posix
    async def opendir(self, inode, ctx):
        fh = next(self._fh)
        self.dirs[fh] = [self.inodes.nn(inode), None]
        return fh

    @_posix
    async def readdir(self, fh, start_id, token):
        d = self.dirs[fh]
        if d[1] is None:
            if self.writes.made_here:
                await self.writes.settle_all(d[0])
            d[1] = await self.inodes.listing(d[0])
        for i in range(start_id, len(d[1])):
            name, a = d[1][i]
            self.inodes.remember(d[0], name, a)
            if not pyfuse3.readdir_reply(token, name.encode(), self._entry(a), i + 1):
                return

    async def releasedir(self, fh):
        self.dirs.pop(fh, None)

    @_posix
    async def mkdir(self, parent_inode, name, mode, ctx):
        self._writable()
        p, s = self.inodes.nn(parent_inode), _name(name)
        a = await self.c.fs_mkdir(self.inodes.bucket(p), parent=p, name=s, mode=mode, uid=ctx.uid, gid=ctx.gid)
        self.inodes.remember(p, s, a)
        self._changed_dir(p, add=s)  # (its link count too: not only its times)
        if p in self.known:
            self.known[p].names[s] = a["ino"]
        if self.o.entry_timeout > 0:  # empty now: its names answer lookups from here on (Listed)
            if len(self.known) > 100_000:
                self.known.clear()
            self.known[a["ino"]] = Listed(time.monotonic(), {})
        return self._entry(a)

    @_posix
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        self._writable()
        p, s = self.inodes.nn(parent_inode), _name(name)
        a = await self.c.fs_mknod(self.inodes.bucket(p), parent=p, name=s, mode=mode, uid=ctx.uid, gid=ctx.gid,
                                  rdev=rdev)
        self.inodes.remember(p, s, a)
        self._changed_dir(p, add=s, t=a["ct"])
        return self._entry(a)

    @_posix
    async def symlink(self, parent_inode, name, target, ctx):
        self._writable()
        p, s = self.inodes.nn(parent_inode), _name(name)
        a = await self.c.fs_symlink(self.inodes.bucket(p), parent=p, name=s, target=target.decode("latin-1"),
                                    uid=ctx.uid, gid=ctx.gid)
        self.inodes.remember(p, s, a)
        self._changed_dir(p, add=s, t=a["ct"])
        return self._entry(a)

    @_posix
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self._writable()
        p, s, ino = self.inodes.nn(new_parent_inode), _name(new_name), self.inodes.nn(inode)
        await self._settle(ino)
        a = await self.c.fs_link(self.inodes.bucket(p, ino), ino=ino, parent=p, name=s)
        self.inodes.remember(p, s, a)
        self._attrs_moved()
        self._changed_dir(p, add=s, t=a["ct"])
        return self._entry(a)

    @_posix
    async def unlink(self, parent_inode, name, ctx):
        self._writable()
        p = self.inodes.nn(parent_inode)
        await self._settle_name(p, _name(name))
        t = await self.c.fs_unlink(self.inodes.bucket(p), parent=p, name=_name(name))
        # the file's link count and ctime moved (a file being written here has its attributes fetched again); of
        # the folders only the parent changed, its mtime and ctime now t: kept, so the getattr the kernel sends
        # after each unlink (it drops the folder's attributes) needs no request (rm -rf: one of three per file)
        self.writes.forget_attrs()
        self._changed_dir(p, drop=_name(name), t=t or None)

    @_posix
    async def rmdir(self, parent_inode, name, ctx):
        self._writable()
        p = self.inodes.nn(parent_inode)
        if self.writes.made_here:  # the directory may hold files made here
            await self.writes.settle_all()
        await self.c.fs_rmdir(self.inodes.bucket(p), parent=p, name=_name(name))
        self._attrs_moved()
        self._changed_dir(p, drop=_name(name))

    @_posix
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        self._writable()
        p, newp = self.inodes.nn(parent_inode_old), self.inodes.nn(parent_inode_new)
        await self._settle_name(p, _name(name_old))
        await self._settle_name(newp, _name(name_new))
        await self.c.fs_rename(self.inodes.bucket(p, newp), parent=p, name=_name(name_old), newparent=newp,
                               newname=_name(name_new), flags=flags)
        self._attrs_moved()
        self._changed_dir(p, drop=None if flags & RENAME_EXCHANGE else _name(name_old))
        self._changed_dir(newp, add=_name(name_new))

    @_posix
    async def statfs(self, ctx):
        r = await self.c.fs_statfs()
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
        ino = self.inodes.nn(inode)
        bucket = self._xattr_bucket(ino, name)
        await self._settle(ino)
        if bucket is None:
            raise pyfuse3.FUSEError(errno.ENODATA)
        return (await self.c.fs_getxattr(bucket, ino=ino, name=name.decode("latin-1"))).encode("latin-1")

    @_posix
    async def listxattr(self, inode, ctx):
        ino = self.inodes.nn(inode)
        bucket = self.inodes.bucket(ino)
        await self._settle(ino)
        names = await self.c.fs_listxattr(bucket, ino=ino) if bucket is not None else []
        return [n.encode("latin-1") for n in names if ctx.uid == 0 or not n.startswith("trusted.")]

    @_posix
    async def setxattr(self, inode, name, value, ctx):
        self._writable()
        ino = self.inodes.nn(inode)
        await self._settle(ino)
        await self.c.fs_setxattr(self._xattr_bucket(ino, name, write=True), ino=ino, name=name.decode("latin-1"),
                                 value=value.decode("latin-1"))
        self._attrs_moved()

    @_posix
    async def removexattr(self, inode, name, ctx):
        self._writable()
        ino = self.inodes.nn(inode)
        await self._settle(ino)
        await self.c.fs_removexattr(self._xattr_bucket(ino, name, write=True), ino=ino, name=name.decode("latin-1"))
        self._attrs_moved()

    async def _settle(self, ino: int) -> None:
        """Write-back: the file exists on the NameNode before an operation that needs it there."""
        w = self.writes.made_here.get(ino)
        if w is not None:
            await self.writes.settle(w)

    async def _settle_name(self, parent: int, name: str) -> None:
        w = self.writes.named(parent, name)
        if w is not None:
            await self.writes.settle(w)

    def _xattr_bucket(self, ino: int, name: bytes, write: bool = False) -> str | None:
        """The bucket to ask about attribute `name` of `ino` (None: the tree's root, which has none)."""
        if name.startswith(NOT_KEPT_XATTRS):
            raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
        bucket = self.inodes.bucket(ino)
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
        ino = self.inodes.nn(inode)
        await self._settle(ino)
        if flags & (os.O_WRONLY | os.O_RDWR):
            self._writable()
        a = None
        if flags & os.O_TRUNC:  # libfuse asks the kernel for atomic O_TRUNC: it comes here, not as a setattr
            self._writable()
            a = self._changed(await self.writes.truncate(ino, 0))
        a = a or await self.inodes.getattr(ino)
        keep = self.o.dataset or (self.seen.get(ino) == _version(a) and self.writes.of(ino) is None)
        self.seen[ino] = _version(a)
        return pyfuse3.FileInfo(fh=self._open_handle(a), keep_cache=keep)

    @_posix
    async def create(self, parent_inode, name, mode, flags, ctx):
        self._writable()
        p, s = self.inodes.nn(parent_inode), _name(name)
        pa = self.dir_attrs.get(p)
        bucket = self.inodes.bucket(p)
        if self.o.writeback and pa is not None and bucket is not None:  # made here; created on the NameNode later
            gid = pa["gid"] if pa["mode"] & stat.S_ISGID else ctx.gid  # BSD group semantics, as the NameNode's
            t = time.time_ns()
            a = {"ino": await self.writes.next_ino(bucket), "mode": stat.S_IFREG | stat.S_IMODE(mode), "nlink": 1,
                 "uid": ctx.uid, "gid": gid, "size": 0, "rdev": 0, "at": t, "mt": t, "ct": t, "etag": EMPTY_ETAG}
            self.inodes.remember(p, s, a)
            fh = self._open_handle(a)
            self.files[fh].writer = self.writes.make(a["ino"], p, s, a)
            if p in self.known:  # (its attributes stay: getattr adds the time of this create)
                self.known[p].names[s] = None
            return pyfuse3.FileInfo(fh=fh), self._entry(a)
        try:
            a = await self.c.fs_mknod(bucket, parent=p, name=s, mode=stat.S_IFREG | stat.S_IMODE(mode),
                                      uid=ctx.uid, gid=ctx.gid)
        except errors.AlreadyExists:
            if flags & os.O_EXCL:
                raise
            # made elsewhere since the lookup (or the names kept here, Listed) said it was free: ESTALE makes the
            # kernel walk the path again (LOOKUP_REVAL); with the name now kept, that lookup asks the NameNode, and
            # open(2) opens the file as it would have (its permission checks, O_TRUNC) without creating it
            k = self.known.get(p)
            if k is not None:
                k.names[s] = None
            raise pyfuse3.FUSEError(errno.ESTALE) from None
        self.inodes.remember(p, s, a)
        self._changed_dir(p, add=s, t=a["ct"])
        self.seen[a["ino"]] = _version(a)
        fh = self._open_handle(a)
        self.files[fh].writer = self.writes.new(a["ino"], a)
        return pyfuse3.FileInfo(fh=fh), self._entry(a)

    @_posix
    async def read(self, fh, off, size):
        h = self.files[fh]
        w = h.writer or self.writes.of(h.ino)
        if w is not None:
            return await self.writes.read(h.ino, w, off, size)
        return await self.reader.read(h, off, size)

    @_posix
    async def write(self, fh, off, buf):
        h = self.files[fh]
        if off + len(buf) > MAX_FILE_SIZE:
            raise pyfuse3.FUSEError(errno.EFBIG)
        if h.writer is None:
            h.writer = await self.writes.attach(h.ino)
        await self.writes.write(h.ino, h.writer, off, buf)
        return len(buf)

    def _changed(self, a: dict | None) -> dict | None:
        """This mount changed a file's content (`a`: its new attributes; None: not yet committed): its open handles
        read the new version (a read short of the size the kernel knows would make the kernel shrink the file), and
        the kernel's pages, which already hold what was written, are kept at the next open."""
        if a is None:
            return None
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
        if h.writer is not None and h.writer.new is not None:  # write-back: created after close, in a batch
            await self.writes.closing(h.writer)
            return
        if h.writer is not None:
            self._changed(await self.writes.upload(h.ino, h.writer))

    @_posix
    async def fsync(self, fh, datasync):
        h = self.files[fh]
        if h.writer is not None:
            await self.writes.settle(h.writer)
        await self.flush.__wrapped__(self, fh)

    @_posix
    async def release(self, fh):
        h = self.files.pop(fh)
        if h.writer is not None:
            self._changed(await self.writes.release(h.ino, h.writer))

    async def close(self) -> None:
        await self.c.close()
