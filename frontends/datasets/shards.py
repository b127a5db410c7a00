"""An iterable dataset over tar shards, yielding webdataset-style samples; needs torch."""
from __future__ import annotations

import random
import tarfile
from typing import Callable, Iterator, Sequence

import fsspec
from torch.utils.data import IterableDataset, get_worker_info

from .prefix import distributed_rank

READ_BLOCK = 8 << 20  # a shard streams in ranged reads of this size, read ahead sequentially


def _samples(stream, url: str) -> Iterator[dict]:
    """Group consecutive tar members by key (the name up to the first dot of its base name), as webdataset does:
    {"__key__": "dir/0001", "__url__": url, "jpg": b"...", "cls": b"3"}."""
    sample: dict | None = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            if not m.isfile():
                continue
            d, _, base = m.name.rpartition("/")
            stem, dot, ext = base.partition(".")
            key = f"{d}/{stem}" if d else stem
            if sample is not None and sample["__key__"] != key:
                yield sample
                sample = None
            if sample is None:
                sample = {"__key__": key, "__url__": url}
            sample[ext if dot else ""] = tar.extractfile(m).read()
    if sample is not None:
        yield sample


class TarShards(IterableDataset):
    """Samples from tar shards: `urls` is a list of shard URLs or one URL of a prefix (its *.tar files, from one
    manifest). Shards are split first by rank (given, or torch.distributed's), then by DataLoader worker, so every
    sample is seen exactly once per epoch when the shard count divides evenly. shuffle=True shuffles the shard order
    per epoch (seeded with seed + epoch; call set_epoch)."""

    def __init__(self, urls: str | Sequence[str], *, shuffle: bool = False, seed: int = 0,
                 transform: Callable | None = None, rank: int | None = None, world_size: int | None = None,
                 storage_options: dict | None = None):
        self.storage_options = storage_options or {}
        if isinstance(urls, str):
            fs, root = fsspec.core.url_to_fs(urls, **self.storage_options)
            urls = [fs.unstrip_protocol(p) for p in sorted(fs.find(root)) if p.endswith(".tar")]
        self.urls = list(urls)
        if rank is None or world_size is None:
            rank, world_size = distributed_rank()
        self.rank, self.world_size = rank, world_size
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.transform = transform

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def shards(self) -> list[str]:
        """The shards this rank and worker read this epoch, in order."""
        urls = list(self.urls)
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(urls)
        info = get_worker_info()
        wid, nworkers = (info.id, info.num_workers) if info is not None else (0, 1)
        return urls[self.rank::self.world_size][wid::nworkers]

    def __iter__(self) -> Iterator[dict]:
        for url in self.shards():
            with fsspec.open(url, "rb", block_size=READ_BLOCK, cache_type="readahead",
                             **self.storage_options) as f:
                for s in _samples(f, url):
                    yield self.transform(s) if self.transform is not None else s
