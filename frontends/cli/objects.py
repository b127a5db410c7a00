"""`epochfs ls`, `rm`, `mb` and `rb`: look at and tidy what `epochfs cp` put in a bucket, without another tool.

Paths are those of `epochfs cp` (epochfs://bucket/prefix or s3://bucket/prefix); endpoint and keys come from the
variables `epochfs up` prints. The output is `aws s3 ls`'s, so scripts written for it read ours: a line per object
(date, time, size, key) and per folder below the prefix ("PRE name/"), or per bucket with no path.
"""
from __future__ import annotations

import asyncio
import sys

import httpx

from epochfs.common import errors
from epochfs.common.client import S3Client

from .admin import human_size
from .transfer import TransferError, remote_path

DELETE_BATCH = 1000  # keys per DeleteObjects request (S3's limit)


def _when(iso: str) -> str:
    """ListObjectsV2's LastModified ("2026-11-29T04:00:00.000Z") as `aws s3 ls` prints it."""
    return iso[:19].replace("T", " ")


def _bucket_of(path: str) -> tuple[str, str]:
    where = remote_path(path)
    if where is None:
        raise TransferError(f"{path}: not a bucket path (epochfs://bucket/prefix)")
    return where


async def ls(path: str | None, *, recursive: bool, human: bool, out=sys.stdout) -> None:
    """Print the buckets (no path), or the objects and folders below `path`."""
    size = human_size if human else str
    async with S3Client() as c:
        if path is None:
            for b in await c.list_buckets():
                print(b, file=out)
            return
        bucket, prefix = _bucket_of(path)
        base = "" if recursive else prefix[:prefix.rfind("/") + 1]  # names print below the prefix's folder
        async for page in c.list_pages(bucket, prefix, "" if recursive else "/"):
            for p in page.prefixes:
                print(f"{'PRE':>30} {p[len(base):]}", file=out)
            for o in page.objects:
                print(f"{_when(o.last_modified)} {size(o.size):>10} {o.key[len(base):]}", file=out)


async def rm(path: str, *, recursive: bool, out=sys.stdout) -> int:
    """Delete the object at `path`, or with `recursive` every object below it (the whole bucket for a bucket
    path); the number deleted. An object that is not there is an error (NoSuchKey), as `rm` of a missing file."""
    bucket, key = _bucket_of(path)
    async with S3Client() as c:
        if not recursive:
            if not key or key.endswith("/"):
                raise TransferError(f"{path}: a folder or bucket; give -r to delete everything below it")
            try:
                await c.head(bucket, key)
            except errors.NoSuchKey:
                if (await c.list(bucket, key + "/", limit=1)).objects:
                    raise TransferError(f"{path}: a folder; give -r to delete everything below it") from None
                raise
            await c.delete(bucket, key)
            print(f"delete: {path}", file=out)
            return 1
        prefix = key if not key or key.endswith("/") else key + "/"
        done = 0
        while True:  # list a page, delete it, list again: the listing never runs over keys deleted meanwhile
            page = await c.list(bucket, prefix, limit=DELETE_BATCH)
            keys = [o.key for o in page.objects]
            if not keys:
                break
            failed = await c.delete_many(bucket, keys)
            if failed:
                k, e = next(iter(failed.items()))
                raise TransferError(f"{len(failed)} of {len(keys)} deletes failed; first: {k}: {e}")
            done += len(keys)
        if not done and key and not key.endswith("/"):
            await c.head(bucket, key)  # not a folder: the object itself (NoSuchKey if it is not there either)
            await c.delete(bucket, key)
            done = 1
        print(f"deleted {done} object{'s' * (done != 1)} below {path}", file=out)
        return done


async def mb(path: str) -> None:
    bucket, key = _bucket_of(path)
    if key:
        raise TransferError(f"{path}: a bucket is made by its name alone (epochfs://bucket)")
    async with S3Client() as c:
        await c.create_bucket(bucket)
    print(f"make_bucket: {bucket}")


async def rb(path: str, *, force: bool) -> None:
    bucket, key = _bucket_of(path)
    if key:
        raise TransferError(f"{path}: rb takes a bucket (epochfs://bucket)")
    if force:
        await rm(f"epochfs://{bucket}", recursive=True)
    async with S3Client() as c:
        await c.delete_bucket(bucket)
    print(f"remove_bucket: {bucket}")


def cmd_objects(args) -> int:
    try:
        if args.cmd == "ls":
            asyncio.run(ls(args.path, recursive=args.recursive, human=args.human_readable))
        elif args.cmd == "rm":
            asyncio.run(rm(args.path, recursive=args.recursive))
        elif args.cmd == "mb":
            asyncio.run(mb(args.path))
        else:
            asyncio.run(rb(args.path, force=args.force))
    except errors.NoSuchBucket:
        print(f"epochfs {args.cmd}: {args.path}: no such bucket", file=sys.stderr)
        return 1
    except errors.NotFound:  # a HEAD's 404 says no more than that
        print(f"epochfs {args.cmd}: {args.path}: no such object", file=sys.stderr)
        return 1
    except (TransferError, errors.DomainError, OSError, httpx.HTTPError) as e:
        print(f"epochfs {args.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("ls", help="list buckets, or the objects and folders below epochfs://bucket/prefix")
    p.add_argument("path", nargs="?", help="epochfs://bucket[/prefix] (none: the buckets)")
    p.add_argument("-r", "--recursive", action="store_true", help="every object below the prefix, by its full key")
    p.add_argument("-H", "--human-readable", action="store_true", help="sizes in KiB, MiB, GiB")
    p.set_defaults(func=cmd_objects)
    p = sub.add_parser("rm", help="delete an object, or with -r every object below epochfs://bucket/prefix")
    p.add_argument("path", help="epochfs://bucket/key, or with -r epochfs://bucket[/prefix]")
    p.add_argument("-r", "--recursive", action="store_true", help="every object below the prefix")
    p.set_defaults(func=cmd_objects)
    p = sub.add_parser("mb", help="make a bucket: epochfs mb epochfs://NAME")
    p.add_argument("path", help="epochfs://bucket")
    p.set_defaults(func=cmd_objects)
    p = sub.add_parser("rb", help="remove an empty bucket (--force: delete its objects first)")
    p.add_argument("path", help="epochfs://bucket")
    p.add_argument("--force", action="store_true", help="delete every object in it first")
    p.set_defaults(func=cmd_objects)
