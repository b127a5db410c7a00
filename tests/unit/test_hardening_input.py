"""Issue 18 (hardening), input at the edge, in process: the integer and header-value parsers every S3 handler
uses, and the RPC clients refusing a request they can't encode before sending anything."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import trio

from epochfs.common import errors
from epochfs.common.rpc import RpcClient, TrioRpcClient
from epochfs.gateway.s3 import args
from epochfs.gateway.s3.errors import from_domain
from epochfs.gateway.s3.objects import range_spec, stat_range

sys.path.insert(0, str(Path(__file__).parent))
from test_rpc_trio import SECRET, Echo, Echoed, _Server  # noqa: E402 (an RpcServer in a thread)


@pytest.mark.parametrize("s, want", [("0", 0), ("7", 7), ("10000", 10000), (str(2 ** 63 - 1), 2 ** 63 - 1),
                                     (str(2 ** 64), 2 ** 63), ("9" * 5000, 2 ** 63)])
def test_digits_caps_huge_values(s, want):
    assert args.digits(s) == want


@pytest.mark.parametrize("s", ["", "+1", "-1", " 1", "1 ", "1_0", "01", "0x1", "1e3", "١", "1.0"])
def test_digits_refuses_non_canonical(s):
    assert args.digits(s) is None


def test_digits_leading_zeros_where_allowed():
    assert args.digits("007", canonical=False) == 7 and args.digits("+7", canonical=False) is None


def test_int_arg_ranges():
    assert args.int_arg(None, "max-keys", 1000) == 1000
    assert args.int_arg("2147483647", "max-keys", 1000) == 2 ** 31 - 1
    for bad in ("2147483648", str(2 ** 64), "-1", "+1"):
        with pytest.raises(errors.InvalidInput) as e:
            args.int_arg(bad, "max-keys", 1000)
        err = from_domain(e.value)  # what the S3 client sees
        assert (err.code, err.status, err.extra["ArgumentName"]) == ("InvalidArgument", 400, "max-keys")
    with pytest.raises(errors.InvalidInput):
        args.part_number("10001")


def test_ranges_past_64_bits():
    assert range_spec(f"bytes=0-{2 ** 64}") == (0, 2 ** 63)
    assert range_spec(f"bytes=-{2 ** 64}") == (None, 2 ** 63)
    assert range_spec("bytes=+1-2") is None and range_spec("bytes=1-+2") is None and range_spec("bytes=-") is None
    first, last = stat_range(f"bytes={2 ** 70}-{2 ** 80}")
    assert first < 2 ** 63 and last < 2 ** 63  # fits the NameNode's 64-bit message (I64)


def test_json_ints_in_range():
    assert args.json_ints_in_range({"a": [1, -2, 2 ** 63 - 1, 1.5, None, "x", True]})
    assert not args.json_ints_in_range({"a": [2 ** 63]}) and not args.json_ints_in_range({"a": {"b": -2e19}})


@pytest.mark.parametrize("v", ["a\r\nb", "a\nb", "a\rb", "a\x00b", "a\x7fb", "a\x1bb"])
def test_header_values_with_control_characters(v):
    with pytest.raises(errors.InvalidInput) as e:
        args.header_value(v, "response-content-type")
    assert (from_domain(e.value).code, from_domain(e.value).status) == ("InvalidArgument", 400)
    assert args.header_value("a\tb é", "x") == "a\tb é"


def test_rpc_refuses_a_number_past_64_bits():
    """Before: TypeError (a 500 at the gateway), the connection dropped and its reply future never retrieved. Now a
    typed request's numbers are 64-bit by type: one past that is refused as InvalidInput when the server decodes it,
    before its handler runs, and the pooled connection keeps working."""
    server = _Server()
    try:
        async def main():
            c = RpcClient("127.0.0.1", server.port, SECRET)
            assert (await c.request(Echo(x=1)))[0] == Echoed(n=0, x=1)
            with pytest.raises(errors.InvalidInput):
                await c.request(Echo(x=2 ** 64))
            assert (await c.request(Echo(x=2)))[0] == Echoed(n=0, x=2)  # the same pooled connection still works
            assert len(c._idle) == 1
            await c.close()
        asyncio.run(main())

        async def trio_main():
            c = TrioRpcClient("127.0.0.1", server.port, SECRET)
            with pytest.raises(errors.InvalidInput):
                await c.request(Echo(x=-(2 ** 64)))
            assert (await c.request(Echo(x=3)))[0] == Echoed(n=0, x=3)
            await c.close()
        trio.run(trio_main)
    finally:
        server.stop()
