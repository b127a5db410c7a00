"""PyTorch datasets over epochfs:// (or any fsspec URL), and webdataset's gopen for epochfs:// URLs.

- `PrefixDataset`: map-style, every file under a prefix from one manifest (no per-file stat); `__getitems__` makes
  a DataLoader batch one batch request.
- `TarShards` (iterable, webdataset-style samples from tar shards) needs torch and is imported on first use, so
  `import epochfs.frontends.datasets` works without torch.
- `register_webdataset()`: `webdataset.WebDataset("epochfs://bucket/shard-{000..099}.tar")` works after it (not
  done on import: webdataset imports torch, 3 s). Forked DataLoader workers inherit it; with spawn, pass it as the
  DataLoader's worker_init_fn.

Both datasets shard by rank (given, or torch.distributed's when it is initialized) and by DataLoader worker
(TarShards splits shards; PrefixDataset leaves worker sharding to the DataLoader's sampler, which hands each worker
different batches). The fsspec filesystem they hold rebuilds its event loop and connections in each worker, forked or
spawned.
"""
from __future__ import annotations

import importlib

import fsspec

from .prefix import PrefixDataset, distributed_rank

__all__ = ["PrefixDataset", "TarShards", "distributed_rank", "register_webdataset"]


def __getattr__(name: str):
    if name == "TarShards":
        from .shards import TarShards
        return TarShards
    raise AttributeError(name)


def _gopen_epochfs(url: str, mode: str = "rb", bufsize: int = 8192, **kw):
    return fsspec.open(url, mode, block_size=8 << 20, cache_type="readahead").open()


def register_webdataset(*_) -> None:
    """Teach webdataset's gopen the epochfs:// scheme (usable as a DataLoader worker_init_fn)."""
    importlib.import_module("webdataset.gopen").gopen_schemes["epochfs"] = _gopen_epochfs

