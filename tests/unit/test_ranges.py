"""Ranged reads without the whole block list: the Range header parsed before the object's size is known, the
NameNode's stat cut to the blocks of the range, and the pieces planned from that cut."""
import pytest

from epochfs.common.blocks import covering
from epochfs.common.messages import BlockRef
from epochfs.gateway.cluster import plan_range
from epochfs.gateway.s3.errors import S3Error
from epochfs.gateway.s3.objects import parse_range, range_spec, stat_range
from epochfs.gateway.s3.sigv4 import parse_amz_date
from epochfs.gateway.s3.xml import http_date
from epochfs.namenode.api.objects import only_range

B = 4 << 20
SIZE = 2 * B + 1000
BLOCKS = [[11, B, 1, [1, 2, 3]], [12, B, 2, [2, 3, 1]], [13, 1000, 3, [3, 1, 2]]]


def test_range_spec_needs_no_size_and_parse_range_keeps_s3_semantics():
    assert range_spec("bytes=5-9") == (5, 9)
    assert range_spec(" bytes=5-") == (5, None)
    assert range_spec("bytes=-7") == (None, 7)
    for ignored in ("bytes=abc", "bytes=9-5", "bytes=1-2,4-5", "items=0-1", "bytes=5"):
        assert range_spec(ignored) is None and parse_range(ignored, SIZE) is None
    assert parse_range("bytes=0-0", SIZE) == (0, 1)
    assert parse_range(f"bytes={SIZE - 1}-", SIZE) == (SIZE - 1, SIZE)
    assert parse_range(f"bytes=10-{SIZE + 50}", SIZE) == (10, SIZE)  # clipped to the object
    assert parse_range("bytes=-1", SIZE) == (SIZE - 1, SIZE)
    assert parse_range(f"bytes=-{SIZE * 2}", SIZE) == (0, SIZE)
    for refused in (f"bytes={SIZE}-", "bytes=-0"):
        with pytest.raises(S3Error) as e:
            parse_range(refused, SIZE)
        assert e.value.code == "InvalidRange"


def test_stat_range_asks_for_what_parse_range_will_serve():
    assert stat_range("bytes=5-9") == (5, 10)
    assert stat_range("bytes=5-") == (5, None)
    assert stat_range("bytes=-7") == (-7, None)
    assert stat_range("bytes=-0") is None and stat_range("bytes=abc") is None  # refused or ignored: whole stat


def test_covering_returns_the_blocks_of_a_range_and_where_they_start():
    assert covering(BLOCKS, 0, 1) == (0, BLOCKS[:1])
    assert covering(BLOCKS, B - 1, B + 1) == (0, BLOCKS[:2])  # one byte each side of a boundary
    assert covering(BLOCKS, B, 2 * B) == (B, BLOCKS[1:2])  # exactly the second block
    assert covering(BLOCKS, SIZE - 1, SIZE) == (2 * B, BLOCKS[2:])
    assert covering(BLOCKS, 0, SIZE) == (0, BLOCKS)
    assert covering(BLOCKS, SIZE, SIZE + 5)[1] == [] and covering(BLOCKS, 7, 7)[1] == []


@pytest.mark.parametrize("spec", ["bytes=0-0", f"bytes={B - 1}-{B}", f"bytes={B}-{2 * B - 1}",
                                  f"bytes={B - 512}-{B + (1 << 20)}", "bytes=-1", f"bytes=-{SIZE + 9}",
                                  f"bytes={2 * B + 5}-", f"bytes=100-{SIZE * 3}"])
def test_a_cut_stat_plans_the_same_pieces_as_the_whole_one(spec):
    """What the gateway reads from a ranged stat (blocks from "boff" on) is what it read from the whole list."""
    rec = {"size": SIZE, "etag": '"e"', "blk": BLOCKS, "ps": [B, B + 1000], "pcs": ["a", "b"]}
    start, end = parse_range(spec, SIZE)
    cut = only_range(rec, stat_range(spec))
    assert "ps" not in cut and "pcs" not in cut and cut["size"] == SIZE and cut["etag"] == '"e"'
    assert len(cut["blk"]) <= 2 or end - start > B
    refs = [BlockRef(*b) for b in BLOCKS]
    assert plan_range([BlockRef(*b) for b in cut["blk"]], start - cut["boff"], end - cut["boff"]) == \
        plan_range(refs, start, end)
    assert rec["blk"] == BLOCKS  # the record itself is left alone


def test_parse_amz_date_is_strict():
    assert parse_amz_date("20261122T105500Z").isoformat() == "2026-11-22T10:55:00+00:00"
    for bad in ("2026112T1055001Z", "20261322T105500Z", "20261122T105500", "20261122 105500Z",
                "２0261122T105500Z", "2026-11-22T10:55Z"):
        with pytest.raises(ValueError):
            parse_amz_date(bad)


def test_http_date():
    assert http_date(1_763_808_900_123_456_789) == "Sat, 22 Nov 2025 10:55:00 GMT"
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
