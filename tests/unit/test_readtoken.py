import pytest

from epochfs.common import errors, readtoken


def test_a_token_opens_exactly_its_blocks_until_it_expires():
    grant = readtoken.issue("s3cret", [7, 3, 7, 12])
    assert grant["blocks"] == [3, 7, 12]
    readtoken.check("s3cret", grant, {3, 12})
    readtoken.check("s3cret", grant, set())
    with pytest.raises(errors.Unauthorized, match="does not cover"):
        readtoken.check("s3cret", grant, {3, 4})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("other-cluster", grant, {3})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("s3cret", {**grant, "blocks": [3, 4, 7, 12]}, {4})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("s3cret", {**grant, "exp": grant["exp"] + 3600}, {3})
    with pytest.raises(errors.Unauthorized, match="expired"):
        readtoken.check("s3cret", readtoken.issue("s3cret", [3], ttl_s=-1), {3})
    for bad in ({}, {"blocks": "x", "exp": 1, "tok": ""}, {"blocks": [1], "exp": None, "tok": "0"}):
        with pytest.raises(errors.Unauthorized):
            readtoken.check("s3cret", bad, {1})
