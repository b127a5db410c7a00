"""One error currency: the NameNode raises typed domain errors only, and each edge maps them with its one table
(S3 codes in gateway/s3/errors.py, errnos in frontends/errmap.py)."""
import errno
import re
from pathlib import Path

import pytest

from epochfs.common import errors
from epochfs.frontends import errmap
from epochfs.gateway.s3.errors import S3_ERRORS, from_domain

NAMENODE = Path(errors.__file__).resolve().parent.parent / "namenode"
S3_CODES = sorted({code for code, _ in S3_ERRORS.values()} | {
    "MalformedXML", "BadDigest", "InvalidRequest", "InvalidArgument", "AccessDenied", "EntityTooLarge",
    "KeyTooLongError", "NotImplemented", "SignatureDoesNotMatch"})


def _namenode_sources() -> list[tuple[Path, str]]:
    files = sorted(NAMENODE.rglob("*.py"))
    assert files, NAMENODE
    return [(f, f.read_text()) for f in files]


def test_namenode_speaks_neither_errno_nor_s3():
    for path, text in _namenode_sources():
        assert "errno" not in text, f"{path}: errnos belong to frontends/errmap.py"
        assert not re.search(r"\bcode\s*=", text), f"{path}: S3 codes belong to gateway/s3/errors.py"
        for code in S3_CODES:
            if code in errors.__dict__:  # a domain class named like its S3 code (NoSuchKey, InvalidPart, ...)
                continue
            assert not re.search(rf"[\"']{code}[\"']", text), f"{path}: S3 code {code!r} as a string"


# class, S3 (code, status), errno: what the NameNode's new errors mean at each edge
NEW = [
    (errors.OutsideBucket("inode 9 is not in the request's bucket"), ("AccessDenied", 403), errno.EACCES),
    (errors.PermissionDenied(), ("AccessDenied", 403), errno.EACCES),
    (errors.NameTooLong("name longer than 255 bytes"), ("KeyTooLongError", 400), errno.ENAMETOOLONG),
    (errors.InvalidName("invalid name '..'"), ("InvalidArgument", 400), errno.EINVAL),
    (errors.NotASymlink("inode 3 is not a symlink"), ("InvalidArgument", 400), errno.EINVAL),
    (errors.NotARegularFile("inode 3 is not a regular file"), ("InvalidArgument", 400), errno.EINVAL),
    (errors.InvalidMove("inode 3 is below inode 2"), ("InvalidArgument", 400), errno.EINVAL),
    (errors.EmptyPartList("You must specify at least one part"), ("MalformedXML", 400), errno.EINVAL),
    (errors.ChecksumMismatch("bad"), ("BadDigest", 400), errno.EINVAL),
    (errors.ChecksumModeMismatch("mode"), ("InvalidRequest", 400), errno.EINVAL),
    (errors.EntityTooLarge("big"), ("EntityTooLarge", 400), errno.EFBIG),
    (errors.FileChanged("inode 3 changed"), ("PreconditionFailed", 412), errno.ESTALE),
    (errors.InvalidAttributeName("empty"), ("InvalidArgument", 400), errno.ERANGE),
    (errors.UnsupportedAttributeNamespace("security."), ("MethodNotAllowed", 405), errno.EOPNOTSUPP),
    (errors.NoSuchAttribute("user.x"), ("InternalError", 500), errno.ENODATA),
    (errors.AttributeTooLarge("64 KiB"), ("InvalidArgument", 400), errno.E2BIG),
    (errors.NoRoomForAttributes("full"), ("InvalidArgument", 400), errno.ENOSPC),
    (errors.QuotaExceeded("over"), ("QuotaExceeded", 403), errno.EDQUOT),
    # the older classes the NameNode's POSIX operations raise keep their answers
    (errors.NotFound("no entry"), ("InternalError", 500), errno.ENOENT),
    (errors.NotADirectory("f"), ("OperationAborted", 409), errno.ENOTDIR),
    (errors.IsADirectory("d"), ("OperationAborted", 409), errno.EISDIR),
    (errors.AlreadyExists("x"), ("OperationAborted", 409), errno.EEXIST),
    (errors.DirectoryNotEmpty("d"), ("OperationAborted", 409), errno.ENOTEMPTY),
    (errors.MethodNotAllowed("mkdir at the root"), ("MethodNotAllowed", 405), errno.EPERM),
    (errors.InvalidInput("rename flags"), ("InvalidArgument", 400), errno.EINVAL),
]


@pytest.mark.parametrize("exc,s3,code", NEW, ids=[type(e).__name__ for e, _, _ in NEW])
def test_each_domain_error_has_its_s3_code_and_errno(exc, s3, code):
    err = from_domain(exc)
    assert (err.code, err.status) == s3  # InternalError: the mount's API answers it, never an S3 request
    if err.code != "InternalError":
        assert err.message == exc.message
    assert errmap.to_errno(exc) == code
    assert type(errors.by_name(type(exc).__name__)("m")) is type(exc)  # crosses the RPC and the mount's API by name


def test_s3_fields_come_from_details_in_order():
    err = from_domain(errors.InvalidInput("bad", argument="encoding-type", value="x"))
    assert (err.code, err.extra) == ("InvalidArgument", {"ArgumentName": "encoding-type", "ArgumentValue": "x"})
    err = from_domain(errors.PreconditionFailed("p", condition="If-Match", key="k"))
    assert err.extra == {"Condition": "If-Match"}  # details S3 doesn't show stay out of the document
    assert from_domain(errors.NoSuchKey("gone", key="k", bucket="b")).extra == {}


def test_domain_errors_carry_no_edge_codes():
    """What the NameNode raises is the class and a message: no `code`, no `errno` riding along."""
    from epochfs.common.kv import MemoryKV
    from epochfs.namenode.metastore import MetaStore
    from epochfs.namenode.posix import Posix
    m = MetaStore(MemoryKV())
    m.create_bucket("bkt", "owner")
    p = Posix(m)
    p.scope(m.bucket_ino("bkt"), "lookup", {"parent": m.bucket_ino("bkt"), "name": "x"})
    with pytest.raises(errors.NameTooLong) as e:
        p.lookup(m.bucket_ino("bkt"), "x" * 256)
    assert e.value.details == {}
    with pytest.raises(errors.OutsideBucket) as e:
        p.scope(None, "mkdir", {})
    assert e.value.details == {}
