"""Incremental checksums with one interface: update(data), digest() -> bytes, b64() -> S3's base64 form; and the two
ways S3 derives a multipart object's checksum from its parts' (COMPOSITE, FULL_OBJECT).

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
COMPOSITE, FULL_OBJECT = "COMPOSITE", "FULL_OBJECT"
# CRCs of adjacent pieces combine into the CRC of the whole, so only they can give a multipart object a FULL_OBJECT
# checksum; CRC64/NVME can give nothing else.
_COMBINE = {"crc32": _crt.combine_crc32, "crc32c": _crt.combine_crc32c, "crc64nvme": _crt.combine_crc64nvme}


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


def multipart_types(alg: str) -> tuple[str, ...]:
    """The multipart checksum types S3 allows for `alg`, the default first."""
    if alg == "crc64nvme":
        return (FULL_OBJECT,)
    return (COMPOSITE, FULL_OBJECT) if alg in _COMBINE else (COMPOSITE,)


def composite(alg: str, part_values: list[str]) -> str:
    """COMPOSITE: the checksum of the parts' binary checksums concatenated, then "-<number of parts>"."""
    h = new_hasher(alg)
    for v in part_values:
        h.update(base64.b64decode(v))
    return f"{h.b64()}-{len(part_values)}"


def combine(alg: str, parts: list[tuple[str, int]]) -> str:
    """FULL_OBJECT: the CRC of the whole object, from each part's (base64 CRC, size) without reading any data."""
    fn, width = _COMBINE[alg], 8 if alg == "crc64nvme" else 4
    crc = 0
    for v, size in parts:
        crc = fn(crc, int.from_bytes(base64.b64decode(v), "big"), size)
    return base64.b64encode(crc.to_bytes(width, "big")).decode()
