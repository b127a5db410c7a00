"""Bucket lifecycle rules, as S3 defines them: their checks, which objects a rule applies to, and when.

Shared by the gateway (PutBucketLifecycleConfiguration, the x-amz-expiration header) and the NameNode (which checks
a configuration again before storing it, and whose lifecycle worker applies it, namenode/lifecycle.py).

Time: S3 counts an object's age in days from its creation (a noncurrent version's from the moment it became
noncurrent) and rounds the resulting time up to the next midnight UTC. For tests the NameNode's "day" can be made
short (NN_LIFECYCLE_DAY_S, as Ceph RGW's rgw_lc_debug_interval): a day of any other length is not rounded.
"""
from __future__ import annotations

from collections.abc import Iterable

from . import errors, tagging
from .messages import LifecycleRule

DAY_S = 86_400
MAX_RULES = 1000
MAX_ID_CHARS = 255
MAX_DAYS = 2 ** 31 - 1  # S3's xs:int


def check(rules: list[LifecycleRule]) -> list[LifecycleRule]:
    """A lifecycle configuration's rules, or InvalidInput (S3's InvalidArgument) / InvalidConfiguration (S3's
    InvalidRequest) naming what is wrong."""
    if not 1 <= len(rules) <= MAX_RULES:
        raise errors.InvalidInput(f"A lifecycle configuration has 1 to {MAX_RULES} rules")
    ids: set[str] = set()
    for r in rules:
        if not 1 <= len(r.id) <= MAX_ID_CHARS:
            raise errors.InvalidInput(f"ID length should not exceed allowed limit of {MAX_ID_CHARS}",
                                      argument="ID", value=r.id[:MAX_ID_CHARS + 1])
        if r.id in ids:
            raise errors.InvalidInput("Rule ID must be unique. Found same ID for more than one rule",
                                      argument="ID", value=r.id)
        ids.add(r.id)
        f = r.filter
        if f is not None:
            tagging.check(f.tags, tagging.MAX_OBJECT_TAGS * 5)
            for v, what in ((f.size_gt, "ObjectSizeGreaterThan"), (f.size_lt, "ObjectSizeLessThan")):
                if v is not None and not 0 <= v <= 2 ** 63 - 1:
                    raise errors.InvalidInput(f"{what} must be a non-negative number of bytes", argument=what)
            if f.size_gt is not None and f.size_lt is not None and f.size_lt <= f.size_gt:
                raise errors.InvalidInput("ObjectSizeLessThan must be greater than ObjectSizeGreaterThan",
                                          argument="ObjectSizeLessThan")
        for v, what in ((r.expiration_days, "Days"), (r.noncurrent_days, "NoncurrentDays"),
                        (r.abort_upload_days, "DaysAfterInitiation")):
            if v is not None and not 1 <= v <= MAX_DAYS:
                raise errors.InvalidInput(f"'{what}' in the {'Expiration' if what == 'Days' else what} action must "
                                          "be a positive integer", argument=what, value=str(v))
        if r.newer_noncurrent is not None:
            if not 1 <= r.newer_noncurrent <= 100:
                raise errors.InvalidInput("NewerNoncurrentVersions must be between 1 and 100",
                                          argument="NewerNoncurrentVersions")
            if r.noncurrent_days is None:
                raise errors.InvalidConfiguration("NewerNoncurrentVersions needs NoncurrentDays")
        set_ = [x is not None and x is not False for x in (r.expiration_days, r.expiration_date,
                                                           r.expired_object_delete_marker)]
        if sum(set_) > 1:
            raise errors.InvalidConfiguration("Expiration takes one of Days, Date and ExpiredObjectDeleteMarker")
        if r.expiration_date is not None and r.expiration_date % (DAY_S * 10 ** 9):
            raise errors.InvalidInput("'Date' must be at midnight GMT", argument="Date")
        if f is not None and f.tags and (r.expired_object_delete_marker or r.abort_upload_days is not None):
            raise errors.InvalidConfiguration("ExpiredObjectDeleteMarker and AbortIncompleteMultipartUpload cannot be "
                                              "specified with Tags")
        if not any(x is not None for x in (r.expiration_days, r.expiration_date, r.expired_object_delete_marker,
                                           r.noncurrent_days, r.abort_upload_days)):
            raise errors.InvalidConfiguration("At least one action needs to be specified in a rule")
    return rules


def prefix_of(rule: LifecycleRule) -> str:
    return (rule.filter.prefix if rule.filter is not None else rule.prefix) or ""


def matches(rule: LifecycleRule, key: str, size: int, tags: dict[str, str] | None) -> bool:
    """Whether the rule's filter takes the object (tags None: not known, only rules without tag conditions)."""
    if not key.startswith(prefix_of(rule)):
        return False
    f = rule.filter
    if f is None:
        return True
    if f.tags and (tags is None or any(tags.get(k) != v for k, v in f.tags.items())):
        return False
    if f.size_gt is not None and not size > f.size_gt:
        return False
    return f.size_lt is None or size < f.size_lt


def needs_tags(rules: Iterable[LifecycleRule]) -> bool:
    return any(r.filter is not None and r.filter.tags for r in rules)


def due_ns(since_ns: int, days: int, day_s: float = DAY_S) -> int:
    """When an object `days` days old from `since_ns` is due: S3 rounds up to midnight UTC (a real day only)."""
    if day_s != DAY_S:
        return since_ns + int(days * day_s * 1e9)
    day = DAY_S * 10 ** 9
    t = since_ns + days * day
    return -(-t // day) * day


def expiry(rules: Iterable[LifecycleRule], key: str, size: int, tags: dict[str, str], mtime_ns: int
           ) -> tuple[int, str] | None:
    """(when, rule id) the current version expires by the earliest enabled rule that expires it, for the
    x-amz-expiration header (real days, as S3 states them)."""
    best = None
    for r in rules:
        if not r.enabled or not matches(r, key, size, tags):
            continue
        when = due_ns(mtime_ns, r.expiration_days) if r.expiration_days is not None else r.expiration_date
        if when is not None and (best is None or when < best[0]):
            best = (when, r.id)
    return best
