"""Incremental checksums with one interface: update(data), digest() -> bytes, b64() -> S3's base64 form.

CRC32 comes from zlib, CRC32C from the crc32c package, CRC64/NVME from awscrt (AWS's own implementation, the same
one botocore uses); SHA and MD5 from hashlib. hashlib releases the GIL on large buffers, so callers hash big blocks in a
worker thread.
"""
from __future__ import annotations

import base64
import hashlib
import zlib

import crc32c as _crc32c
from awscrt import checksums as _crt

ALGORITHMS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")


class _Crc:
    def __init__(self, fn, width: int) -> None:
        self._fn, self._width, self._v = fn, width, 0

    def update(self, data) -> None:
        self._v = self._fn(data, self._v)

    def digest(self) -> bytes:
        return self._v.to_bytes(self._width, "big")


class Hasher:
    def __init__(self, impl) -> None:
        self._impl = impl

    def update(self, data) -> None:
        self._impl.update(data)

    def digest(self) -> bytes:
        return self._impl.digest()

    def hexdigest(self) -> str:
        return self.digest().hex()

    def b64(self) -> str:
        return base64.b64encode(self.digest()).decode()


def new_hasher(alg: str) -> Hasher:
    alg = alg.lower()
    if alg == "crc32":
        return Hasher(_Crc(zlib.crc32, 4))
    if alg == "crc32c":
        return Hasher(_Crc(_crc32c.crc32c, 4))
    if alg == "crc64nvme":
        return Hasher(_Crc(lambda d, v: _crt.crc64nvme(bytes(d) if not isinstance(d, bytes) else d, v), 8))
    if alg in ("sha1", "sha256", "md5"):
        return Hasher(hashlib.new(alg))
    raise ValueError(f"unknown checksum algorithm {alg!r}")
