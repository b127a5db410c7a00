"""S3 keys as paths in the namespace: the one place that decides which keys are valid."""
from __future__ import annotations

from . import errors

MAX_KEY_BYTES = 1024


def split_key(key: str) -> list[str]:
    """Path components of an S3 key; a trailing slash (a directory marker) leaves an empty last component.

    Rejected: empty keys, keys over 1,024 bytes of UTF-8, empty segments ("a//b", "/a"), "." and ".." segments and
    NUL characters -- anything that would not name exactly one place in the tree.
    """
    if not key:
        raise errors.InvalidKey("empty key")
    try:
        n = len(key.encode())
    except UnicodeEncodeError:
        raise errors.InvalidKey("key is not valid UTF-8") from None
    if n > MAX_KEY_BYTES:
        raise errors.KeyTooLong("Your key is too long", size=n)
    parts = key.split("/")
    for i, p in enumerate(parts):
        if p == "" and i != len(parts) - 1:
            raise errors.InvalidKey(f"key {key!r} has an empty path segment")
        if p in (".", "..") or "\x00" in p:
            raise errors.InvalidKey(f"key {key!r} has a '.', '..' or NUL path segment")
    return parts
