"""Object and bucket tag sets, as S3 defines them: the limits and the `x-amz-tagging` header's form.

A tag set is stored as a dict sorted by key (object records' and bucket records' `tags`, common/messages.py), so the
same tags always read back in the same order, as Ceph RGW lists them. Checked wherever a tag set enters: the gateway
(every S3 path: PutObjectTagging, the header on PUT, copy, multipart, POST forms; PutBucketTagging; the admin API) and
again by the NameNode before it stores one.
"""
from __future__ import annotations

import unicodedata
from urllib.parse import parse_qsl

from . import errors

MAX_OBJECT_TAGS = 10
MAX_BUCKET_TAGS = 50
MAX_KEY_CHARS = 128
MAX_VALUE_CHARS = 256
_EXTRA = frozenset("_.:/=+-@")


def _allowed(text: str) -> bool:
    """Letters, numbers and spaces of any script and _ . : / = + - @ (AWS's [\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*)."""
    return all(c in _EXTRA or unicodedata.category(c)[0] in "LZN" for c in text)


def check(pairs: list[tuple[str, str]] | dict[str, str], limit: int) -> dict[str, str]:
    """A tag set (pairs in the order given) as stored: a dict sorted by key; InvalidTag if it breaks a rule."""
    items = list(pairs.items()) if isinstance(pairs, dict) else list(pairs)
    if len(items) > limit:
        raise errors.InvalidTag(f"Object tags cannot be greater than {limit}" if limit == MAX_OBJECT_TAGS
                                else f"Bucket tags cannot be greater than {limit}")
    out: dict[str, str] = {}
    for k, v in items:
        if not isinstance(k, str) or not isinstance(v, str):
            raise errors.InvalidTag("The TagKey and TagValue must be strings")
        if not 1 <= len(k) <= MAX_KEY_CHARS:
            raise errors.InvalidTag(f"The TagKey you have provided is invalid (1 to {MAX_KEY_CHARS} characters)")
        if len(v) > MAX_VALUE_CHARS:
            raise errors.InvalidTag(f"The TagValue you have provided is too long (at most {MAX_VALUE_CHARS})")
        if not _allowed(k) or not _allowed(v):
            raise errors.InvalidTag("The TagKey or TagValue you have provided contains characters that are not "
                                    "allowed")
        if k.lower().startswith("aws:"):
            raise errors.InvalidTag("Your TagKey cannot be prefixed with aws:")
        if k in out:
            raise errors.InvalidTag("Cannot provide multiple Tags with the same key")
        out[k] = v
    return dict(sorted(out.items()))


def parse_header(value: str, limit: int = MAX_OBJECT_TAGS) -> dict[str, str]:
    """The `x-amz-tagging` header (a URL query: "k1=v1&k2", a key without "=" has the value "") as a checked tag
    set; an empty header is no tags."""
    if not value.strip():
        return {}
    try:
        pairs = parse_qsl(value, keep_blank_values=True, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise errors.InvalidTag("The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query "
                                "parameters without tag name duplicates.") from None
    return check(pairs, limit)
