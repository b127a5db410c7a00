"""What a client sends, checked at the edge: integers (in the query, headers, XML and JSON bodies) and the values a
response echoes back into its headers.

An integer is plain decimal digits, as S3 writes them: no sign, space, underscore, exponent or non-ASCII digit
(Python's int() takes all of those). Whatever range a caller allows, nothing past MAX_INT reaches the NameNode, whose
messages carry 64-bit integers.
"""
from __future__ import annotations

import re

from epochfs.common import errors

MAX_INT = (1 << 63) - 1
INT32 = (1 << 31) - 1
_DIGITS = re.compile(r"[0-9]+")
_CANONICAL = re.compile(r"0|[1-9][0-9]*")
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what an HTTP header value may not hold (a tab may be there)


def digits(s: str, *, canonical: bool = True) -> int | None:
    """The value of a decimal integer written plainly (canonical: without leading zeros), capped at MAX_INT + 1 so
    a caller's range check catches any huge one; None if `s` is not such a number."""
    if not (_CANONICAL if canonical else _DIGITS).fullmatch(s):
        return None
    s = s.lstrip("0") or "0"
    return MAX_INT + 1 if len(s) > 19 else min(int(s), MAX_INT + 1)


def int_arg(value: str | None, name: str, default: int, lo: int = 0, hi: int = INT32,
            msg: str | None = None) -> int:
    """A request's integer argument `name` (query parameter or header) in [lo, hi]; InvalidArgument otherwise."""
    if value is None:
        return default
    n = digits(value)
    if n is None or not lo <= n <= hi:
        raise errors.InvalidInput(msg or f"Provided {name} not an integer or within integer range",
                                  argument=name, value=value)
    return n


def part_number(value: str) -> int:
    return int_arg(value, "partNumber", 0, 1, 10000,
                   "Part number must be an integer between 1 and 10000, inclusive")


def json_ints_in_range(value, lo: int = -MAX_INT - 1, hi: int = MAX_INT) -> bool:
    """Are all the numbers in a parsed JSON value integers or finite floats within [lo, hi]?"""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, (int, float)):
        return lo <= value <= hi
    if isinstance(value, dict):
        return all(json_ints_in_range(v, lo, hi) for v in value.values())
    if isinstance(value, list):
        return all(json_ints_in_range(v, lo, hi) for v in value)
    return True


def header_value(value: str, name: str) -> str:
    """`value` as a response header's value, if it is one: InvalidArgument for a control character (CR or LF would
    end the header; the server refuses to send any of them and drops the connection)."""
    if _CTL.search(value):
        raise errors.InvalidInput(f"Header value of {name} contains a character not allowed in HTTP headers",
                                  argument=name)
    return value
