"""A map-style dataset over every file under a prefix; a DataLoader batch is one batch read."""
from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

import fsspec


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) of torch.distributed if it is initialized, else (0, 1); torch is not imported for it."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class PrefixDataset:
    """Sample i is the bytes of the i-th file under `url` (S3 order), passed through `transform` if given.

    The listing is one streamed manifest, read once here: the workers of a DataLoader inherit (fork) or unpickle
    (spawn) it and never list again. With rank/world_size (default: torch.distributed's), this rank sees every
    world_size-th file. `__getitems__` is what DataLoader calls with a sampler's whole batch of indices, so the batch
    costs one request (cat_ranges on epochfs://; other filesystems fetch per file).
    """

    def __init__(self, url: str, *, suffixes: Sequence[str] | None = None, transform: Callable | None = None,
                 rank: int | None = None, world_size: int | None = None, storage_options: dict | None = None):
        self._url, self._opts = url, storage_options or {}
        self._fs, root = fsspec.core.url_to_fs(url, **self._opts)
        self._pid = os.getpid()
        files = self._fs.find(root, detail=True)
        names = sorted(n for n, e in files.items() if e["type"] == "file"
                       and (not suffixes or n.endswith(tuple(suffixes))))
        if rank is None or world_size is None:
            rank, world_size = distributed_rank()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, {world_size})")
        self.paths: list[str] = names[rank::world_size]
        self.sizes: list[int] = [files[n]["size"] for n in self.paths]
        self.transform = transform

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """This process's filesystem: a forked or spawned worker builds its own (epochfs:// would cope with the
        parent's, but s3fs and others refuse to run in a child)."""
        if self._pid != os.getpid():
            self._fs = fsspec.core.url_to_fs(self._url, **self._opts)[0]
            self._pid = os.getpid()
        return self._fs

    def __len__(self) -> int:
        return len(self.paths)

    def _out(self, data: bytes):
        return self.transform(data) if self.transform is not None else data

    def __getitem__(self, i: int):
        return self._out(self.fs.cat_file(self.paths[i]))

    def __getitems__(self, indices: Sequence[int]) -> list:
        datas = self.fs.cat_ranges([self.paths[i] for i in indices], None, None, on_error="raise")
        return [self._out(d) for d in datas]
