"""Mount options: the command line of `epochfs mount` and what it becomes. Kept apart from pyfuse3 so that the CLI
can build its parser on machines without libfuse3."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from epochfs.common import defaults

from .cache import POLICIES


@dataclass
class MountOptions:
    bucket: str | None = None
    prefix: str = ""
    read_only: bool = False
    dataset: bool = False                    # immutable tree: metadata fetched once, never revalidated
    entry_timeout: float = 1.0
    attr_timeout: float = 1.0
    chunk_size: int = 4 << 20                # unit of reads from the gateway and of the block cache
    readahead: int = 4                       # chunks fetched ahead of a sequential reader
    prefetch: int = 32                       # dataset mode: files per batch when a directory is prefetched
    cache_policy: str = "none"               # none | lru | off (see cache.py)
    cache_mem: int = 512 << 20
    cache_disk: int = 0
    cache_dir: Path | None = None
    timeout: float = 10.0                    # a gateway silent this long makes the call fail with EIO
    writeback: bool = False                  # new small files: made locally, committed in batches after close
    direct_writes: bool = True               # streamed files go straight to the DataNodes (else via the gateway)
    blksize: int = 1 << 20                   # st_blksize of files: what cp and buffered writers write at a time



def _size(text: str) -> int:
    """A byte count: 1048576, 512K, 64M, 2G."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _blksize(text: str) -> int:
    n = _size(text)
    if n < 4096 or n > 16 << 20 or n & (n - 1):
        raise argparse.ArgumentTypeError(f"{text!r}: a power of two from 4K to 16M")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", nargs="?", default="", metavar="BUCKET[/PREFIX]",
                   help="what to mount; without it, every bucket is a top-level directory")
    p.add_argument("mountpoint")
    p.add_argument("--endpoint", help="gateway URL (default: $AWS_ENDPOINT_URL, as `epochfs up` prints it, else "
                                      f"{defaults.ENDPOINT})")
    p.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID", ""),
                   help="default: $AWS_ACCESS_KEY_ID")
    p.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
                   help="default: $AWS_SECRET_ACCESS_KEY")
    p.add_argument("-f", "--foreground", action="store_true", help="stay in the foreground")
    p.add_argument("--read-only", action="store_true")
    p.add_argument("--dataset", action="store_true",
                   help="read-only; metadata is loaded once and trusted for the life of the mount")
    p.add_argument("--entry-timeout", type=float, default=1.0, help="seconds the kernel trusts a name")
    p.add_argument("--attr-timeout", type=float, default=1.0, help="seconds the kernel trusts attributes")
    p.add_argument("--cache", choices=POLICIES, default="none", help="client block cache eviction policy")
    p.add_argument("--cache-mem", type=_size, default=512 << 20)
    p.add_argument("--cache-disk", type=_size, default=0)
    p.add_argument("--cache-dir", type=Path, default=None, help="local disk cache and write buffers")
    p.add_argument("--chunk-size", type=_size, default=4 << 20, help="unit of reads and of the block cache")
    p.add_argument("--readahead", type=int, default=4, help="chunks read ahead of a sequential reader")
    p.add_argument("--prefetch", type=int, default=32,
                   help="dataset mode: once a file is read, its directory's small files are fetched in batches "
                        "of this many while the cache has room (0: off)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds before a silent gateway gives EIO")
    p.add_argument("--writeback", action="store_true",
                   help="new small files are made in the mount and committed in batches after close() returns "
                        "(fsync waits for its file; see the README's mount write paragraph)")
    p.add_argument("--no-direct", action="store_true",
                   help="send file content through the gateway, not straight to the DataNodes")
    p.add_argument("--no-allow-other", action="store_true", help="only the mounting user sees the mount")
    p.add_argument("--blksize", type=_blksize, default=1 << 20,
                   help="st_blksize of files (default 1M, the kernel's largest write: cp writes that much at a "
                        "time); 4K for tools that scale offsets by it, such as fsstress, for smaller files")


def options(args) -> MountOptions:
    bucket, _, prefix = args.source.strip("/").partition("/")
    return MountOptions(bucket=bucket or None, prefix=prefix, read_only=args.read_only or args.dataset,
                        dataset=args.dataset, entry_timeout=args.entry_timeout, attr_timeout=args.attr_timeout,
                        chunk_size=args.chunk_size, readahead=args.readahead, prefetch=args.prefetch,
                        cache_policy=args.cache,
                        cache_mem=args.cache_mem, cache_disk=args.cache_disk, cache_dir=args.cache_dir,
                        timeout=args.timeout, writeback=args.writeback,
                        direct_writes=not args.no_direct, blksize=args.blksize)
