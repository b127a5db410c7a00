"""The mount's read path: everything that serves read() of a file without unsaved writes (those read their local
copy, see writer.py).

Chunks of a file version go through the client block cache (cache.py). Where the mount knows where a file's blocks
are (a locate answer: a _Plan, with its read token), it reads them straight from the DataNodes; else, and when that
fails, through the gateway. A large file read front to back is a stream: its chunks pass through its handle's window
and the kernel's readahead is followed by readahead of our own. A shuffled epoch will read every file of a directory
soon, so in dataset mode the first read of a file there fetches the directory's small files in batches (one request
for many files, while the cache has room): epoch 1 pays per batch, not per file.
"""
from __future__ import annotations

import collections
import logging
import stat
import time
from dataclasses import dataclass, field

import trio

from epochfs.common import errors
from epochfs.common.blocks import piece_starts, pieces_within
from epochfs.common.client import DIRECT_RETRY_S, PieceFailed, S3Client
from epochfs.common.messages import LocatedPiece, ReadGrant

from .cache import BlockCache
from .inodes import InodeTable
from .options import MountOptions
from .writer import Writer

log = logging.getLogger("epochfs.mount")

LOCATE_SPAN = 256 << 20  # bytes of a file one locate answers for (its read token serves every read in them)
PLAN_MARGIN_S = 5        # a plan is dropped this long before its read token expires
MAX_PLANS = 1 << 16
LOCATE_FILES = 1024      # dataset mode: entries of a directory one locate answers for


@dataclass
class Handle:
    """An open file: the version it reads, its recent reads (readahead, stream) and the local copy it writes."""
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
    pieces: list[LocatedPiece]
    addrs: dict
    grant: ReadGrant

    def covers(self, etag: str, off: int, end: int) -> bool:
        return etag.strip('"') == self.etag and self.start <= off and min(end, self.size) <= self.end and \
            time.time() < self.grant.exp - PLAN_MARGIN_S

    def within(self, off: int, end: int) -> list[LocatedPiece]:
        """The pieces of bytes [off, end)."""
        return pieces_within(self.pieces, self.starts, off, end)


@dataclass
class _Fetch:
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | None = None                # None when done: a prefetch missed it, the reader fetches it itself
    error: BaseException | None = None


class Reader:
    """Serves read() of the files without a local copy: chunks from the block cache, from a fetch under way, or read
    straight from the DataNodes or through the gateway; readahead and dataset-mode prefetch run in the mount's
    nursery."""

    def __init__(self, client: S3Client, opts: MountOptions, inodes: InodeTable) -> None:
        self.c, self.o, self.inodes = client, opts, inodes
        self.cache = BlockCache(opts.cache_policy, opts.cache_mem, opts.cache_disk,
                                opts.cache_dir / "blocks" if opts.cache_dir else None)
        self.prefetched: set[int] = set()                # dataset mode: directories whose files were prefetched
        self.batches = trio.Semaphore(4)                 # prefetch batches under way at once
        self.inflight: dict[tuple, _Fetch] = {}
        self.plans: dict[int, _Plan] = {}               # inode -> where its blocks are (direct reads)
        self.direct_after = 0.0                          # monotonic time from which to try direct reads again
        self.locating: dict[int | tuple, trio.Event] = {}  # locates under way: of a file, of a (directory, page)
        self.nursery: trio.Nursery | None = None         # the mount's, for readahead and prefetch (mount.py)

    async def read(self, h: Handle, off: int, size: int) -> bytes:
        """Bytes [off, off + size) of the version handle `h` opened (short at its end)."""
        if not self.cache.enabled:
            return await self._read(h.ino, h.etag, off, size, h.size)
        end = min(off + size, h.size)
        if end <= off:
            return b""
        cs = self.o.chunk_size
        first, last = off // cs, (end - 1) // cs
        p = self.inodes.parent_of.get(h.ino)
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
        pos = self.inodes.dir_pos.get(ino) if idx == 0 and self.o.prefetch else None
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
        bucket = self.inodes.bucket(ino)
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
        p = self.inodes.parent_of.get(ino)
        if size <= self.o.chunk_size:
            if p is None or p not in self.inodes.listings or p not in self.inodes.keys:
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
                    self._keep_plan(ino, r.etag, r.size, off, r.pieces, r.addrs, r.grant)
                finally:
                    del self.locating[ino]
                    ev.set()
                break
        plan = self.plans.get(ino)
        return plan if plan is not None and plan.covers(etag, off, end) else None

    def _keep_plan(self, ino: int, etag: str, size: int, off: int, pieces: list[LocatedPiece], addrs: dict,
                   grant: ReadGrant) -> None:
        starts = piece_starts(pieces, off)
        if len(self.plans) >= MAX_PLANS:
            del self.plans[next(iter(self.plans))]
        self.plans[ino] = _Plan(etag.strip('"'), size, off, min(off + LOCATE_SPAN, size), starts, pieces, addrs,
                                grant)

    async def _locate_dir(self, bucket: str, p: int, ino: int) -> None:
        """Dataset mode: locate the page of LOCATE_FILES entries of directory `p` that holds file `ino`, once
        (concurrent readers of the page wait for the one locate)."""
        listing = self.inodes.listings[p]
        page = (p, self.inodes.dir_pos.get(ino, (p, 0))[1] // LOCATE_FILES)
        ev = self.locating.get(page)
        if ev is not None:
            await ev.wait()
            return
        ev = self.locating[page] = trio.Event()
        try:
            files = [(n, a) for n, a in listing[page[1] * LOCATE_FILES:(page[1] + 1) * LOCATE_FILES]
                     if stat.S_ISREG(a["mode"]) and a["size"] <= self.o.chunk_size]
            r = await self.c.locate([(bucket, self.inodes.keys[p] + n, None, None) for n, _ in files])
            for (_, a), item in zip(files, r.items):
                if item.pieces is not None:
                    self._keep_plan(a["ino"], item.etag, item.size, 0, item.pieces, r.addrs, r.grant)
        finally:
            del self.locating[page]
            ev.set()

    async def _prefetch_dir(self, p: int) -> None:
        """Dataset mode: fetch the small files of directory `p` group by group (_fetch_group) while the cache keeps
        them without evicting anything."""
        for g in range(0, -(-len(self.inodes.listings.get(p, ())) // self.o.prefetch)):
            async with self.batches:
                if not await self._fetch_group(p, g):
                    return

    async def _fetch_group(self, p: int, g: int) -> bool:
        """Dataset mode: fetch group `g` of directory `p` (its entries g*prefetch to (g+1)*prefetch) in one batch:
        the files that fit in one chunk and are neither cached nor on their way. A read that misses the cache
        fetches its file's group, not the file alone: a shuffled epoch reads the others soon, and one DataNode call
        per node for `prefetch` files costs far less than one per file. False when the cache has no room for them.
        """
        bucket = self.inodes.bucket(p)
        if bucket is None or p not in self.inodes.keys:
            return False
        n = self.o.prefetch
        todo = [a for _, a in self.inodes.listings[p][g * n:(g + 1) * n]
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

