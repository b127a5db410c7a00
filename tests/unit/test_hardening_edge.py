"""Issue 18 at the edge, in process: which Host names a bucket (virtual-host style), and the V2 signature of such a
request. (What a SigV4 signature must cover is tested against the live gateway:
tests/integration/test_hardening_edge.py.)"""
import base64
import datetime as dt
import hashlib
import hmac
from email.utils import format_datetime

import pytest

from epochfs.gateway.s3.errors import S3Error
from epochfs.gateway.s3.router import vhost_bucket
from epochfs.gateway.s3.sigv4 import SigV4Verifier, parse_users

USERS = {u.access_key: u for u in parse_users("AKID:secret1:o1:one")}


def test_v2_signature_of_a_virtual_host_request_covers_the_bucket():
    date = format_datetime(dt.datetime.now(dt.timezone.utc), usegmt=True)
    sts = f"GET\n\n\n{date}\n/bkt/key"
    sig = base64.b64encode(hmac.new(b"secret1", sts.encode(), hashlib.sha1).digest()).decode()
    h = {"host": "bkt.example.test", "date": date, "authorization": f"AWS AKID:{sig}"}
    v = SigV4Verifier(USERS)
    assert v.verify("GET", b"/key", [], h, vhost_bucket="bkt") is not None
    with pytest.raises(S3Error):
        v.verify("GET", b"/key", [], h, vhost_bucket="other")


@pytest.mark.parametrize("host,domain,bucket", [
    ("b.example.test", "example.test", "b"),
    ("b.example.test:9000", "example.test", "b"),
    ("My.Bucket.Example.Test.", "example.test", "my.bucket"),
    ("example.test", "example.test", None),
    ("example.test:9000", "example.test", None),
    ("notexample.test", "example.test", None),
    ("b.example.test", "", None),
    ("127.0.0.1:9000", "example.test", None),
    ("[::1]:9000", "example.test", None),
    (None, "example.test", None),
])
def test_vhost_bucket(host, domain, bucket):
    assert vhost_bucket(host, domain) == bucket
