"""Multipart uploads. Parts are stored as blocks when uploaded; completing concatenates their block lists in one
NameNode batch (no data is copied), so the object appears whole, or not at all."""
from __future__ import annotations

import time

from epochfs.common import errors
from epochfs.common.checksums import ALGORITHMS, multipart_types
from epochfs.common.messages import PartChoice, PartRecord, UploadAttrs

from .. import crypto
from . import args, objectlock, quota, sse, xml
from .access import bucket_access
from .body import BodyCheck, body_stream, read_all
from .errors import invalid_request, malformed_xml
from .http import Response
from .objects import check_key, object_attrs, read_copy_source, written_version_headers


def _checksum_choice(req) -> tuple[str | None, str | None]:
    """The upload's checksum algorithm and type (COMPOSITE or FULL_OBJECT) from CreateMultipartUpload's headers."""
    alg = req.headers.get("x-amz-checksum-algorithm", "").lower()
    ctype = req.headers.get("x-amz-checksum-type", "").upper()
    if not alg:
        if ctype:
            raise invalid_request("The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm "
                                  "header.")
        return None, None
    if alg not in ALGORITHMS:
        raise errors.InvalidInput(f"Checksum algorithm {alg} is not supported")
    allowed = multipart_types(alg)
    if ctype and ctype not in allowed:
        raise invalid_request(f"The {ctype} checksum type cannot be used with the {alg} checksum algorithm.")
    return alg, ctype or allowed[0]


async def create(ctx, req):
    info = await bucket_access(ctx, req, "write")
    check_key(req.key)
    obj = await object_attrs(ctx, req, info)
    alg, ctype = _checksum_choice(req)
    sealed, _ = sse.for_write(ctx, req.headers, info.encryption)
    attrs = UploadAttrs(content_type=obj.content_type, meta=obj.meta, headers=obj.headers, owner=obj.owner,
                        acl=obj.acl, storage_class=obj.storage_class, checksum_algorithm=alg, checksum_type=ctype,
                        sse=sealed.info if sealed else None, tags=obj.tags)
    attrs = objectlock.with_lock(req, info, attrs)
    upload_id = await ctx.cluster.namenode.mpu_create(req.bucket, req.key, attrs)
    headers = [("content-type", "application/xml")] + sse.headers(attrs.sse)
    if alg:
        headers += [("x-amz-checksum-algorithm", alg.upper()), ("x-amz-checksum-type", ctype)]
    body = xml.doc("InitiateMultipartUploadResult", f"<Bucket>{xml.esc(req.bucket)}</Bucket><Key>{xml.key(req.key)}"
                                                    f"</Key><UploadId>{upload_id}</UploadId>")
    return Response(200, headers, body)


async def upload_part(ctx, req):
    await quota.precheck(ctx, req, await bucket_access(ctx, req, "write"), replaces_key=False)
    n = args.part_number(req.query["partNumber"])
    up = await ctx.cluster.namenode.mpu_get(req.bucket, req.key, req.query["uploadId"])
    dk = _part_key(ctx, req, up.attrs.sse)
    check = BodyCheck(req.headers, req.auth, keep_alg=up.attrs.checksum_algorithm)
    stream, dec = body_stream(req.receive, req.headers, req.auth)
    blocks, size = await ctx.cluster.write_stream(req.bucket, stream, check.update,
                                                  cipher=None if dk is None else crypto.BlockCipher(dk))
    try:
        check.verify(dec.trailers if dec else None)
        part = PartRecord(size=size, etag=_part_etag(up.attrs.sse, dk, check.etag), checksum=check.checksums())
        await ctx.cluster.commit(req.bucket, ctx.cluster.namenode.mpu_put_part(
            req.bucket, req.key, req.query["uploadId"], n, part, blocks))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    headers = [("etag", part.etag)] + sse.headers(up.attrs.sse)
    for alg, v in check.checksums().items():
        headers.append((f"x-amz-checksum-{alg}", v))
    return Response(200, headers)


async def upload_part_copy(ctx, req):
    await bucket_access(ctx, req, "write")
    n = args.part_number(req.query["partNumber"])
    up = await ctx.cluster.namenode.mpu_get(req.bucket, req.key, req.query["uploadId"])
    dk = _part_key(ctx, req, up.attrs.sse)
    _, _, stream, _ = await read_copy_source(ctx, req, req.headers.get("x-amz-copy-source-range"))
    check = BodyCheck({}, None, keep_alg=up.attrs.checksum_algorithm)
    blocks, size = await ctx.cluster.write_stream(req.bucket, stream, check.update,
                                                  cipher=None if dk is None else crypto.BlockCipher(dk))
    try:
        part = PartRecord(size=size, etag=_part_etag(up.attrs.sse, dk, check.etag), checksum=check.checksums())
        await ctx.cluster.commit(req.bucket, ctx.cluster.namenode.mpu_put_part(
            req.bucket, req.key, req.query["uploadId"], n, part, blocks))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    body = xml.doc("CopyPartResult", f"<LastModified>{xml.iso8601(time.time_ns())}</LastModified>"
                                     f"<ETag>{xml.esc(part.etag)}</ETag>")
    return Response(200, [("content-type", "application/xml")] + sse.headers(up.attrs.sse), body)


async def complete(ctx, req):
    await bucket_access(ctx, req, "write")
    body = await read_all(req.receive, 4 << 20)
    root = xml.parse(body)
    if root.tag != "CompleteMultipartUpload":
        raise malformed_xml()
    parts = []
    for p in root.findall("Part"):
        pn = (p.findtext("PartNumber") or "").strip()
        if args.digits(pn) is None:
            raise malformed_xml()
        n = args.part_number(pn)
        cs = {a: p.findtext(f"Checksum{a.upper()}") for a in ALGORITHMS if p.findtext(f"Checksum{a.upper()}")}
        parts.append(PartChoice(number=n, etag=(p.findtext("ETag") or "").strip(), checksum=cs))
    if not parts:
        raise malformed_xml()
    expected = {a: req.headers[f"x-amz-checksum-{a}"] for a in ALGORITHMS if f"x-amz-checksum-{a}" in req.headers}
    if "x-amz-checksum-type" in req.headers:
        expected["type"] = req.headers["x-amz-checksum-type"].upper()
    try:
        up = await ctx.cluster.namenode.mpu_get(req.bucket, req.key, req.query["uploadId"])
    except errors.NoSuchUpload:  # completed before: the NameNode answers a retry as the first completion
        up = None
    if up is not None:
        sse.data_key(ctx, req.headers, up.attrs.sse, upload=True)  # SSE-C: the upload's key, as on every part
    res = await ctx.cluster.namenode.mpu_complete(req.bucket, req.key, req.query["uploadId"], parts,
                                                  checksum=expected, if_match=req.headers.get("if-match"),
                                                  if_none_match=req.headers.get("if-none-match"))
    cs = res.checksum
    cs_xml = "".join(f"<Checksum{a.upper()}>{xml.esc(v)}</Checksum{a.upper()}>" for a, v in cs.items() if a != "type")
    if cs:
        cs_xml += f"<ChecksumType>{cs['type']}</ChecksumType>"
    body = xml.doc("CompleteMultipartUploadResult",
                   f"<Location>/{xml.esc(req.bucket)}/{xml.esc(req.key)}</Location><Bucket>{xml.esc(req.bucket)}"
                   f"</Bucket><Key>{xml.key(req.key)}</Key><ETag>{xml.esc(res.etag)}</ETag>{cs_xml}")
    headers = [("content-type", "application/xml")] + written_version_headers(res.version_id) + \
        sse.headers(up.attrs.sse if up else None)
    return Response(200, headers, body)


def _part_key(ctx, req, upload_sse) -> bytes | None:
    """The data key a part of an upload is encrypted with: SSE-C parts carry the upload's key in every request.
    x-amz-server-side-encryption(-aws-kms-key-id) is not among UploadPart's request headers and is ignored (as RGW
    does): the upload's encryption, chosen when it was created, applies to every part."""
    return sse.data_key(ctx, req.headers, upload_sse, upload=True)


def _part_etag(upload_sse, dk: bytes | None, md5_etag: str) -> str:
    """A part's ETag: its MD5, except under SSE-C and SSE-KMS (as the object's)."""
    if upload_sse is None or upload_sse.alg == "AES256":
        return md5_etag
    return f'"{crypto.etag_of(md5_etag.strip(chr(34)), dk)}"'


async def abort(ctx, req):
    await bucket_access(ctx, req, "write")
    await ctx.cluster.namenode.mpu_abort(req.bucket, req.key, req.query["uploadId"])
    return Response(204)


def _int_arg(req, name: str, default: int, hi: int) -> int:
    return min(args.int_arg(req.query.get(name), name, default), hi)


async def list_parts(ctx, req):
    await bucket_access(ctx, req, "write")
    max_parts = _int_arg(req, "max-parts", 1000, 1000)
    marker = _int_arg(req, "part-number-marker", 0, 10000)
    res = await ctx.cluster.namenode.mpu_list_parts(req.bucket, req.key, req.query["uploadId"])
    parts = [p for p in res.parts if p.number > marker]
    page, truncated = parts[:max_parts], len(parts) > max_parts
    owner = res.upload.attrs.owner or req.user.owner_id
    items = []
    for p in page:
        cs = "".join(f"<Checksum{a.upper()}>{v}</Checksum{a.upper()}>" for a, v in p.checksum.items())
        items.append(f"<Part><PartNumber>{p.number}</PartNumber><LastModified>{xml.iso8601(p.mtime)}</LastModified>"
                     f"<ETag>{xml.esc(p.etag)}</ETag><Size>{p.size}</Size>{cs}</Part>")
    nxt = page[-1].number if page else 0
    o = xml.owner(owner, ctx.display_name(owner))
    body = xml.doc("ListPartsResult",
                   f"<Bucket>{xml.esc(req.bucket)}</Bucket><Key>{xml.key(req.key)}</Key>"
                   f"<UploadId>{xml.esc(req.query['uploadId'])}</UploadId><Initiator>{o[7:-8]}</Initiator>{o}"
                   f"<StorageClass>{res.upload.attrs.storage_class or 'STANDARD'}</StorageClass>"
                   f"<PartNumberMarker>{marker}</PartNumberMarker><NextPartNumberMarker>{nxt}</NextPartNumberMarker>"
                   f"<MaxParts>{max_parts}</MaxParts><IsTruncated>{str(truncated).lower()}</IsTruncated>"
                   f"{''.join(items)}")
    return Response(200, [("content-type", "application/xml")], body)


async def list_uploads(ctx, req):
    await bucket_access(ctx, req, "write")
    q = req.query
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    key_marker, id_marker = q.get("key-marker", ""), q.get("upload-id-marker", "")
    max_uploads = _int_arg(req, "max-uploads", 1000, 1000)
    url = q.get("encoding-type") == "url"
    uploads = await ctx.cluster.namenode.mpu_list(req.bucket)
    items, prefixes, truncated = [], [], False
    seen_prefixes = set()
    last_key, last_id = "", ""
    for u in uploads:
        k = u.key
        if not k.startswith(prefix):
            continue
        if key_marker and (k < key_marker or (k == key_marker and (not id_marker or u.id <= id_marker))):
            continue
        if delimiter:
            i = k.find(delimiter, len(prefix))
            if i >= 0:
                cp = k[: i + len(delimiter)]
                if cp not in seen_prefixes:
                    if len(items) + len(prefixes) >= max_uploads:
                        truncated = True
                        break
                    seen_prefixes.add(cp)
                    prefixes.append(cp)
                continue
        if len(items) + len(prefixes) >= max_uploads:
            truncated = True
            break
        items.append(u)
        last_key, last_id = k, u.id
    parts = []
    for u in items:
        owner = u.attrs.owner
        o = xml.owner(owner, ctx.display_name(owner))
        parts.append(f"<Upload><Key>{xml.enc_key(u.key, url)}</Key><UploadId>{u.id}</UploadId>"
                     f"<Initiator>{o[7:-8]}</Initiator>{o}<StorageClass>{u.attrs.storage_class or 'STANDARD'}"
                     f"</StorageClass><Initiated>{xml.iso8601(u.initiated)}</Initiated></Upload>")
    cps = "".join(f"<CommonPrefixes><Prefix>{xml.enc_key(p, url)}</Prefix></CommonPrefixes>" for p in prefixes)
    body = xml.doc("ListMultipartUploadsResult",
                   f"<Bucket>{xml.esc(req.bucket)}</Bucket><KeyMarker>{xml.enc_key(key_marker, url)}</KeyMarker>"
                   f"<UploadIdMarker>{xml.esc(id_marker)}</UploadIdMarker>"
                   f"<NextKeyMarker>{xml.enc_key(last_key, url)}</NextKeyMarker>"
                   f"<NextUploadIdMarker>{last_id}</NextUploadIdMarker>"
                   f"{f'<Delimiter>{xml.esc(delimiter)}</Delimiter>' if delimiter else ''}"
                   f"{f'<Prefix>{xml.enc_key(prefix, url)}</Prefix>' if prefix else '<Prefix></Prefix>'}"
                   f"<MaxUploads>{max_uploads}</MaxUploads><IsTruncated>{str(truncated).lower()}</IsTruncated>"
                   f"{''.join(parts)}{cps}{'<EncodingType>url</EncodingType>' if url else ''}")
    return Response(200, [("content-type", "application/xml")], body)
