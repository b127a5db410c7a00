import msgspec
import pytest

from epochfs.common import errors, messages as m, readtoken
from epochfs.common.rpc import RpcServer


def test_a_token_opens_exactly_its_blocks_until_it_expires():
    grant = readtoken.issue("s3cret", [7, 3, 7, 12])
    assert grant.blocks == [3, 7, 12]
    readtoken.check("s3cret", grant, {3, 12})
    readtoken.check("s3cret", grant, set())
    with pytest.raises(errors.Unauthorized, match="does not cover"):
        readtoken.check("s3cret", grant, {3, 4})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("other-cluster", grant, {3})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("s3cret", msgspec.structs.replace(grant, blocks=[3, 4, 7, 12]), {4})
    with pytest.raises(errors.Unauthorized, match="bad read token"):
        readtoken.check("s3cret", msgspec.structs.replace(grant, exp=grant.exp + 3600), {3})
    with pytest.raises(errors.Unauthorized, match="expired"):
        readtoken.check("s3cret", readtoken.issue("s3cret", [3], ttl_s=-1), {3})
    for bad in (dict(blocks=[-1], exp=grant.exp, tok="00"), dict(blocks=[1], exp=2 ** 64 - 1, tok="00"),
                dict(blocks=[1], exp=grant.exp, tok="\u00e9")):
        with pytest.raises(errors.Unauthorized, match="bad read token"):
            readtoken.check("s3cret", m.ReadGrant(**bad), {1})


def test_a_malformed_grant_is_refused_before_any_read():
    async def read_tokened(req, _):
        raise AssertionError("a malformed request reached the handler")

    server = RpcServer({m.ReadTokened: read_tokened}, "s3cret")
    for grant in ('{}', '{"blocks":"x","exp":1,"tok":""}', '{"blocks":[1],"exp":null,"tok":"0"}'):
        with pytest.raises(errors.InvalidInput, match="bad rpc request"):
            server.decode(b'{"op":"read_tokened","reads":[[1,0,5]],"grant":%s}' % grant.encode())
    with pytest.raises(errors.InvalidInput):
        server.decode(b'{"op":"read_tokened","reads":[[1,0,5]]}')  # no grant at all
    op, req, _ = server.decode(b'{"op":"read_tokened","reads":[[1,0,5]],"grant":{"blocks":[1],"exp":9,"tok":"ab"}}')
    assert (op, req) == ("read_tokened", m.ReadTokened(reads=[m.BlockRead(1, 0, 5)],
                                                       grant=m.ReadGrant(blocks=[1], exp=9, tok="ab")))
