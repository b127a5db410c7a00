"""Object and bucket tagging: Put/Get/DeleteObjectTagging (with versionId), Put/Get/DeleteBucketTagging, and the
tag set of a new object (the x-amz-tagging header, a POST form's `tagging` field, a copy's tagging directive)."""
from __future__ import annotations

from epochfs.common import errors, tagging
from epochfs.common.messages import ObjectRecord

from . import xml
from .access import CONDITION_RESOLVERS, bucket_access, check_object_read, check_object_write
from .body import read_all
from .bucket import bucket_owned
from .errors import S3Error, malformed_xml
from .http import Response

MAX_BODY = 64 << 10


def tags_xml(tags: dict[str, str]) -> str:
    return "<TagSet>" + "".join(f"<Tag><Key>{xml.text(k)}</Key><Value>{xml.text(v)}</Value></Tag>"
                                for k, v in tags.items()) + "</TagSet>"


def parse_tagging(body: bytes, limit: int) -> dict[str, str]:
    """A <Tagging><TagSet><Tag><Key/><Value/></Tag>...</TagSet></Tagging> document as a checked tag set."""
    root = xml.parse(body)
    sets = root.findall("TagSet")
    if root.tag != "Tagging" or len(sets) != 1:
        raise malformed_xml()
    pairs = []
    for tag in sets[0]:
        if tag.tag != "Tag":
            raise malformed_xml()
        k, v = tag.findall("Key"), tag.findall("Value")
        if len(k) != 1 or len(v) > 1:
            raise malformed_xml()
        pairs.append((k[0].text or "", (v[0].text or "") if v else ""))
    return tagging.check(pairs, limit)


def request_tags(req) -> dict[str, str]:
    """The tag set a PUT, CreateMultipartUpload or copy asks for in x-amz-tagging ({} if none)."""
    h = req.headers.get("x-amz-tagging")
    return tagging.parse_header(h) if h is not None else {}


def copy_tags(req, src: ObjectRecord) -> dict[str, str]:
    """x-amz-tagging-directive: COPY (the default) keeps the source's tags, REPLACE takes x-amz-tagging."""
    directive = req.headers.get("x-amz-tagging-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise errors.InvalidInput("Unknown tagging directive.", argument="x-amz-tagging-directive",
                                  value=req.headers.get("x-amz-tagging-directive"))
    return request_tags(req) if directive == "REPLACE" else dict(src.tags)


def count_header(obj: ObjectRecord) -> list[tuple[str, str]]:
    return [("x-amz-tagging-count", str(len(obj.tags)))] if obj.tags else []


def _vid_header(vid: str | None) -> list[tuple[str, str]]:
    return [("x-amz-version-id", vid)] if vid else []


async def get_object_tagging(ctx, req):
    info = await bucket_access(ctx, req, "object")
    obj = None
    try:
        obj = (await ctx.cluster.namenode.stat(req.bucket, req.key, req.query.get("versionId"))).obj
    finally:
        check_object_read(ctx, req, info, obj, action=req.action)
    return Response(200, [("content-type", "application/xml")] + _vid_header(obj.version_id),
                    xml.doc("Tagging", tags_xml(obj.tags)))


async def _check_tag_write(ctx, req):
    """Put/DeleteObjectTagging: write access to the key, decided with the object's current tags at hand (a policy
    may condition on s3:ExistingObjectTag/<key>)."""
    info = await bucket_access(ctx, req, "object")
    obj = None
    if info.policy:
        try:
            obj = (await ctx.cluster.namenode.stat(req.bucket, req.key, req.query.get("versionId"))).obj
        except errors.NoSuchKey:
            pass  # the command answers NoSuchKey (after the access check)
    check_object_write(ctx, req, info, req.key, req.action, obj)


def body_tags(doc: bytes, limit: int) -> tuple[dict[str, str] | None, Exception | None]:
    """A <Tagging> document's tag set for the access check (s3:RequestObjectTag), and the error to answer once the
    caller is known to be allowed (AccessDenied comes before MalformedXML or InvalidTag)."""
    try:
        return parse_tagging(doc, limit), None
    except (S3Error, errors.DomainError) as e:
        return {}, e


async def put_object_tagging(ctx, req):
    req.request_tags, bad = body_tags(await read_all(req.receive, MAX_BODY), tagging.MAX_OBJECT_TAGS)
    await _check_tag_write(ctx, req)
    if bad is not None:
        raise bad
    tags = req.request_tags
    res = await ctx.cluster.namenode.object_tags(req.bucket, req.key, tags, req.query.get("versionId"))
    return Response(200, _vid_header(res.version_id))


async def delete_object_tagging(ctx, req):
    await _check_tag_write(ctx, req)
    res = await ctx.cluster.namenode.object_tags(req.bucket, req.key, {}, req.query.get("versionId"))
    return Response(204, _vid_header(res.version_id))


async def get_bucket_tagging(ctx, req):
    info = await bucket_owned(ctx, req)
    if info.tags is None:
        raise S3Error("NoSuchTagSet", "The TagSet does not exist", 404, BucketName=req.bucket)
    return Response(200, [("content-type", "application/xml")], xml.doc("Tagging", tags_xml(info.tags)))


async def put_bucket_tagging(ctx, req):
    await bucket_owned(ctx, req)
    tags = parse_tagging(await read_all(req.receive, MAX_BODY), tagging.MAX_BUCKET_TAGS)
    await ctx.cluster.namenode.bucket_tags(req.bucket, tags)
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def delete_bucket_tagging(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_tags(req.bucket, None)
    ctx.forget_bucket(req.bucket)
    return Response(204)


# ---- policy condition keys (access.CONDITION_RESOLVERS): s3:ExistingObjectTag/<key> is the tag of the object the
# request reads or retags (its record as the check has it; none: no value, so only ...IfExists / Null match), and
# s3:RequestObjectTag/<key> a tag the request sets: through x-amz-tagging (PutObject, CopyObject,
# CreateMultipartUpload), its body (PutObjectTagging) or a POST form's tagging field; s3:RequestObjectTagKeys their keys.
def _existing_tags(ctx, req, info, key, obj):
    tags = getattr(obj, "tags", None) or {}  # an ObjectRecord or a batch's ReadStat; the mount's FileBlocks: none
    return tags.get


def _tags_of_request(req) -> dict[str, str]:
    if getattr(req, "request_tags", None) is not None:
        return req.request_tags
    h = req.headers.get("x-amz-tagging")
    try:
        return tagging.parse_header(h) if h is not None else {}
    except errors.InvalidTag:
        return {}  # the handler refuses the header itself (400 InvalidTag)


def _request_tags(ctx, req, info, key, obj):
    return _tags_of_request(req).get


def _request_tag_keys(ctx, req, info, key, obj):
    keys = list(_tags_of_request(req))
    return lambda _: keys or None  # the whole key ("s3:RequestObjectTagKeys"): a list, absent when no tags


CONDITION_RESOLVERS["s3:existingobjecttag/"] = _existing_tags
CONDITION_RESOLVERS["s3:requestobjecttag/"] = _request_tags
CONDITION_RESOLVERS["s3:requestobjecttagkeys"] = _request_tag_keys
