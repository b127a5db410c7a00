"""The mount's inode table: kernel inode numbers, the bucket of each inode, and in dataset mode the metadata trusted
for the life of the mount.

Inodes are the NameNode's own, so the kernel's inode numbers need no table of their own; only the mount's root (a
bucket, a directory below one, or the tree of all buckets) is renumbered to FUSE's root inode. In dataset mode the tree
is taken as immutable: every attribute, name and listing is fetched once and kept here, and the reader (reader.py)
finds a file's directory, its place in the listing and the directory's key prefix here for its prefetch and locates.
"""
from __future__ import annotations

import errno
import stat

import pyfuse3

from epochfs.common import errors
from epochfs.common.client import S3Client

from .options import MountOptions

NN_ROOT = 1


class InodeTable:
    def __init__(self, client: S3Client, opts: MountOptions) -> None:
        self.c, self.o = client, opts
        self.root = NN_ROOT
        self.bucket_of: dict[int, str] = {}
        self.attrs: dict[int, dict] = {}                 # dataset mode: every attribute seen
        self.names: dict[tuple[int, str], int] = {}      # dataset mode: (parent, name) -> inode
        self.listings: dict[int, list] = {}              # dataset mode: directory listings
        self.parent_of: dict[int, int] = {}              # dataset mode: a file's directory
        self.keys: dict[int, str] = {}                   # dataset mode: a directory's key prefix in its bucket
        self.dir_pos: dict[int, tuple[int, int]] = {}    # dataset mode: inode -> (directory, index in its listing)

    async def start(self) -> None:
        """Find the mount's root: the tree of buckets, a bucket, or a directory below one."""
        if self.o.bucket is None:
            return
        a = await self.c.fs_lookup(self.o.bucket, parent=NN_ROOT, name=self.o.bucket)
        parts = [p for p in self.o.prefix.split("/") if p]
        for part in parts:
            a = await self.c.fs_lookup(self.o.bucket, parent=a["ino"], name=part)
        if not stat.S_ISDIR(a["mode"]):
            raise errors.NotADirectory(f"{self.o.bucket}/{self.o.prefix} is not a directory")
        self.root = a["ino"]
        self.bucket_of[self.root] = self.o.bucket
        self.keys[self.root] = "".join(p + "/" for p in parts)

    def nn(self, ino: int) -> int:
        """The NameNode's inode for the kernel's."""
        return self.root if ino == pyfuse3.ROOT_INODE else ino

    def fuse(self, ino: int) -> int:
        """The kernel's inode for the NameNode's."""
        return pyfuse3.ROOT_INODE if ino == self.root else ino

    def remember(self, parent: int, name: str, a: dict) -> None:
        """Entry `name` of directory `parent` has attributes `a` (from a lookup, a listing or a change)."""
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

    def bucket(self, parent: int, other: int | None = None) -> str | None:
        """The bucket an operation happens in (the gateway checks the caller's permission on it; None: the root of
        the tree of buckets); EXDEV when it would cross buckets: they differ in block size and replication, like
        separate file systems."""
        bucket = self.bucket_of.get(parent, self.o.bucket)
        if other is not None and self.bucket_of.get(other, self.o.bucket) != bucket:
            raise pyfuse3.FUSEError(errno.EXDEV)
        return bucket

    async def getattr(self, ino: int) -> dict:
        if self.o.dataset and ino in self.attrs:
            return self.attrs[ino]
        a = await self.c.fs_getattr(self.bucket(ino), ino=ino)
        if self.o.dataset:
            self.attrs[ino] = a
        return a

    async def listing(self, ino: int) -> list:
        """Every entry of directory `ino` as (name, attributes)."""
        if self.o.dataset and ino in self.listings:
            return self.listings[ino]
        out, after = [], ""
        while True:
            page = await self.c.fs_readdir(self.bucket(ino), ino=ino, after=after)
            out += page["entries"]
            if page["next"] is None:
                break
            after = page["next"]
        if self.o.dataset:
            self.listings[ino] = out
            for i, (_, a) in enumerate(out):
                self.dir_pos[a["ino"]] = (ino, i)
        return out
