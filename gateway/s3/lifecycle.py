"""Bucket lifecycle configuration: Put/Get/DeleteBucketLifecycleConfiguration, and the x-amz-expiration header that
GET, HEAD and PUT answers carry for an object a rule will expire. The rules are applied by the NameNode's lifecycle
worker (namenode/lifecycle.py).

The XML is S3's: <LifecycleConfiguration> of up to 1,000 <Rule>s, each with an <ID> (made up if missing), a <Filter>
(<Prefix>, <Tag>, <ObjectSizeGreaterThan>, <ObjectSizeLessThan>, or several in <And>) or the older top-level
<Prefix>, a <Status>, and its actions: <Expiration> (<Days>, <Date> or <ExpiredObjectDeleteMarker>),
<NoncurrentVersionExpiration> (<NoncurrentDays>, <NewerNoncurrentVersions>), <AbortIncompleteMultipartUpload>
(<DaysAfterInitiation>). Storage-class transitions have no meaning here (one storage class): a rule with one is
refused as NotImplemented. A document that does not follow the schema is MalformedXML; values out of range are
InvalidArgument, contradicting parts InvalidRequest; nothing is stored then.
"""
from __future__ import annotations

import datetime as dt
import re
import uuid

from epochfs.common import lifecycle
from epochfs.common.messages import LifecycleFilter, LifecycleRule, Unset

from . import xml
from .body import read_all
from .bucket import bucket_owned
from .errors import S3Error, malformed_xml, not_implemented
from .http import Response

MAX_BODY = 1 << 20
_INT = re.compile(r"-?[0-9]{1,19}")
_RULE_PARTS = {"ID", "Filter", "Prefix", "Status", "Expiration", "NoncurrentVersionExpiration",
               "AbortIncompleteMultipartUpload", "Transition", "NoncurrentVersionTransition"}


def _one(el, name: str):
    found = el.findall(name)
    if len(found) > 1:
        raise malformed_xml()
    return found[0] if found else None


def _int(el, name: str) -> int | None:
    found = _one(el, name)
    if found is None:
        return None
    text = (found.text or "").strip()
    if not _INT.fullmatch(text):
        raise malformed_xml()
    return int(text)


def _bool(el, name: str) -> bool | None:
    found = _one(el, name)
    if found is None:
        return None
    text = (found.text or "").strip().lower()
    if text not in ("true", "false"):
        raise malformed_xml()
    return text == "true"


def _date(text: str) -> int:
    """An ISO 8601 date (midnight UTC, which lifecycle.check insists on) as ns since the epoch."""
    text = text.strip()
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text):
            d = dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc)
        elif re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9]{2}:[0-9]{2})", text):
            d = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        else:
            raise ValueError(text)
    except ValueError:
        raise S3Error("InvalidArgument", "Invalid date: the Date must be in ISO 8601 format", 400,
                      ArgumentName="Date", ArgumentValue=text) from None
    return int(d.timestamp()) * 10 ** 9


def _tag(el) -> tuple[str, str]:
    k, v = el.findall("Key"), el.findall("Value")
    if len(k) != 1 or len(v) > 1:
        raise malformed_xml()
    return k[0].text or "", (v[0].text or "") if v else ""


_CONDITIONS = ("Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan")


def _conditions(el, and_: bool) -> LifecycleFilter:
    if any(c.tag not in _CONDITIONS for c in el):
        raise malformed_xml()
    tags = [_tag(t) for t in el.findall("Tag")]
    keys = [k for k, _ in tags]
    if len(set(keys)) != len(keys):
        raise S3Error("InvalidRequest", "Duplicate Tag Keys are not allowed.", 400)
    if not and_ and len(tags) > 1:
        raise malformed_xml()
    pre = _one(el, "Prefix")
    return LifecycleFilter(prefix=(pre.text or "") if pre is not None else None, tags=dict(tags),
                           size_gt=_int(el, "ObjectSizeGreaterThan"), size_lt=_int(el, "ObjectSizeLessThan"),
                           and_=and_)


def _filter(el) -> LifecycleFilter:
    """A <Filter>: one condition, or several in <And>. Several side by side without <And> (which S3's schema does
    not allow) are taken as if in <And>, as Ceph RGW and the clients written against it do, and given back as
    they came."""
    parts = list(el)
    if len(parts) == 1 and parts[0].tag == "And":
        return _conditions(parts[0], and_=True)
    return _conditions(el, and_=False)


def parse_rules(body: bytes) -> list[LifecycleRule]:
    root = xml.parse(body)
    if root.tag != "LifecycleConfiguration" or any(c.tag != "Rule" for c in root):
        raise malformed_xml()
    rules = []
    for r in root:
        if any(c.tag not in _RULE_PARTS for c in r):
            raise malformed_xml()
        transitions = r.findall("Transition") + r.findall("NoncurrentVersionTransition")
        for tr in transitions:  # a malformed one is refused as such first
            d = _one(tr, "Date")
            if d is not None:
                _date(d.text or "")
        if transitions:
            raise not_implemented("Lifecycle transitions (epochfs has one storage class)")
        status = _one(r, "Status")
        if status is None or status.text not in ("Enabled", "Disabled"):
            raise malformed_xml()
        flt, pre = _one(r, "Filter"), _one(r, "Prefix")
        if (flt is None) == (pre is None):
            raise malformed_xml()  # exactly one of <Filter> and the older <Prefix>
        rid = _one(r, "ID")
        exp, nce, abort = _one(r, "Expiration"), _one(r, "NoncurrentVersionExpiration"), \
            _one(r, "AbortIncompleteMultipartUpload")
        date = None
        if exp is not None:
            d = _one(exp, "Date")
            date = _date(d.text or "") if d is not None else None
            if not len(exp):
                raise malformed_xml()
        if nce is not None and _one(nce, "NoncurrentDays") is None:
            raise malformed_xml()
        if abort is not None and _one(abort, "DaysAfterInitiation") is None:
            raise malformed_xml()
        rules.append(LifecycleRule(
            id=(rid.text or "") if rid is not None else uuid.uuid4().hex,
            enabled=status.text == "Enabled",
            prefix=(pre.text or "") if pre is not None else None,
            filter=_filter(flt) if flt is not None else None,
            expiration_days=_int(exp, "Days") if exp is not None else None,
            expiration_date=date,
            expired_object_delete_marker=_bool(exp, "ExpiredObjectDeleteMarker") if exp is not None else None,
            noncurrent_days=_int(nce, "NoncurrentDays") if nce is not None else None,
            newer_noncurrent=_int(nce, "NewerNoncurrentVersions") if nce is not None else None,
            abort_upload_days=_int(abort, "DaysAfterInitiation") if abort is not None else None))
    return lifecycle.check(rules)


def _filter_xml(f: LifecycleFilter) -> str:
    parts = []
    if f.prefix is not None:
        parts.append(f"<Prefix>{xml.text(f.prefix)}</Prefix>")
    parts += [f"<Tag><Key>{xml.text(k)}</Key><Value>{xml.text(v)}</Value></Tag>" for k, v in f.tags.items()]
    if f.size_gt is not None:
        parts.append(f"<ObjectSizeGreaterThan>{f.size_gt}</ObjectSizeGreaterThan>")
    if f.size_lt is not None:
        parts.append(f"<ObjectSizeLessThan>{f.size_lt}</ObjectSizeLessThan>")
    inner = "".join(parts)
    return f"<Filter>{f'<And>{inner}</And>' if f.and_ else inner}</Filter>"


def rule_xml(r: LifecycleRule) -> str:
    out = [f"<ID>{xml.text(r.id)}</ID>"]
    out.append(_filter_xml(r.filter) if r.filter is not None else f"<Prefix>{xml.text(r.prefix or '')}</Prefix>")
    out.append(f"<Status>{'Enabled' if r.enabled else 'Disabled'}</Status>")
    if r.expiration_days is not None:
        out.append(f"<Expiration><Days>{r.expiration_days}</Days></Expiration>")
    elif r.expiration_date is not None:
        out.append(f"<Expiration><Date>{xml.iso8601(r.expiration_date)}</Date></Expiration>")
    elif r.expired_object_delete_marker is not None:
        out.append(f"<Expiration><ExpiredObjectDeleteMarker>{str(r.expired_object_delete_marker).lower()}"
                   "</ExpiredObjectDeleteMarker></Expiration>")
    if r.noncurrent_days is not None:
        newer = f"<NewerNoncurrentVersions>{r.newer_noncurrent}</NewerNoncurrentVersions>" \
            if r.newer_noncurrent is not None else ""
        out.append(f"<NoncurrentVersionExpiration><NoncurrentDays>{r.noncurrent_days}</NoncurrentDays>{newer}"
                   "</NoncurrentVersionExpiration>")
    if r.abort_upload_days is not None:
        out.append(f"<AbortIncompleteMultipartUpload><DaysAfterInitiation>{r.abort_upload_days}"
                   "</DaysAfterInitiation></AbortIncompleteMultipartUpload>")
    return "<Rule>" + "".join(out) + "</Rule>"


def expiration_header(rules: list[LifecycleRule] | None, key: str, size: int, tags: dict[str, str],
                      mtime_ns: int) -> list[tuple[str, str]]:
    """x-amz-expiration: expiry-date="<HTTP date>", rule-id="<id>" for an object a rule will expire."""
    if not rules:
        return []
    due = lifecycle.expiry(rules, key, size, tags, mtime_ns)
    if due is None:
        return []
    return [("x-amz-expiration", f'expiry-date="{xml.http_date(due[0])}", rule-id="{due[1]}"')]


async def get_lifecycle(ctx, req):
    info = await bucket_owned(ctx, req)
    if not info.lifecycle:
        raise S3Error("NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist", 404,
                      BucketName=req.bucket)
    return Response(200, [("content-type", "application/xml")],
                    xml.doc("LifecycleConfiguration", "".join(rule_xml(r) for r in info.lifecycle)))


async def put_lifecycle(ctx, req):
    await bucket_owned(ctx, req)
    rules = parse_rules(await read_all(req.receive, MAX_BODY))
    await ctx.cluster.namenode.bucket_lifecycle(req.bucket, rules)
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def delete_lifecycle(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_lifecycle(req.bucket, Unset())
    ctx.forget_bucket(req.bucket)
    return Response(204)
