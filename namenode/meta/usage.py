"""Bucket usage and quotas, kept in the same batch as every commit or delete."""
from __future__ import annotations

from epochfs.common import errors
from epochfs.common.kv import prefix_end

from .. import keys
from ..keys import ROOT_INO
from .base import StoreBase
from .records import visible_summary


class Usage(StoreBase):
    """Bytes and objects per bucket (S), cached in memory.

    A bucket's usage counts the current, visible version of each key (delete markers, noncurrent versions,
    directory markers and unfinished multipart parts are not counted); every commit or delete adjusts it in its
    own write batch, so usage and namespace never disagree."""

    def usage(self, bucket_ino: int) -> list[int]:
        """[bytes, objects] of a bucket; counted once by a walk for buckets made before usage was kept."""
        u = self._usage.get(bucket_ino)
        if u is None:
            raw = self.kv.get(keys.usage(bucket_ino))
            u = self._dec(raw) if raw is not None else self._count_usage(bucket_ino)
            self._usage[bucket_ino] = u
        return u

    def _count_usage(self, bucket_ino: int) -> list[int]:
        total = [0, 0]
        for kind, _, val in self._walk(bucket_ino, "", "", "", prune=False):
            if kind == "f":
                size, n = visible_summary(self._dec(val[1][8:]))
                total[0] += size
                total[1] += n
        return total

    def add_usage(self, b, bucket_ino: int, dbytes: int, dobjects: int) -> None:
        u = self.usage(bucket_ino)
        u = [max(u[0] + dbytes, 0), max(u[1] + dobjects, 0)]
        self._usage[bucket_ino] = u
        b.put(keys.usage(bucket_ino), self._enc(u))

    def _usage_delta(self, bucket: str, key: str, obj: dict) -> tuple[int, int]:
        """What committing `obj` at `key` changes in the bucket's usage; raises QuotaExceeded if that goes over the
        bucket's quota (only growth is refused: an overwrite that shrinks always passes)."""
        if key.endswith("/") or obj.get("dm"):  # a delete marker is put only where no object is visible
            return 0, 0
        try:
            parent, name, _ = self._resolve(bucket, key)
            raw = self.kv.get(keys.entry(parent, name, False))
        except errors.NoSuchKey:
            raw = None
        old = visible_summary(self._dec(raw[8:])) if raw is not None else (0, 0)
        delta = (int(obj.get("size", 0)) - old[0], 1 - old[1])
        info = self.bucket_info(bucket)
        used = self.usage(info["ino"])
        for i, (field, what) in enumerate((("qb", "bytes"), ("qo", "objects"))):
            limit = info.get(field)
            if limit is not None and delta[i] > 0 and used[i] + delta[i] > int(limit):
                raise errors.QuotaExceeded(f"The bucket's quota of {int(limit)} {what} would be exceeded "
                                           f"({used[i]} used, this request adds {delta[i]}).", bucket=bucket)
        return delta

    def bucket_usage(self) -> dict[str, list[int]]:
        p = keys.entries(ROOT_INO)
        return {k[9:-1].decode(): self.usage(int.from_bytes(v, "big"))
                for k, v in self.kv.scan(p, prefix_end(p)) if k.endswith(b"/")}
