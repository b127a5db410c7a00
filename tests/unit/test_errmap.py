"""The frontends' one table from domain errors to errnos (frontends/errmap.py), as fsspec and the mount see it."""
import errno

import httpx
import pyfuse3
import pytest
import trio

from epochfs.common import errors
from epochfs.common.client import _error
from epochfs.frontends import errmap
from epochfs.frontends.fuse.ops import EpochOperations
from epochfs.frontends.fuse.options import MountOptions


def test_a_quota_is_edquot():
    assert errmap.to_errno(errors.QuotaExceeded("bucket b would exceed its quota")) == errno.EDQUOT
    e = errmap.to_oserror(errors.QuotaExceeded("bucket b would exceed its quota"), "b/k")
    assert e.errno == errno.EDQUOT and e.filename == "b/k" and "quota" in e.strerror


def test_fsspec_meets_a_quota_as_edquot():
    """The S3 client (under fsspec) reads the gateway's 403 QuotaExceeded as the quota, not as a refused key."""
    body = b"<Error><Code>QuotaExceeded</Code><Message>The bucket's quota would be exceeded</Message></Error>"
    exc = _error(httpx.Response(403), body, "/b/k")
    assert isinstance(exc, errors.QuotaExceeded) and errmap.to_oserror(exc, "b/k").errno == errno.EDQUOT


class Failing:
    """A gateway whose namespace calls all fail with one domain error."""

    def __init__(self, exc: errors.DomainError) -> None:
        self.exc = exc

    async def fs_mkdir(self, bucket: str | None, **args):
        raise self.exc


@pytest.mark.parametrize("exc, code", [(errors.QuotaExceeded("over"), errno.EDQUOT),
                                       (errors.NotFound("gone"), errno.ENOENT),
                                       (errors.DomainError("?"), errno.EIO)])
def test_the_mount_answers_the_errno_of_the_table(exc, code):
    ops = EpochOperations(Failing(exc), MountOptions(bucket="b"))
    with pytest.raises(pyfuse3.FUSEError) as e:
        trio.run(ops.mkdir, 5, b"d", 0o755, type("Ctx", (), {"uid": 0, "gid": 0})())
    assert e.value.errno == code
