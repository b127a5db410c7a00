"""Multipart checksums: FULL_OBJECT combines part CRCs into the CRC of the whole; COMPOSITE hashes the part digests."""
import base64
import hashlib
import os

import pytest

from epochfs.common import checksums
from epochfs.common.checksums import COMPOSITE, FULL_OBJECT, combine, composite, multipart_types, new_hasher


def b64(alg: str, data: bytes) -> str:
    h = new_hasher(alg)
    h.update(data)
    return h.b64()


@pytest.mark.parametrize("alg", ["crc32", "crc32c", "crc64nvme"])
@pytest.mark.parametrize("sizes", [[1], [5, 3], [4096, 0, 77, 1 << 16], [0]])
def test_combine_equals_crc_of_concatenation(alg, sizes):
    parts = [os.urandom(n) for n in sizes]
    assert combine(alg, [(b64(alg, p), len(p)) for p in parts]) == b64(alg, b"".join(parts))


def test_combine_known_value():
    # CRC32 of "123456789" is the classic check value 0xCBF43926
    assert combine("crc32", [(b64("crc32", b"1234"), 4), (b64("crc32", b"56789"), 5)]) == \
        base64.b64encode(bytes.fromhex("cbf43926")).decode()


@pytest.mark.parametrize("alg", ["sha256", "sha1", "crc32c"])
def test_composite_hashes_the_binary_part_checksums(alg):
    parts = [b"A" * 10, b"B" * 3]
    digests = b"".join(base64.b64decode(b64(alg, p)) for p in parts)
    assert composite(alg, [b64(alg, p) for p in parts]) == f"{b64(alg, digests)}-2"


def test_composite_sha256_single_part():
    one = base64.b64encode(hashlib.sha256(b"x").digest()).decode()
    want = base64.b64encode(hashlib.sha256(hashlib.sha256(b"x").digest()).digest()).decode()
    assert composite("sha256", [one]) == f"{want}-1"


def test_multipart_types():
    assert multipart_types("crc64nvme") == (FULL_OBJECT,)
    assert multipart_types("crc32") == (COMPOSITE, FULL_OBJECT)
    assert multipart_types("crc32c") == (COMPOSITE, FULL_OBJECT)
    assert multipart_types("sha256") == (COMPOSITE,)
    assert set(checksums.ALGORITHMS) >= {"crc32", "crc32c", "crc64nvme", "sha1", "sha256"}
