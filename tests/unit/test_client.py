"""The client's SigV4 signatures pass the gateway's verifier (both use common/sigv4.py); errors map through tables."""
import asyncio
import errno
import socket
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from epochfs.common import defaults, errors
from epochfs.common.client import S3Client
from epochfs.frontends import errmap
from epochfs.gateway.s3.errors import S3Error
from epochfs.gateway.s3.sigv4 import SigV4Verifier, parse_users

USERS = {u.access_key: u for u in parse_users("AKID:secret1:o1:one")}


def _signed(client, method, bucket, key, query):
    headers = {}
    url = client._sign(method, client._path(bucket, key), query, headers)
    parts = urlsplit(url)
    return parts.path.encode(), parse_qsl(parts.query, keep_blank_values=True), headers


@pytest.mark.parametrize("key,query", [("plain", []), ("dir/ü ber+%.bin", [("prefix", "a/b c"), ("uploads", "")])])
def test_client_signature_verifies(key, query):
    c = S3Client("http://127.0.0.1:9", "AKID", "secret1")
    path, q, h = _signed(c, "GET", "bucket", key, query)
    assert SigV4Verifier(USERS).verify("GET", path, q, h).user.owner_id == "o1"
    bad = S3Client("http://127.0.0.1:9", "AKID", "wrong")
    path, q, h = _signed(bad, "GET", "bucket", key, query)
    with pytest.raises(S3Error):
        SigV4Verifier(USERS).verify("GET", path, q, h)


def test_client_from_environment(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.1:9000/")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SK")
    c = S3Client()
    assert (c.endpoint, c.access_key, c.secret_key) == ("http://10.0.0.1:9000", "AK", "SK")


def test_no_gateway_at_the_default_endpoint_says_how_to_get_one(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setattr(defaults, "ENDPOINT", closed)

    async def lookup(c: S3Client) -> None:
        async with c:
            await c.fs_lookup("b", parent=1, name="x")
    with pytest.raises(errors.Unavailable, match="AWS_ENDPOINT_URL unset.*epochfs up"):
        asyncio.run(lookup(S3Client(access_key="AK", secret_key="SK")))

    async def listing(c: S3Client) -> None:  # an S3 call (fsspec's ls): the same words, its error type kept
        async with c:
            await c.list_buckets()
    with pytest.raises(httpx.ConnectError, match="AWS_ENDPOINT_URL unset.*epochfs up"):
        asyncio.run(listing(S3Client(access_key="AK", secret_key="SK")))
    with pytest.raises(errors.Unavailable) as given:  # an endpoint given: the error names it, no guess to explain
        asyncio.run(lookup(S3Client(closed, "AK", "SK")))
    assert closed in str(given.value) and "epochfs up" not in str(given.value)


def test_errmap():
    assert isinstance(errmap.to_oserror(errors.NoSuchKey(), "b/k"), FileNotFoundError)
    assert isinstance(errmap.to_oserror(errors.BucketAlreadyOwnedByYou()), FileExistsError)
    assert isinstance(errmap.to_oserror(errors.Unauthorized()), PermissionError)
    assert errmap.to_errno(errors.BucketNotEmpty()) == errno.ENOTEMPTY
    assert errmap.to_errno(errors.DomainError()) == errno.EIO
