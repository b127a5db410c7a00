"""GetObjectAttributes: an object's ETag, checksum, parts, storage class and size in one document, without its data."""
from __future__ import annotations

from epochfs.common import errors
from epochfs.common.messages import ObjectRecord

from . import args, sse, xml
from .access import bucket_access, check_object_read
from .errors import invalid_request
from .objects import check_key, part_checksum
from .http import Response

ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")


def _wanted(req) -> set[str]:
    names = {a.strip() for a in req.headers.get("x-amz-object-attributes", "").split(",") if a.strip()}
    if not names:
        raise invalid_request("The x-amz-object-attributes header specifying the attributes to be retrieved is "
                              "either missing or empty")
    unknown = names - set(ATTRIBUTES)
    if unknown:
        raise errors.InvalidInput("Invalid attribute name specified.", argument="x-amz-object-attributes",
                                  value=sorted(unknown)[0])
    return names


def _int_header(req, name: str, default: int) -> int:
    return args.int_arg(req.headers.get(name), name, default,
                        msg=f"Argument {name} must be an integer between 0 and 2147483647")


def _checksum_xml(cs: dict) -> str:
    return "".join(f"<Checksum{a.upper()}>{xml.esc(v)}</Checksum{a.upper()}>" for a, v in cs.items() if a != "type")


def _parts_xml(obj: ObjectRecord, max_parts: int, marker: int) -> str:
    """The ObjectParts element, one page of it (x-amz-max-parts after x-amz-part-number-marker)."""
    sizes = obj.part_sizes
    numbers = range(marker + 1, len(sizes) + 1)
    page, truncated = numbers[:max_parts], len(numbers) > max_parts
    items = "".join(f"<Part><PartNumber>{n}</PartNumber><Size>{sizes[n - 1]}</Size>"
                    f"{_checksum_xml(part_checksum(obj, n))}</Part>" for n in page)
    nxt = f"<NextPartNumberMarker>{page[-1]}</NextPartNumberMarker>" if page else ""
    return (f"<ObjectParts><PartsCount>{len(sizes)}</PartsCount><PartNumberMarker>{marker}</PartNumberMarker>{nxt}"
            f"<MaxParts>{max_parts}</MaxParts><IsTruncated>{str(truncated).lower()}</IsTruncated>{items}"
            f"</ObjectParts>")


async def get_object_attributes(ctx, req):
    info = await bucket_access(ctx, req, "object")
    check_key(req.key)
    wanted = _wanted(req)
    max_parts = min(_int_header(req, "x-amz-max-parts", 1000), 1000)
    marker = _int_header(req, "x-amz-part-number-marker", 0)
    vid = req.query.get("versionId") or None
    try:
        obj = (await ctx.cluster.namenode.stat(req.bucket, req.key, vid)).obj
    except errors.NoSuchKey:
        check_object_read(ctx, req, info, None)
        raise
    check_object_read(ctx, req, info, obj)
    sse.data_key(ctx, req.headers, obj.sse)  # an SSE-C object's attributes need its key, as its data
    out = []
    if "ETag" in wanted:
        etag = obj.etag.strip('"')
        out.append(f"<ETag>{xml.esc(etag)}</ETag>")
    cs = obj.checksum
    if "Checksum" in wanted and cs:
        out.append(f"<Checksum>{_checksum_xml(cs)}<ChecksumType>{cs.get('type', 'FULL_OBJECT')}</ChecksumType>"
                   f"</Checksum>")
    if "ObjectParts" in wanted and obj.part_sizes:
        out.append(_parts_xml(obj, max_parts, marker))
    if "StorageClass" in wanted:
        out.append(f"<StorageClass>{obj.storage_class or 'STANDARD'}</StorageClass>")
    if "ObjectSize" in wanted:
        out.append(f"<ObjectSize>{obj.size}</ObjectSize>")
    headers = [("content-type", "application/xml"), ("last-modified", xml.http_date(obj.mtime))]
    if obj.version_id:
        headers.append(("x-amz-version-id", obj.version_id))
    return Response(200, headers, xml.doc("GetObjectAttributesResponse", "".join(out)))
