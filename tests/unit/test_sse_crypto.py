"""gateway/crypto.py: per-block AES-256-CTR that decrypts from any offset, data keys wrapped and checked."""
from __future__ import annotations

import hashlib
import os

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from epochfs.gateway import crypto


def test_ctr_decrypts_any_piece_of_a_block():
    c = crypto.BlockCipher(os.urandom(32))
    data = os.urandom(70_001)
    sealed = bytes(c.apply(12345, 0, data))
    assert len(sealed) == len(data) and sealed != data
    for off, n in ((0, 1), (1, 15), (15, 2), (16, 16), (17, 40_000), (69_990, 11), (4096, 0)):
        assert bytes(c.apply(12345, off, sealed[off:off + n])) == data[off:off + n]


def test_each_block_has_its_own_key_stream():
    """The counter starts at block_id << 64: the same bytes in two blocks encrypt differently, and the stream is
    plain AES-CTR (any AES-CTR implementation decrypts a block given the data key and its id)."""
    key = os.urandom(32)
    c = crypto.BlockCipher(key)
    data = bytes(4096)
    assert c.apply(1, 0, data) != c.apply(2, 0, data)
    ref = Cipher(algorithms.AES(key), modes.CTR((7 << 64).to_bytes(16, "big"))).encryptor().update(data)
    assert bytes(c.apply(7, 0, data)) == ref


def test_wrapped_data_key_opens_only_with_its_key_and_purpose():
    kek, dk = os.urandom(32), crypto.new_data_key()
    w = crypto.wrap(kek, dk, b"p")
    assert crypto.unwrap(kek, w, b"p") == dk
    with pytest.raises(crypto.KeyUnwrapError):
        crypto.unwrap(os.urandom(32), w, b"p")
    with pytest.raises(crypto.KeyUnwrapError):
        crypto.unwrap(kek, w, b"q")
    assert crypto.wrap(kek, dk, b"p") != w  # a fresh nonce each time


def test_customer_key_check_and_kms_derivation():
    k = os.urandom(32)
    salt, mac = crypto.key_check(k)
    assert crypto.key_matches(k, salt, mac) and not crypto.key_matches(os.urandom(32), salt, mac)
    assert crypto.key_check(k)[1] != mac  # salted: the same key gives another record
    m = os.urandom(32)
    assert crypto.derive(m, "kms:a") == crypto.derive(m, "kms:a") != crypto.derive(m, "kms:b")


def test_etag_of_is_not_the_md5():
    md5 = hashlib.md5(b"data").hexdigest()
    e = crypto.etag_of(md5, os.urandom(32))
    assert len(e) == 32 and e != md5 and int(e, 16) >= 0
