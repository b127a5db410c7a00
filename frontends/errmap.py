"""Domain errors -> OSError subclasses and errnos, for the frontends that speak POSIX (fsspec, FUSE).

One table; the most specific class wins (looked up along the exception's MRO). The mount and fsspec pick errnos
nowhere else.
"""
from __future__ import annotations

import errno
import os
from contextlib import contextmanager
from typing import Iterator

from ..common import errors

ERRNO: dict[type[errors.DomainError], int] = {
    errors.NotFound: errno.ENOENT,
    errors.BucketNotEmpty: errno.ENOTEMPTY,
    errors.DirectoryNotEmpty: errno.ENOTEMPTY,
    errors.BucketAlreadyOwnedByYou: errno.EEXIST,
    errors.BucketAlreadyExists: errno.EEXIST,
    errors.AlreadyExists: errno.EEXIST,
    errors.NotADirectory: errno.ENOTDIR,
    errors.IsADirectory: errno.EISDIR,
    errors.KeyTooLong: errno.ENAMETOOLONG,
    errors.NoSuchAttribute: errno.ENODATA,
    errors.InvalidAttributeName: errno.ERANGE,
    errors.AttributeTooLarge: errno.E2BIG,
    errors.NoRoomForAttributes: errno.ENOSPC,
    errors.StoreRefused: errno.ENOSPC,
    errors.UnsupportedAttributeNamespace: errno.EOPNOTSUPP,
    errors.FileChanged: errno.ESTALE,
    errors.EntityTooLarge: errno.EFBIG,
    errors.InvalidInput: errno.EINVAL,
    errors.Unauthorized: errno.EACCES,
    errors.ObjectLocked: errno.EPERM,       # as an immutable file (chattr +i): not even root may remove it
    errors.MethodNotAllowed: errno.EPERM,
    errors.Unavailable: errno.EIO,          # not EAGAIN: that would be BlockingIOError
    errors.CorruptBlock: errno.EIO,
    errors.Conflict: errno.EBUSY,
    errors.QuotaExceeded: errno.EDQUOT,
}


def to_errno(exc: errors.DomainError) -> int:
    """The errno for `exc`, by its class alone (ENODATA for a missing extended attribute, E2BIG, ERANGE, ... have
    classes of their own)."""
    for cls in type(exc).__mro__:
        if cls in ERRNO:
            return ERRNO[cls]
    return errno.EIO


def to_oserror(exc: errors.DomainError, path: str | None = None) -> OSError:
    """OSError(errno, ...) picks the subclass itself: ENOENT -> FileNotFoundError, EEXIST -> FileExistsError, ..."""
    code = to_errno(exc)
    return OSError(code, exc.message or os.strerror(code), path)


@contextmanager
def as_oserror(path: str | None = None) -> Iterator[None]:
    try:
        yield
    except errors.DomainError as e:
        raise to_oserror(e, path) from e
