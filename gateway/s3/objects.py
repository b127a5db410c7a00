"""Object operations: PutObject, GetObject, HeadObject, DeleteObject(s), CopyObject, object ACLs."""
from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
import time
from email.utils import parsedate_to_datetime
from urllib.parse import unquote

import msgspec

from epochfs.common import errors
from epochfs.common.checksums import ALGORITHMS
from epochfs.common.messages import BucketRecord, ObjectRecord
from epochfs.common.paths import split_key

from ..crypto import BlockCipher
from . import args, objectlock, quota, sse, xml
from .lifecycle import expiration_header
from .tagging import copy_tags, count_header, request_tags
from .access import (acl_from_xml, acl_not_supported, acl_xml, acls_disabled, bucket_access, canned_acl,
                     check_object_read, check_object_write, check_public_acl, new_object_acl)
from .body import BodyCheck, body_stream, read_all
from .errors import S3Error, invalid_request, malformed_xml
from .http import Response

STD_HEADERS = ("cache-control", "content-disposition", "content-encoding", "content-language", "expires")
STORAGE_CLASSES = ("STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER",
                   "DEEP_ARCHIVE", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE")
MAX_META_BYTES = 2048
_COPY_RANGE = re.compile(r"bytes=([0-9]+)-([0-9]+)")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)


def check_key(key: str) -> None:
    try:
        split_key(key)
    except errors.KeyTooLong:
        raise errors.KeyTooLong("Your key is too long", key_size=len(key.encode()), max_size=1024) from None


def _text(v: str) -> str:
    """A metadata value as text: header bytes (read as latin-1) that are UTF-8, as SDKs send non-ASCII values, are
    decoded; anything else stays as read."""
    try:
        return v.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return v


def _header_text(v: str) -> str:
    """A metadata value for a response header: as is when latin-1 holds it (what http.client and botocore decode
    headers as, so they read back what was sent), else MIME-encoded (RFC 2047) as S3 does."""
    try:
        v.encode("latin-1")
        return v
    except UnicodeEncodeError:
        return "=?UTF-8?B?" + base64.b64encode(v.encode()).decode() + "?="


async def object_attrs(ctx, req, info: BucketRecord) -> ObjectRecord:
    """Stored attributes of a new object in bucket `info`, from the request headers (no content yet)."""
    h = req.headers
    meta = {k[11:]: args.header_value(_text(v), k) for k, v in h.items() if k.startswith("x-amz-meta-")}
    if not all(_TOKEN.fullmatch(k) for k in meta):  # a POST form's field names need not be header names
        raise errors.InvalidInput("Metadata names must be valid HTTP header names")
    if sum(len(k) + len(v) for k, v in meta.items()) > MAX_META_BYTES:
        raise S3Error("MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.", 400)
    hdr = {k: args.header_value(h[k], k) for k in STD_HEADERS if k in h}
    if "content-encoding" in hdr:  # kept byte for byte, without the aws-chunked of the transfer
        enc = hdr["content-encoding"]
        if any(x.strip() == "aws-chunked" for x in enc.split(",")):
            enc = ",".join(x for x in enc.split(",") if x.strip() != "aws-chunked").strip()
        if enc:
            hdr["content-encoding"] = enc
        else:
            del hdr["content-encoding"]
    sc = h.get("x-amz-storage-class", "STANDARD")
    if sc not in STORAGE_CLASSES:
        raise S3Error("InvalidStorageClass", "The storage class you specified is not valid", 400)
    owner, acl = await new_object_acl(ctx, req, info)
    ctype = args.header_value(h.get("content-type", "binary/octet-stream"), "content-type")
    return ObjectRecord(content_type=ctype, meta=meta, headers=hdr, owner=owner, tags=request_tags(req),
                        acl=None if acl == "private" else acl, storage_class=None if sc == "STANDARD" else sc)


def object_headers(obj: ObjectRecord, req, *, with_checksum: bool | None = None) -> list[tuple[str, str]]:
    """An object's response headers. Its checksum is there if the request asks (x-amz-checksum-mode: ENABLED) unless
    with_checksum=False (a byte range); a partNumber read gets that part's own checksum instead."""
    h = [("etag", obj.etag), ("last-modified", xml.http_date(obj.mtime)),
         ("content-type", obj.content_type or "binary/octet-stream"), ("accept-ranges", "bytes")]
    for k, v in obj.headers.items():
        h.append((k, v))
    for k, v in obj.meta.items():
        h.append((f"x-amz-meta-{k}", _header_text(v)))
    if obj.storage_class:
        h.append(("x-amz-storage-class", obj.storage_class))
    h += objectlock.lock_headers(obj)
    if obj.part_sizes and "partNumber" in req.query:
        h.append(("x-amz-mp-parts-count", str(len(obj.part_sizes))))
    asked = req.headers.get("x-amz-checksum-mode", "").upper() == "ENABLED"
    if "partNumber" in req.query:
        cs = part_checksum(obj, args.part_number(req.query["partNumber"])) if asked else {}
    else:
        cs = obj.checksum if (asked if with_checksum is None else with_checksum) else {}
    for alg, v in cs.items():
        if alg != "type":
            h.append((f"x-amz-checksum-{alg}", v))
    if cs:
        h.append(("x-amz-checksum-type", cs.get("type", "FULL_OBJECT")))
    return h


def part_checksum(obj: ObjectRecord, n: int) -> dict:
    """The checksum of part n of an object ({alg: value, "type": the object's checksum type}), {} if it has none.
    An object that wasn't uploaded in parts is its own part 1."""
    cs = obj.checksum
    if not obj.part_sizes:
        return cs if n == 1 else {}
    pcs = obj.part_checksums
    alg = next((a for a in cs if a != "type"), None)
    if alg is None or not 1 <= n <= len(pcs):
        return {}
    return {alg: pcs[n - 1], "type": cs.get("type", "COMPOSITE")}


def _parse_http_date(v: str) -> int | None:
    try:
        return int(parsedate_to_datetime(v).timestamp())
    except (TypeError, ValueError, IndexError):
        return None


def _etag_matches(etag: str, header: str) -> bool:
    e = etag.strip('"')
    return any(x.strip().strip('"') in (e, "*") for x in header.split(","))


def check_read_conditions(obj: ObjectRecord, h: dict, prefix: str = "if-", copy: bool = False) -> None:
    """RFC 7232 as S3 applies it: If-Match beats If-Unmodified-Since, If-None-Match beats If-Modified-Since."""
    etag = obj.etag
    mtime = obj.mtime // 1_000_000_000
    im, inm = h.get(prefix + "match"), h.get(prefix + "none-match")
    ims, ius = h.get(prefix + "modified-since"), h.get(prefix + "unmodified-since")
    if im is None and inm is None and ims is None and ius is None:
        return  # the usual read: no errors built (with their dates formatted) in vain
    failed = precondition_failed(f"{'x-amz-copy-source-' if copy else ''}"
                                 f"{'If-Match' if im is not None else 'If-Unmodified-Since'}")
    not_modified = S3Error("NotModified", "Not Modified", 304)
    if not copy:
        not_modified.headers = [("etag", etag), ("last-modified", xml.http_date(obj.mtime))]
    if im is not None:
        if not _etag_matches(etag, im):
            raise failed
    elif ius is not None:
        t = _parse_http_date(ius)
        if t is not None and mtime > t:
            raise failed
    if inm is not None:
        if _etag_matches(etag, inm):
            raise precondition_failed("x-amz-copy-source-If-None-Match") if copy else not_modified
    elif ims is not None:
        t = _parse_http_date(ims)
        if t is not None and mtime <= t and t <= time.time():
            raise precondition_failed("x-amz-copy-source-If-Modified-Since") if copy else not_modified


def precondition_failed(condition: str) -> errors.PreconditionFailed:
    """412 naming the header whose condition failed, as S3 does (s3fs tells FileExistsError by If-None-Match)."""
    return errors.PreconditionFailed("At least one of the pre-conditions you specified did not hold",
                                     condition=condition)


def range_spec(spec: str) -> tuple[int | None, int | None] | None:
    """(first, last) of a single `bytes=first-last` range (first None: a suffix of `last` bytes; last None: to the
    end); None to ignore the header (as S3 does for syntax it can't parse). It needs no object size, so a ranged
    GET can ask the NameNode for just the blocks of its range (stat_range)."""
    spec = spec.strip()
    if not spec.startswith("bytes=") or "," in spec:
        return None
    a, sep, b = spec[6:].strip().partition("-")
    if not sep:
        return None
    first, last = args.digits(a, canonical=False), args.digits(b, canonical=False)  # huge: past any end
    if a == "":
        return (None, last) if last is not None else None
    if first is None or (b and last is None):
        return None
    if last is not None and last < first:
        return None
    return first, last


def parse_range(spec: str, size: int) -> tuple[int, int] | None:
    """[start, end) for a single `bytes=` range; None to ignore the header."""
    r = range_spec(spec)
    if r is None:
        return None
    first, last = r
    if first is None:
        if last <= 0:
            raise _invalid_range(size)
        return max(size - last, 0), size
    if first >= size:
        raise _invalid_range(size)
    return first, size if last is None else min(last + 1, size)


def stat_range(spec: str) -> tuple[int, int | None] | None:
    """The NameNode stat's `range` for a Range header ([lo, hi), lo < 0: a suffix, hi None: to the end; see
    namenode/api/objects.only_range), None to stat the whole object (a header that will be ignored or refused)."""
    r = range_spec(spec)
    if r is None:
        return None
    first, last = r  # each at most MAX_INT + 1 (args.digits): clamped to the NameNode's 64-bit numbers, which
    # changes nothing (no object is that large: a first byte there is past the end, a last byte there is the end)
    if first is None:
        return (-min(last, args.MAX_INT), None) if last > 0 else None
    return min(first, args.MAX_INT), None if last is None else min(last + 1, args.MAX_INT)


def _invalid_range(size: int) -> S3Error:
    e = S3Error("InvalidRange", "The requested range is not satisfiable", 416, ActualObjectSize=size)
    e.headers = [("content-range", f"bytes */{size}")]
    return e


async def _stat(ctx, bucket: str, key: str, version_id: str | None = None,
                rng: tuple[int, int | None] | None = None) -> tuple[ObjectRecord, dict]:
    """The object's record and its blocks' holders; with `rng` (stat_range) only the blocks of that range."""
    res = await ctx.cluster.namenode.stat(bucket, key, version_id, rng)
    return res.obj, res.addrs


def version_headers(version_id: str | None, delete_marker: bool = False) -> list[tuple[str, str]]:
    """x-amz-version-id (and x-amz-delete-marker) for a versioned bucket's answer."""
    h = [("x-amz-version-id", version_id)] if version_id else []
    if delete_marker:
        h.append(("x-amz-delete-marker", "true"))
    return h


def written_version_headers(version_id: str | None) -> list[tuple[str, str]]:
    """x-amz-version-id of a write (PUT, copy, CompleteMultipartUpload): none in a bucket whose versioning is
    suspended (the object took the id "null"), as S3 answers."""
    return [("x-amz-version-id", version_id)] if version_id and version_id != "null" else []


async def put_object(ctx, req):
    info = await bucket_access(ctx, req, "write")
    check_key(req.key)
    await quota.precheck(ctx, req, info, replaces_key=True)
    attrs = objectlock.with_lock(req, info, await object_attrs(ctx, req, info), put=True)
    if "content-length" not in req.headers and "x-amz-decoded-content-length" not in req.headers \
            and "chunked" not in req.headers.get("transfer-encoding", ""):
        raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.", 411)
    sealed, _ = sse.for_write(ctx, req.headers, info.encryption)
    check = BodyCheck(req.headers, req.auth)
    stream, dec = body_stream(req.receive, req.headers, req.auth)
    blocks, size = await ctx.cluster.write_stream(req.bucket, stream, check.update,
                                                  limit=ctx.settings.max_object_size,
                                                  cipher=sealed.cipher if sealed else None)
    try:
        check.verify(dec.trailers if dec else None)
        cs = check.checksums()
        obj = msgspec.structs.replace(attrs, size=size, etag=sealed.etag(check.etag) if sealed else check.etag,
                                      checksum={**cs, "type": "FULL_OBJECT"} if cs else {},
                                      sse=sealed.info if sealed else None)
        res = await ctx.cluster.commit(req.bucket, ctx.cluster.namenode.put_object(
            req.bucket, req.key, obj, blocks, if_match=req.headers.get("if-match"),
            if_none_match=req.headers.get("if-none-match")))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    headers = [("etag", res.etag)] + written_version_headers(res.version_id) + \
        sse.headers(sealed.info if sealed else None) + expiration_header(info.lifecycle, req.key, size, obj.tags,
                                                                         res.mtime)
    for alg, v in check.checksums().items():
        headers.append((f"x-amz-checksum-{alg}", v))
        headers.append(("x-amz-checksum-type", "FULL_OBJECT"))
    return Response(200, headers)


def _part_range(obj: ObjectRecord, req) -> tuple[int, int] | None:
    pn = req.query.get("partNumber")
    if pn is None:
        return None
    n = args.part_number(pn)
    sizes = obj.part_sizes or [obj.size]
    if n > len(sizes):
        raise errors.InvalidPart("The requested partnumber is not satisfiable")
    start = sum(sizes[: n - 1])
    return start, start + sizes[n - 1]


async def get_object(ctx, req, head: bool = False):
    info = await bucket_access(ctx, req, "object")
    check_key(req.key)
    try:
        spec = req.headers.get("range") if "partNumber" not in req.query else None
        obj, addrs = await _stat(ctx, req.bucket, req.key, req.query.get("versionId"),
                                 stat_range(spec) if spec is not None else None)
    except errors.NoSuchKey:
        check_object_read(ctx, req, info, None)
        raise
    check_object_read(ctx, req, info, obj)
    rng = _part_range(obj, req)
    cipher = sse.read_cipher(ctx, req, obj.sse)
    check_read_conditions(obj, req.headers)
    size = obj.size
    whole = rng is None and "range" not in req.headers
    if rng is None and "range" in req.headers:
        rng = parse_range(req.headers["range"], size)
    headers = object_headers(obj, req, with_checksum=None if whole else False) + \
        version_headers(obj.version_id, obj.delete_marker) + sse.headers(obj.sse) + count_header(obj)
    if info.lifecycle:
        headers += expiration_header(info.lifecycle, req.key, obj.size, obj.tags, obj.mtime)
    for q, hname in (("response-content-type", "content-type"), ("response-content-language", "content-language"),
                     ("response-expires", "expires"), ("response-cache-control", "cache-control"),
                     ("response-content-disposition", "content-disposition"),
                     ("response-content-encoding", "content-encoding")):
        if q in req.query:
            headers = [(k, v) for k, v in headers if k != hname] + [(hname, args.header_value(req.query[q], q))]
    status = 200
    start, end = 0, size
    if rng is not None:
        start, end = rng
        status = 206
        headers.append(("content-range", f"bytes {start}-{end - 1}/{size}" if end > start else f"bytes */{size}"))
    n = end - start
    if head or n == 0:
        return Response(status, headers, b"", length=n)
    blocks, boff = obj.blocks, obj.block_offset  # a ranged stat's blocks start at boff
    if n <= (4 << 20):  # small enough to answer in one piece, whatever the bucket's block size
        return Response(status, headers, await ctx.cluster.read_joined(blocks, addrs, start - boff, end - boff,
                                                                       cipher=cipher))
    return Response(status, headers, ctx.cluster.read_range(blocks, addrs, start - boff, end - boff, cipher=cipher),
                    length=n)


async def head_object(ctx, req):
    return await get_object(ctx, req, head=True)


def _delete_conditions(etag: str | None, mtime: str | None, size: str | None, http_date: bool) -> dict:
    """x-amz-if-match-* (DeleteObject) or the ETag/LastModifiedTime/Size elements (DeleteObjects) as NameNode args."""
    out = {}
    if etag is not None:
        out["if_match"] = etag
    if mtime is not None:
        t = _parse_http_date(mtime)
        if t is None and not http_date:
            t = _parse_iso(mtime)
        if t is None:
            raise errors.InvalidInput("bad last-modified-time condition")
        out["if_mtime"] = t
    if size is not None:
        out["if_size"] = args.int_arg(size.strip(), "size condition", 0, hi=args.MAX_INT)
    return out


def _parse_iso(v: str) -> int | None:
    try:
        return int(dt.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


async def delete_object(ctx, req):
    info = await bucket_access(ctx, req, "write")
    check_key(req.key)
    h = req.headers
    cond = _delete_conditions(h.get("if-match"), h.get("x-amz-if-match-last-modified-time"),
                              h.get("x-amz-if-match-size"), http_date=True)
    res = await ctx.cluster.namenode.delete_object(req.bucket, req.key, req.query.get("versionId"), **cond,
                                                   bypass=objectlock.bypass(ctx, req, info))
    return Response(204, version_headers(res.version_id, res.delete_marker))


async def delete_objects(ctx, req):
    info = await bucket_access(ctx, req, "object")  # each key is checked on its own: a policy may name keys
    bypass = objectlock.bypass(ctx, req, info)
    body = await read_all(req.receive, 2 << 20)
    if "content-md5" not in req.headers and not any(f"x-amz-checksum-{a}" in req.headers for a in ALGORITHMS):
        raise invalid_request("Missing required header for this request: Content-MD5")  # AWS's words
    if "content-md5" in req.headers:
        if base64.b64encode(hashlib.md5(body).digest()).decode() != req.headers["content-md5"]:
            raise errors.ChecksumMismatch("The Content-MD5 you specified did not match what we received.")
    check = BodyCheck({k: v for k, v in req.headers.items() if k.startswith("x-amz-checksum-")}, None)
    check.update(body)
    check.verify()
    root = xml.parse(body)
    if root.tag != "Delete":
        raise malformed_xml()
    objs = root.findall("Object")
    if not objs or len(objs) > 1000:
        raise malformed_xml()
    quiet = (root.findtext("Quiet") or "").strip().lower() == "true"
    out = []
    req.deleted = []
    for o in objs:
        key = o.findtext("Key")
        if key is None:
            raise malformed_xml()
        vid = o.findtext("VersionId")
        try:
            check_key(key)
            check_object_write(ctx, req, info, key, "s3:DeleteObjectVersion" if vid else "s3:DeleteObject")
            cond = _delete_conditions(o.findtext("ETag"), o.findtext("LastModifiedTime"), o.findtext("Size"),
                                      http_date=False)
            res = await ctx.cluster.namenode.delete_object(req.bucket, key, vid, **cond, bypass=bypass)
            req.deleted.append((key, vid or res.version_id, 204, None))
            if not quiet:
                v = f"<VersionId>{xml.esc(vid)}</VersionId>" if vid else ""
                if res.delete_marker:  # a marker made (its id), or one removed by its version id (that id)
                    v += "<DeleteMarker>true</DeleteMarker>"
                    if res.version_id:
                        v += f"<DeleteMarkerVersionId>{xml.esc(res.version_id)}</DeleteMarkerVersionId>"
                out.append(f"<Deleted><Key>{xml.key(key)}</Key>{v}</Deleted>")
        except (S3Error, errors.DomainError) as e:
            from .errors import from_domain
            err = e if isinstance(e, S3Error) else from_domain(e)
            req.deleted.append((key, vid, err.status, err.code))
            v = f"<VersionId>{xml.esc(vid)}</VersionId>" if vid else ""
            out.append(f"<Error><Key>{xml.key(key)}</Key>{v}<Code>{err.code}</Code>"
                       f"<Message>{xml.esc(err.message)}</Message></Error>")
    return Response(200, [("content-type", "application/xml")], xml.doc("DeleteResult", "".join(out)))


def copy_source_version(req) -> str | None:
    """The version of x-amz-copy-source (echoed in x-amz-copy-source-version-id)."""
    _, _, qs = req.headers["x-amz-copy-source"].partition("?")
    return args.header_value(unquote(qs[10:]), "x-amz-copy-source") if qs.startswith("versionId=") and qs[10:] \
        else None


def parse_copy_source(req) -> tuple[str, str]:
    """x-amz-copy-source, "[/]bucket/key[?versionId=id]": split off the query before decoding, since a key may hold
    an encoded "?"."""
    src, _, qs = req.headers["x-amz-copy-source"].partition("?")
    src = unquote(src).lstrip("/")
    b, _, k = src.partition("/")
    if not b or not k:
        raise errors.InvalidInput("Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
                                  argument="x-amz-copy-source")
    return b, k


async def read_copy_source(ctx, req, rng_header: str | None = None):
    """The source object of a copy (after access and x-amz-copy-source-if-* checks) and a stream of its bytes."""
    sb, sk = parse_copy_source(req)
    info = await ctx.bucket(sb)
    want = req.headers.get("x-amz-source-expected-bucket-owner")
    if want is not None and want != info.owner:
        raise errors.PermissionDenied("Access Denied")
    check_key(sk)
    action = "s3:GetObjectVersion" if copy_source_version(req) else "s3:GetObject"
    obj = None
    try:
        obj, addrs = await _stat(ctx, sb, sk, copy_source_version(req))
    except errors.NoSuchKey:
        check_object_read(ctx, req, info, None, key=sk, action=action)
        raise
    check_object_read(ctx, req, info, obj, key=sk, action=action)
    dk = sse.data_key(ctx, req.headers, obj.sse, prefix=sse.COPY_CUSTOMER)
    cipher = None if dk is None else BlockCipher(dk)
    check_read_conditions(obj, req.headers, prefix="x-amz-copy-source-if-", copy=True)
    size = obj.size
    start, end = 0, size
    if rng_header is not None:
        m = _COPY_RANGE.fullmatch(rng_header.strip())
        if m is None:
            raise errors.InvalidInput("The x-amz-copy-source-range value must be of the form bytes=first-last where "
                                      "first and last are the zero-based offsets of the first and last bytes to copy")
        start, end = args.digits(m[1], canonical=False), args.digits(m[2], canonical=False) + 1
        if start >= size or end > size or end <= start:
            raise S3Error("InvalidRange", "The requested range is not satisfiable", 416)
    return (sb, sk), obj, ctx.cluster.read_range(obj.blocks, addrs, start, end, cipher=cipher), end - start


async def copy_object(ctx, req):
    info = await bucket_access(ctx, req, "write")
    check_key(req.key)
    sealed, asked = sse.for_write(ctx, req.headers, info.encryption)  # every header checked before the source
    (sb, sk), src, stream, _ = await read_copy_source(ctx, req)
    directive = req.headers.get("x-amz-metadata-directive", "COPY").upper()
    if directive not in ("COPY", "REPLACE"):
        raise errors.InvalidInput("Unknown metadata directive.")
    if directive == "REPLACE":
        attrs = await object_attrs(ctx, req, info)
    else:
        owner, acl = await new_object_acl(ctx, req, info)
        sc = src.storage_class
        if "x-amz-storage-class" in req.headers:
            sc = (await object_attrs(ctx, req, info)).storage_class or "STANDARD"
        attrs = ObjectRecord(content_type=src.content_type, meta=src.meta, xattrs=src.xattrs, headers=src.headers,
                             storage_class=sc, owner=owner, acl=None if acl == "private" else acl)
    attrs = objectlock.with_lock(req, info, attrs)  # the copy's own lock headers (the source's are not copied)
    attrs = msgspec.structs.replace(attrs, tags=copy_tags(req, src))
    if (sb, sk) == (req.bucket, req.key) and directive == "COPY" and "x-amz-storage-class" not in req.headers \
            and not asked:
        raise invalid_request("This copy request is illegal because it is trying to copy an object to itself "
                              "without changing the object's metadata, storage class, website redirect location or "
                              "encryption attributes.")
    md5 = hashlib.md5()
    alg = req.headers.get("x-amz-checksum-algorithm", "").lower() or \
        next((a for a in src.checksum if a != "type"), None)
    check = BodyCheck({"x-amz-sdk-checksum-algorithm": alg} if alg else {}, None)

    def update(data):
        md5.update(data)
        check.update(data)

    blocks, size = await ctx.cluster.write_stream(req.bucket, stream, update, cipher=sealed.cipher if sealed else None)
    try:
        cs = check.checksums()
        etag = f'"{md5.hexdigest()}"'
        obj = msgspec.structs.replace(attrs, size=size, etag=sealed.etag(etag) if sealed else etag,
                                      checksum={**cs, "type": "FULL_OBJECT"} if cs else {},
                                      sse=sealed.info if sealed else None)
        res = await ctx.cluster.commit(req.bucket, ctx.cluster.namenode.put_object(
            req.bucket, req.key, obj, blocks, if_match=req.headers.get("if-match"),
            if_none_match=req.headers.get("if-none-match")))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    cs = "".join(f"<Checksum{a.upper()}>{v}</Checksum{a.upper()}>" for a, v in check.checksums().items())
    body = xml.doc("CopyObjectResult", f"<LastModified>{xml.iso8601(res.mtime)}</LastModified>"
                                       f"<ETag>{xml.esc(res.etag)}</ETag>{cs}")
    headers = [("content-type", "application/xml")] + written_version_headers(res.version_id) + \
        sse.headers(sealed.info if sealed else None)
    if copy_source_version(req):
        headers.append(("x-amz-copy-source-version-id", copy_source_version(req)))
    return Response(200, headers, body)


async def get_acl(ctx, req):
    info = await bucket_access(ctx, req, "object")
    obj, _ = await _stat(ctx, req.bucket, req.key, req.query.get("versionId"))
    check_object_read(ctx, req, info, obj, action=req.action, perm="read_acp")
    if acls_disabled(info):  # the bucket owner owns every object, with no other grants
        owner, acl = info.owner, None
    else:
        owner, acl = obj.owner or req.user.owner_id, obj.acl
    return Response(200, [("content-type", "application/xml")],
                    acl_xml(acl, owner, ctx.display_name(owner), ctx.display_name))


async def put_acl(ctx, req):
    info = await bucket_access(ctx, req, "object")
    if acls_disabled(info):
        raise acl_not_supported()
    vid = req.query.get("versionId")
    obj, _ = await _stat(ctx, req.bucket, req.key, vid)
    check_object_read(ctx, req, info, obj, action=req.action, perm="write_acp")
    body = await read_all(req.receive, 1 << 20)
    acl = await acl_from_xml(ctx, body, obj.owner) if body.strip() else await canned_acl(ctx, req)
    check_public_acl(info, acl)
    await ctx.cluster.namenode.object_settings(req.bucket, req.key, acl=acl, version_id=vid)
    return Response(200, [("x-amz-version-id", vid)] if vid else [])
