"""Domain errors: raised anywhere in the system, mapped to S3 codes / errnos / HTTP statuses only at the edges.

Errors cross the internal RPC by class name (see common/rpc.py), so every class here must be importable by name.
"""
from __future__ import annotations


class DomainError(Exception):
    """Base of every error the system reports to a client."""

    def __init__(self, message: str = "", **details) -> None:
        super().__init__(message or self.__doc__ or type(self).__name__)
        self.details = details

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class NotFound(DomainError):
    """The resource does not exist."""


class NoSuchBucket(NotFound):
    """The specified bucket does not exist."""


class NoSuchKey(NotFound):
    """The specified key does not exist."""


class NoSuchUpload(NotFound):
    """The specified multipart upload does not exist."""


class Conflict(DomainError):
    """The request conflicts with the current state."""


class BucketNotEmpty(Conflict):
    """The bucket you tried to delete is not empty."""


class BucketAlreadyOwnedByYou(Conflict):
    """Your previous request to create the named bucket succeeded and you already own it."""


class BucketAlreadyExists(Conflict):
    """The requested bucket name is not available."""


class NotADirectory(Conflict):
    """A component of the path is a file, not a directory."""


class IsADirectory(Conflict):
    """The path names a directory."""


class DirectoryNotEmpty(Conflict):
    """The directory is not empty."""


class AlreadyExists(Conflict):
    """The target already exists."""


class InvalidInput(DomainError):
    """The request is not valid."""


class InvalidBucketName(InvalidInput):
    """The specified bucket is not valid."""


class InvalidKey(InvalidInput):
    """The specified key is not valid."""


class KeyTooLong(InvalidInput):
    """Your key is too long."""


class InvalidPart(InvalidInput):
    """One or more of the specified parts could not be found or did not match."""


class InvalidPartOrder(InvalidInput):
    """The list of parts was not in ascending order."""


class EntityTooSmall(InvalidInput):
    """Your proposed upload is smaller than the minimum allowed object size."""


class PreconditionFailed(DomainError):
    """At least one of the preconditions you specified did not hold."""


class Unavailable(DomainError):
    """A service needed for the request is not reachable."""


class NotEnoughReplicas(Unavailable):
    """Not enough live DataNodes to place the block."""


class NodeFull(Unavailable):
    """The DataNode has no room for the block (its capacity limit)."""


class CorruptBlock(DomainError):
    """A stored block failed its checksum."""


class NoSuchVersion(NotFound):
    """The specified version does not exist."""


class MethodNotAllowed(DomainError):
    """The specified method is not allowed against this resource."""


class NoSuchBlock(NotFound):
    """The block is not stored here."""


class Unauthorized(DomainError):
    """Internal RPC caller did not present the cluster secret."""


class QuotaExceeded(DomainError):
    """The request would take the bucket over its quota (bytes or objects)."""


def by_name(name: str) -> type[DomainError]:
    cls = globals().get(name)
    if isinstance(cls, type) and issubclass(cls, DomainError):
        return cls
    return DomainError
