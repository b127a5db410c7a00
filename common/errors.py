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


class NotLeader(Unavailable):
    """This NameNode is a standby (or was just deposed): it serves no namespace call. `details["leader"]` is the
    active NameNode's RPC address ("host:port") when known, else ""; clients go there (common/clients.py)."""


class TooStale(NotLeader):
    """A standby NameNode asked for a stale read (messages.StaleOk) cannot vouch for its freshness: it has not
    confirmed being at the metadata log's end within NN_STALE_READ_MAX_S, it has not applied the caller's `min_seq`
    yet, or the read needs what only the active one has. Clients ask the active NameNode instead."""


class StoreRefused(DomainError):
    """The NameNode's store refuses writes (a full disk, an I/O error): not a service out of reach (no other
    NameNode is tried for it), and the call may succeed once the disk has room again (S3: 503; the mount: ENOSPC)."""


class CorruptBlock(DomainError):
    """A stored block failed its checksum."""


class NoSuchVersion(NotFound):
    """The specified version does not exist."""


class MethodNotAllowed(DomainError):
    """The specified method is not allowed against this resource."""


class NoSuchBlock(NotFound):
    """The block is not stored here."""


class Unauthorized(DomainError):
    """Internal RPC caller did not present the cluster secret (PermissionDenied: a caller without the right)."""


class QuotaExceeded(DomainError):
    """The request would take the bucket over its quota (bytes or objects)."""


# ---- finer meanings: each edge maps them (gateway/s3/errors.py to S3 codes, frontends/errmap.py to errnos); what a
# ---- class adds over its parent is a distinct answer at some edge, never an S3 code or an errno carried as a detail
class PermissionDenied(Unauthorized):
    """The caller may not do this to this resource."""


class OutsideBucket(PermissionDenied):
    """The operation reaches outside the bucket the request named."""


class NameTooLong(KeyTooLong):
    """A name in the path is longer than 255 bytes."""


class InvalidName(InvalidInput):
    """The name is not a valid directory entry name."""


class NotASymlink(InvalidInput):
    """The inode is not a symbolic link."""


class NotARegularFile(InvalidInput):
    """The inode is not a regular file."""


class InvalidMove(InvalidInput):
    """A directory can't be moved into itself or into a directory below it (that would detach a loop)."""


class EmptyPartList(InvalidInput):
    """A multipart upload was completed without naming any part."""


class EntityTooLarge(InvalidInput):
    """The upload exceeds the maximum allowed size."""


class ChecksumMismatch(InvalidInput):
    """The checksum given with the data does not match the data."""


class ChecksumModeMismatch(InvalidInput):
    """The checksum algorithm or type differs from the one the upload was created with."""


class FileChanged(PreconditionFailed):
    """The file was replaced since the writer opened it."""


class InvalidAttributeName(InvalidInput):
    """The extended attribute name is empty or longer than 255 bytes."""


class UnsupportedAttributeNamespace(MethodNotAllowed):
    """The extended attribute namespace is not supported."""


class NoSuchAttribute(NotFound):
    """The extended attribute does not exist."""


class AttributeTooLarge(InvalidInput):
    """The extended attribute value is larger than 64 KiB."""


class NoRoomForAttributes(InvalidInput):
    """The inode has no room for more extended attributes."""


class MalformedPolicy(InvalidInput):
    """The bucket policy is not valid JSON or not a valid policy."""


# ---- object lock and bucket logging (gateway/s3/objectlock.py, gateway/s3/bucket_logging.py)
class ObjectLocked(PermissionDenied):
    """Access Denied because object protected by object lock."""


class InvalidBucketState(Conflict):
    """The request is not valid for the current state of the bucket (object lock needs versioning Enabled, and a
    bucket with object lock can't have it suspended)."""


class ObjectLockNotEnabled(InvalidInput):
    """Bucket is missing Object Lock Configuration."""


class InvalidRetentionPeriod(InvalidInput):
    """The default retention period must be a positive whole number of days or years."""


class NoObjectLockConfiguration(NotFound):
    """Object Lock configuration does not exist for this bucket."""


class NoSuchObjectLockConfiguration(NotFound):
    """The specified object does not have a ObjectLock configuration."""


class InvalidLoggingTarget(InvalidInput):
    """The target bucket for logging does not exist, is not owned by you, or is not allowed."""


# ---- server-side encryption (gateway/s3/sse.py)
class EncryptedObject(PermissionDenied):
    """The object is encrypted server-side: only a gateway reads or writes its blocks."""


# ---- tagging and lifecycle (gateway/s3/tagging.py, gateway/s3/lifecycle.py)
class InvalidTag(InvalidInput):
    """A tag set breaks S3's rules: too many tags, a key or value too long, a repeated key, a character not
    allowed, a reserved "aws:" key."""


class InvalidConfiguration(InvalidInput):
    """A configuration whose parts contradict each other (a lifecycle rule's actions and its filter)."""


def by_name(name: str) -> type[DomainError]:
    cls = globals().get(name)
    if isinstance(cls, type) and issubclass(cls, DomainError):
        return cls
    return DomainError
