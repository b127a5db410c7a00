"""The gateway's read plans and the mount's write layout as typed messages (common/messages.py): a located reply decodes
into its types with named fields, a malformed one is refused with an error that says where, and the wire bytes are the
ones the untyped dicts had (so clients and gateways from before the change work with those after it)."""
from __future__ import annotations

import msgspec
import orjson
import pytest

from epochfs.common import messages as m
from epochfs.common.blocks import piece_starts, pieces_within
from epochfs.common.client import MalformedReply, _decode_batch_index, _decode_batch_located, \
    _decode_file_located, _reply

GRANT = {"blocks": [11, 12], "exp": 1_800_000_000, "tok": "ab" * 32}
ADDRS = {"1": "127.0.0.1:9101", "2": "127.0.0.1:9102"}


def test_a_file_locate_reply_decodes_into_its_types_and_encodes_back_to_the_same_bytes():
    wire = orjson.dumps({"etag": '"e1"', "size": 9, "p": [[11, 4, 5, [1, 2]], [12, 0, 4, [2]]], "addrs": ADDRS,
                         "grant": GRANT})  # what the gateway sent before the types
    r = _reply(_decode_file_located, wire, "locate")
    assert r.etag == '"e1"' and r.size == 9 and r.addrs == ADDRS
    assert r.pieces == [m.LocatedPiece(id=11, offset=4, length=5, nodes=(1, 2)),
                        m.LocatedPiece(id=12, offset=0, length=4, nodes=(2,))]
    assert r.grant == m.ReadGrant(**GRANT)
    assert msgspec.json.encode(r) == wire


def test_a_batch_locate_reply_keeps_items_and_errors_apart():
    wire = orjson.dumps({"items": [{"len": 0, "size": 0, "etag": "e0", "mt": 7, "p": []},
                                   {"err": "NoSuchKey", "msg": "The specified key does not exist."},
                                   {"len": 3, "size": 10, "etag": "e2", "mt": 8, "p": [[11, 2, 3, [1]]]}],
                         "addrs": ADDRS, "grant": GRANT})
    r = _reply(_decode_batch_located, wire, "locate")
    empty, missing, ranged = r.items
    assert empty.length == 0 and empty.pieces == [] and empty.err is None  # an empty object succeeded
    assert missing.err == "NoSuchKey" and missing.length is None and missing.pieces is None
    assert ranged.length == 3 and ranged.pieces[0].offset == 2 and ranged.pieces[0].nodes == (1,)
    assert msgspec.json.encode(r) == wire
    index = orjson.dumps({"items": [{"len": 3, "size": 10, "etag": "e", "mt": 1}, {"err": "AccessDenied",
                                                                                   "msg": "Access Denied"}]})
    assert msgspec.json.encode(_reply(_decode_batch_index, index, "batch")) == index


@pytest.mark.parametrize("body, where", [
    ({"etag": "e", "size": 9, "p": [[11, 4, "5", [1]]], "addrs": {}, "grant": GRANT}, "$.p[0][2]"),
    ({"etag": "e", "size": 9, "p": [[11, 4, 5]], "addrs": {}, "grant": GRANT}, "$.p[0]"),
    ({"etag": "e", "size": 9, "p": [], "addrs": {}}, "grant"),
    ({"etag": "e", "size": 9, "p": [], "addrs": {}, "grant": {"blocks": [], "exp": "soon", "tok": ""}},
     "$.grant.exp"),
])
def test_a_malformed_locate_reply_is_refused_saying_where(body, where):
    with pytest.raises(MalformedReply, match="malformed locate reply") as e:
        _reply(_decode_file_located, orjson.dumps(body), "locate")
    assert where in str(e.value)
    with pytest.raises(MalformedReply, match="malformed locate reply"):
        _reply(_decode_file_located, b"<Error>not json</Error>", "locate")


def test_pieces_within_cuts_the_pieces_of_a_range_and_keeps_whole_ones_as_they_are():
    pieces = [m.LocatedPiece(id=1, offset=0, length=10, nodes=(1,)), m.LocatedPiece(id=2, offset=0, length=10,
                                                                                   nodes=(2, 1)),
              m.LocatedPiece(id=3, offset=0, length=5, nodes=(3,))]
    starts = piece_starts(pieces, 100)
    assert starts == [100, 110, 120]
    got = pieces_within(pieces, starts, 105, 122)
    assert got == [m.LocatedPiece(id=1, offset=5, length=5, nodes=(1,)), pieces[1],
                   m.LocatedPiece(id=3, offset=0, length=2, nodes=(3,))]
    assert got[1] is pieces[1]
    assert pieces_within(pieces, starts, 125, 130) == []


def test_a_write_layout_has_the_wire_form_of_before_and_the_gateway_refuses_a_bad_one():
    layout = m.FileWrite(base='"v1"', size=25, segs=[m.KeepBlock(id=1), m.NewExtent(length=10), m.KeepBlock(id=3)])
    assert msgspec.json.encode(layout) == orjson.dumps({"base": '"v1"', "size": 25,
                                                        "segs": [["k", 1], ["n", 10], ["k", 3]]})
    assert msgspec.json.encode(layout.segs) == b'[["k",1],["n",10],["k",3]]'  # what the ETag's MD5 covers
    assert b'"mt"' not in msgspec.json.encode(layout)
    decode = msgspec.json.Decoder(m.FileWrite).decode
    assert decode(b'{"base":null,"size":3,"segs":[["n",3]],"mt":5}') == \
        m.FileWrite(base=None, size=3, segs=[m.NewExtent(length=3)], mt=5)
    for bad in (b'{"base":null,"size":3,"segs":[["x",3]]}', b'{"base":null,"size":3,"segs":[["n",-1]]}',
                b'{"base":null,"size":-3,"segs":[]}', b'{"size":3,"segs":[]}',
                b'{"base":null,"size":3,"segs":[["n",true]]}'):
        with pytest.raises(msgspec.ValidationError):
            decode(bad)
