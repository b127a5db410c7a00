"""`epochfs cp` and `epochfs sync`: copy a local folder to a bucket (or back) with parallel transfers.

A remote path is `epochfs://bucket/prefix` or `s3://bucket/prefix`; anything else is local. Endpoint and keys come
from the variables `epochfs up` prints. sync copies only what differs: a file whose size differs, or whose source is
newer than the destination (a download takes the object's time as its mtime, so the next sync skips it).
"""
from __future__ import annotations

import asyncio
import calendar
import os
import stat
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from epochfs.common import errors
from epochfs.common.client import INGEST_MAX_ITEMS, S3Client

REMOTE = ("epochfs://", "s3://")
# Uploads of files up to SMALL_FILE go in batch PUTs (POST /_epochfs/put: one request, one NameNode command and one
# call per DataNode for many files) of up to BATCH_BYTES, -j / JOBS_PER_BATCH of them at once (4 for the default -j 16)
# while the next are read; downloads of such files in batch reads of the same size (S3Client.batch_get: one locate
# and one call per DataNode).
SMALL_FILE = 1 << 20
BATCH_BYTES = 8 << 20
JOBS_PER_BATCH = 4


@dataclass(frozen=True, slots=True)
class Entry:
    rel: str       # path below the source/destination root, with "/" separators
    size: int
    mtime: float   # seconds since the epoch


class TransferError(Exception):
    """A problem worth one line to the user (no traceback)."""


def remote_path(path: str) -> tuple[str, str] | None:
    for scheme in REMOTE:
        if path.startswith(scheme):
            bucket, _, key = path[len(scheme):].partition("/")
            if not bucket:
                raise TransferError(f"{path}: no bucket in the path")
            return bucket, key
    return None


class Notes:
    """What a copy left out (`skipped`: not a regular file) or could not copy (`failed`), a line each ("path: why"),
    said on stderr as they are found, as `aws s3 cp` does: one such file never stops the others."""

    def __init__(self, say: bool = True) -> None:
        self.say = say  # False: only counted (the destination side of a download)
        self.skipped: list[str] = []
        self.failed: list[str] = []

    def skip(self, path, why: str) -> None:
        self.skipped.append(f"{path}: {why}")
        if self.say:
            print(f"warning: skipping {path}: {why}", file=sys.stderr)

    def fail(self, path, why) -> None:
        self.failed.append(f"{path}: {why}")
        if self.say and len(self.failed) <= MAX_FAILURES_SAID:
            print(f"failed: {path}: {why}", file=sys.stderr)


MAX_FAILURES_SAID = 20  # failed files named one by one on stderr; the summary counts them all


def _local_tree(root: Path, notes: Notes) -> dict[str, Entry]:
    """The regular files below `root` (or `root` itself, rel ""), links followed. Left out, and noted: what is no
    regular file (a FIFO, whose read would wait forever, a socket, a device), a dangling or looping link, a folder
    that can't be listed, and a name that is no UTF-8 (no key can hold it)."""
    if not root.is_dir():
        e = _entry(root, "", notes)
        return {"": e} if e else {}
    out = {}
    for dirpath, _, files in os.walk(root, onerror=lambda err: notes.fail(err.filename, err.strerror)):
        for f in files:
            p = Path(dirpath) / f
            rel = p.relative_to(root).as_posix()
            e = _entry(p, rel, notes)
            if e:
                out[rel] = e
    return out


def _entry(p: Path, rel: str, notes: Notes) -> Entry | None:
    try:
        (rel or p.name).encode()  # what goes into the key
    except UnicodeEncodeError:
        notes.fail(p, "the name is not UTF-8, which an object key must be")
        return None
    try:
        st = p.stat()
    except FileNotFoundError:
        notes.skip(p, "no such file (a link to nothing?)")
        return None
    except OSError as e:  # ELOOP (a link loop), EACCES (a folder on the way that can't be searched)
        notes.fail(p, e.strerror)
        return None
    if not stat.S_ISREG(st.st_mode):
        notes.skip(p, "not a regular file (a FIFO, socket or device)")
        return None
    return Entry(rel, st.st_size, st.st_mtime)


async def _remote_tree(c: S3Client, bucket: str, key: str) -> dict[str, Entry]:
    """The object `key` itself (rel "") if it exists, else every object below `key/`."""
    prefix = key.rstrip("/") + "/" if key else ""
    out = {}
    async for page in c.manifest(bucket, prefix):
        for k, size, _, mt in page:
            if not k.endswith("/"):
                out[k[len(prefix):]] = Entry(k[len(prefix):], size, mt / 1e9)
    if not out and key and not key.endswith("/"):
        try:
            info = await c.head(bucket, key)
        except errors.NotFound:
            return {}
        mt = calendar.timegm(time.strptime(info.last_modified, "%a, %d %b %Y %H:%M:%S GMT"))
        out[""] = Entry("", info.size, float(mt))
    return out


def _join(base: str, rel: str) -> str:
    return "/".join(p for p in (base.rstrip("/"), rel) if p)


def _changed(src: Entry, dst: Entry | None) -> bool:
    return dst is None or src.size != dst.size or src.mtime > dst.mtime + 1.0  # 1 s: mtime granularity


def _dest(root: Path, key: str, e: Entry) -> str:
    return _join(key, e.rel) if e.rel else (key if key and not key.endswith("/") else _join(key, root.name))


def _batches(entries: list[Entry]) -> list[list[Entry]]:
    out, cur, n = [], [], 0
    for e in entries:
        if cur and (n + e.size > BATCH_BYTES or len(cur) >= INGEST_MAX_ITEMS):
            out.append(cur)
            cur, n = [], 0
        cur.append(e)
        n += e.size
    if cur:
        out.append(cur)
    return out


def _read_all(root: Path, batch: list[Entry]) -> list[bytes | OSError]:
    """Each file's bytes, or the error that reading it met (gone since the scan, unreadable)."""
    out: list[bytes | OSError] = []
    for e in batch:
        try:
            out.append((root / e.rel if e.rel else root).read_bytes())
        except OSError as err:
            out.append(err)
    return out


async def _upload_batch(c: S3Client, root: Path, bucket: str, key: str, batch: list[Entry],
                        advance) -> list[BaseException | None]:
    """Upload small files in one batch PUT; each file's error or None (a file that could not be read fails alone)."""
    datas = await asyncio.to_thread(_read_all, root, batch)
    out: list[BaseException | None] = [d if isinstance(d, OSError) else None for d in datas]
    read = [i for i, d in enumerate(datas) if not isinstance(d, OSError)]
    if read:
        res = await c.put_many(bucket, [(_dest(root, key, batch[i]), datas[i]) for i in read])
        advance(sum(len(datas[i]) for i in read))
        for i, r in zip(read, res):
            out[i] = r if isinstance(r, errors.DomainError) else None
    return out


async def _upload(c: S3Client, root: Path, bucket: str, key: str, e: Entry, advance) -> None:
    path = root / e.rel if e.rel else root
    dest = _dest(root, key, e)
    if e.size <= c.multipart_threshold:
        await c.put(bucket, dest, await asyncio.to_thread(path.read_bytes))
    else:
        with open(path, "rb") as f:
            await c.put_parts(bucket, dest, iter(lambda: f.read(c.part_size), b""))
    advance(e.size)


@contextmanager
def _placing(root: Path, key: str, e: Entry):
    """A file to download `e` into: written as a hidden part file, given the object's mtime and renamed into place
    once it is whole (a file appears whole or not at all)."""
    dest = root / e.rel if e.rel else (root / key.rsplit("/", 1)[-1] if root.is_dir() else root)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.epochfs-part")
    try:
        with open(tmp, "wb") as f:
            yield f
        os.utime(tmp, (e.mtime, e.mtime))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


async def _download(c: S3Client, bucket: str, key: str, root: Path, e: Entry, advance) -> None:
    with _placing(root, key, e) as f:
        await c.download(bucket, _join(key, e.rel) if e.rel else key, f.write, size=e.size)
    advance(e.size)


async def _download_batch(c: S3Client, bucket: str, key: str, root: Path, batch: list[Entry],
                          advance) -> list[BaseException | None]:
    """Download small files with one batch read (straight from the DataNodes when they can be reached); each
    file's error or None."""
    res = await c.batch_get([(bucket, _join(key, e.rel) if e.rel else key, None, None) for e in batch])

    def place() -> list[BaseException | None]:
        out: list[BaseException | None] = []
        for e, r in zip(batch, res):
            if isinstance(r, BaseException):
                out.append(r)
                continue
            try:
                with _placing(root, key, e) as f:
                    f.write(r)
                out.append(None)
            except OSError as err:
                out.append(err)
        return out
    out = await asyncio.to_thread(place)
    advance(sum(len(r) for r in res if not isinstance(r, BaseException)))
    return out


async def transfer(src: str, dst: str, *, sync: bool, jobs: int, quiet: bool, batch: bool = True,
                   direct: bool = True, delete: bool = False, stats: dict | None = None) -> tuple[int, int, int]:
    """Copy src to dst (one side local, one remote); returns (files copied, files skipped as unchanged, files
    deleted). Uploads go straight to the DataNodes when they can be reached (`direct`; common/directwrite.py), else
    through the gateway; `stats` gets the count of each ("direct", "gateway") and of the source's entries left out
    ("left_out": no regular files, see _local_tree). `delete` (sync): files below dst that src does not have are
    deleted, once every copy succeeded. A file that fails does not stop the others: TransferError at the end."""
    rs, rd = remote_path(src), remote_path(dst)
    if (rs is None) == (rd is None):
        raise TransferError("one of SRC and DST must be local and the other epochfs://bucket/... or s3://bucket/...")
    async with S3Client(max_connections=jobs, direct_writes=direct) as c:
        bucket = (rd or rs)[0]
        try:
            await c.head_bucket(bucket)
        except errors.NoSuchBucket:
            hint = f" (epochfs mb epochfs://{bucket} makes it)" if rd else ""
            raise TransferError(f"epochfs://{bucket}: no such bucket{hint}") from None
        if "-" in (src, dst):
            if sync:
                raise TransferError("sync copies folders; `-` (standard input or output) goes with cp")
            await (_from_stdin(c, *rd) if src == "-" else _to_stdout(c, *rs))
            return 1, 0, 0
        notes = Notes()
        try:
            return await _transfer(c, src, dst, rs, rd, sync=sync, jobs=jobs, quiet=quiet, batch=batch,
                                   delete=delete, notes=notes)
        finally:
            if stats is not None:
                stats.update(direct=c.direct_writes, gateway=c.gateway_writes, left_out=len(notes.skipped))


async def _from_stdin(c: S3Client, bucket: str, key: str) -> None:
    """`epochfs cp - epochfs://bucket/key`: standard input becomes the object, which appears once it is whole."""
    if not key or key.endswith("/"):
        raise TransferError("cp from standard input needs the object's full key (epochfs://bucket/key)")
    w = c.writer(bucket, key)
    try:
        while chunk := await asyncio.to_thread(sys.stdin.buffer.read, c.part_size):
            await w.write(chunk)
        await w.finish()
    except BaseException:
        await w.abort()
        raise


async def _to_stdout(c: S3Client, bucket: str, key: str) -> None:
    """`epochfs cp epochfs://bucket/key -`: the object onto standard output (as `aws s3 cp ... -` does)."""
    if not key or key.endswith("/"):
        raise TransferError("cp to standard output takes one object (epochfs://bucket/key)")
    try:
        info = await c.head(bucket, key)
    except errors.NotFound:  # (a HEAD's 404 has no body to say more)
        raise TransferError(f"epochfs://{bucket}/{key}: no such object") from None
    out = sys.stdout.buffer
    await c.download(bucket, key, out.write, size=info.size)
    out.flush()


async def _transfer(c: S3Client, src: str, dst: str, rs, rd, *, sync: bool, jobs: int, quiet: bool,
                    batch: bool, delete: bool, notes: Notes) -> tuple[int, int, int]:
    if rs is None:
        root = Path(src)
        if not root.exists():
            raise TransferError(f"{src}: no such file or directory")
        if not root.is_dir() and not root.is_file():
            raise TransferError(f"{src}: not a regular file or a folder")
        todo, other = _local_tree(root, notes), (await _remote_tree(c, *rd) if sync else {})
    else:
        root = Path(dst)
        todo = await _remote_tree(c, *rs)
        if not todo:
            raise TransferError(f"{src}: no such object or prefix")
        other = _local_tree(root, Notes(say=False)) if sync and root.exists() else {}
    if delete and "" in todo:  # one file: what "below dst" would mean is not the user's to guess
        raise TransferError("--delete syncs a folder with a prefix (and back); SRC is a single file")
    work = [e for e in todo.values() if not sync or _changed(e, other.get(e.rel))]
    skipped = len(todo) - len(work)
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), disable=quiet or not sys.stderr.isatty(), transient=False) as bar:
        task = bar.add_task(f"{'sync' if sync else 'cp'} {len(work)} files", total=sum(e.size for e in work))
        sem = asyncio.Semaphore(jobs)
        small = [e for e in work if e.size <= SMALL_FILE] if batch else []
        single = [e for e in work if e.size > SMALL_FILE] if small else work
        batch_sem = asyncio.Semaphore(max(1, jobs // JOBS_PER_BATCH))

        async def one(e: Entry) -> None:
            async with sem:
                if rs is None:
                    await _upload(c, root, *rd, e, lambda n: bar.advance(task, n))
                else:
                    await _download(c, *rs, root, e, lambda n: bar.advance(task, n))

        async def many(b: list[Entry]) -> list[BaseException | None]:
            async with batch_sem:
                try:
                    if rs is None:
                        return await _upload_batch(c, root, *rd, b, lambda n: bar.advance(task, n))
                    return await _download_batch(c, *rs, root, b, lambda n: bar.advance(task, n))
                except (errors.DomainError, OSError) as e:
                    return [e] * len(b)
        groups = _batches(small)
        got = await asyncio.gather(*(many(b) for b in groups), *(one(e) for e in single),
                                   return_exceptions=True)
        results = [r for rs_ in got[:len(groups)] for r in rs_] + list(got[len(groups):])
        work = [e for b in groups for e in b] + single
    unlisted = len(notes.failed)  # (found by the scan: never in `work`)
    for e, r in zip(work, results):
        if isinstance(r, BaseException):
            notes.fail(root / e.rel if rs is None and e.rel else e.rel or src, r)
    if notes.failed:
        said = "" if len(notes.failed) <= MAX_FAILURES_SAID else f" (the first {MAX_FAILURES_SAID} named above)"
        total = len(work) + unlisted
        raise TransferError(f"{len(notes.failed)} of {total} files failed{said}, {total - len(notes.failed)} "
                            f"copied" + ("; nothing deleted" if delete else ""))
    extra = sorted(rel for rel in other if rel and rel not in todo) if delete else []
    if extra and rs is None:  # objects below the destination prefix that the folder does not have
        failed_del = await c.delete_many(rd[0], [_join(rd[1], rel) for rel in extra])
        if failed_del:
            k, err = next(iter(failed_del.items()))
            raise TransferError(f"{len(failed_del)} of {len(extra)} deletes failed; first: {k}: {err}")
    for rel in extra if rs is not None else ():  # local files the prefix does not have
        (root / rel).unlink(missing_ok=True)
    return len(work), skipped, len(extra)


def cmd_transfer(args) -> int:
    stats: dict = {}
    try:
        copied, skipped, deleted = asyncio.run(transfer(
            args.src, args.dst, sync=args.cmd == "sync", jobs=args.jobs, quiet=args.quiet, batch=not args.no_batch,
            direct=not args.no_direct, delete=getattr(args, "delete", False), stats=stats))
    except (TransferError, errors.DomainError, OSError, httpx.HTTPError) as e:  # (httpx: no gateway there)
        print(f"epochfs {args.cmd}: {e}", file=sys.stderr)
        return 1
    if "-" in (args.src, args.dst):
        return 0  # the bytes went through a pipe: nothing else to say on it
    up = stats.get("direct", 0) + stats.get("gateway", 0)
    left_out = stats.get("left_out", 0)
    print(f"{copied} copied, {skipped} unchanged" + (f", {deleted} deleted" if deleted else "")
          + (f", {left_out} left out (no regular files)" if left_out else "")
          + (f" ({stats['direct']} of {up} uploads straight to the DataNodes)" if up else ""), file=sys.stderr)
    return 2 if left_out else 0  # as `aws s3 cp`: 2 when files were skipped and all the others copied


def add_parser(sub) -> None:
    for name, help_ in (("cp", "copy a file or folder to or from epochfs://bucket/prefix"),
                        ("sync", "copy only new and changed files (size, then mtime) to or from a bucket")):
        p = sub.add_parser(name, help=help_, description=help_ + ". A remote path is epochfs://bucket/prefix or "
                           "s3://bucket/prefix, anything else a local file or folder; a folder is copied whole.")
        p.add_argument("src", help="a local file or folder, or epochfs://bucket/prefix (cp: - is standard input)")
        p.add_argument("dst", help="where it goes: epochfs://bucket/prefix, or a local path (cp: - is standard "
                                   "output)")
        # as `cp -r`, `aws s3 cp --recursive` and `gsutil cp -r` are typed: a folder is copied whole either way
        p.add_argument("-r", "--recursive", action="store_true", help="accepted; folders are always copied whole")
        p.add_argument("-j", "--jobs", type=int, default=16, help="parallel transfers (default 16)")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
        p.add_argument("--no-batch", action="store_true",
                       help="copy small files one request each instead of in batches")
        p.add_argument("--no-direct", action="store_true",
                       help="upload through the gateway only (by default blocks go straight to the DataNodes when "
                            "they can be reached)")
        if name == "sync":
            p.add_argument("--delete", action="store_true",
                           help="also delete files below DST that SRC does not have (after every copy succeeded)")
        p.set_defaults(func=cmd_transfer)
