"""Batch ingest of small objects: many PUTs in one request, at /_epochfs/put/<bucket>.

  POST /_epochfs/put/<bucket>
      body: a 4-byte big-endian length, a JSON index {"items": [{"key": k, "size": n, "ctype": content type,
      "meta": {name: value}, "md5": base64 Content-MD5, "checksum": {alg: base64 value}, "if_none_match": "*"},
      ...]} (only key and size required), then the items' bytes back to back in index order.
      Answer: 200 and JSON {"items": [{"etag": e, "mt": mtime_ns, "vid": version id, "cs": {alg: value}} |
      {"err": S3 code, "msg": text}]}, one entry per item in request order.

Each item becomes an object exactly as a PutObject of its bytes with those headers would (Content-Type,
x-amz-meta-*, Content-MD5, x-amz-checksum-<alg>, If-None-Match), with its own ETag: whole or not at all. The request
is checked as a whole first (signed; the bucket's write permission; Content-Length present and at most MAX_BODY, so
nothing is buffered before authentication and the bound; at most MAX_ITEMS items; sizes adding up to the body; a
signed payload's SHA-256): any failure there answers an S3 error and stores nothing. Then each item is checked on its
own (key, metadata, digests: a mismatch is that item's BadDigest) and the items that pass cost one block allocation,
one put_many per primary DataNode (gateway/cluster.py write_many) and one NameNode command (PutObjects), where each
item still meets the bucket's quota, write policy, versioning and its condition on its own: an item refused there is
its error and the others commit. The request's x-amz-acl / grant headers and storage class apply to every item.
"""
from __future__ import annotations

import asyncio
import hashlib
import struct

import msgspec

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.blocks import crc32c

from . import args, sse
from .access import bucket_access, check_object_write
from .body import BodyCheck, read_exactly
from .errors import S3Error, from_domain, invalid_request
from .ext import extension
from .http import Response
from .objects import MAX_META_BYTES, _TOKEN, check_key, object_attrs
from .sigv4 import STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER, UNSIGNED

MAX_ITEMS = 1000
MAX_BODY = 32 << 20     # a DataNode call carries at most a batch's bytes: under its 64 MiB RPC payload bound
MAX_INDEX = 4 << 20
_LEN = struct.Struct(">I")
_STREAMING = (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER)


class _Item(msgspec.Struct, forbid_unknown_fields=True):
    key: str
    size: int
    ctype: str | None = None
    meta: dict[str, str] = {}
    md5: str | None = None
    checksum: dict[str, str] = {}
    if_none_match: str | None = None


class _Index(msgspec.Struct):
    items: list[_Item]


_decode_index = msgspec.json.Decoder(_Index).decode


def _malformed(why: str) -> S3Error:
    return S3Error("MalformedBatch", f"Bad batch body: {why}.", 400)


def _parse(body: memoryview) -> tuple[list[_Item], memoryview]:
    if len(body) < _LEN.size:
        raise _malformed("it must start with the 4-byte length of its JSON index")
    n = _LEN.unpack_from(body)[0]
    if n > MAX_INDEX or _LEN.size + n > len(body):
        raise _malformed("the index length is past the body's end")
    try:
        items = _decode_index(body[_LEN.size:_LEN.size + n]).items
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise _malformed(f'the index must be {{"items": [{{"key", "size", ...}}, ...]}} ({e})') from None
    if not items:
        raise _malformed("no items")
    if len(items) > MAX_ITEMS:
        raise invalid_request(f"A batch holds at most {MAX_ITEMS} items; this one has {len(items)}.")
    data = body[_LEN.size + n:]
    if any(it.size < 0 for it in items) or sum(it.size for it in items) != len(data):
        raise _malformed(f"the item sizes add up to {sum(it.size for it in items)}, the data is {len(data)} bytes")
    if len({it.key for it in items}) != len(items):
        raise _malformed("a key appears twice")
    return items, data


def _item_attrs(base: m.ObjectRecord, it: _Item) -> m.ObjectRecord:
    meta = {k.lower(): args.header_value(v, "x-amz-meta-" + k) for k, v in it.meta.items()}
    if not all(_TOKEN.fullmatch(k) for k in meta):
        raise errors.InvalidInput("Metadata names must be valid HTTP header names")
    if sum(len(k) + len(v) for k, v in meta.items()) > MAX_META_BYTES:
        raise S3Error("MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.", 400)
    ctype = args.header_value(it.ctype, "content-type") if it.ctype else "binary/octet-stream"
    return msgspec.structs.replace(base, content_type=ctype, meta=meta)


def _item_check(it: _Item) -> BodyCheck:
    """The digests an item asks to be verified, as a PutObject's headers would (BadDigest, InvalidDigest, ...)."""
    h = {f"x-amz-checksum-{alg.lower()}": v for alg, v in it.checksum.items()}
    if len(h) != len(it.checksum) or any(a[15:] not in ("crc32", "crc32c", "crc64nvme", "sha1", "sha256") for a in h):
        raise invalid_request(f"Unknown checksum algorithm in {sorted(it.checksum)}")
    if it.md5 is not None:
        h["content-md5"] = it.md5
    return BodyCheck(h, None)


def _hash_all(todo: list, data: memoryview, offsets: list[int], bs: int) -> list[list[tuple[memoryview, int]]]:
    """In a worker thread (hashlib and crc32c let go of the GIL): each item's digests and its blocks' CRC32C."""
    out = []
    for i, check in todo:
        piece = data[offsets[i]:offsets[i + 1]]
        check.update(piece)
        out.append([(piece[o:o + bs], crc32c(piece[o:o + bs])) for o in range(0, len(piece), bs)])
    return out


def failed(e: Exception) -> m.PutResult:
    """One item's error in a batch answer, as S3 would name it."""
    s3e = e if isinstance(e, S3Error) else from_domain(e)
    return m.PutResult(err=s3e.code, msg=s3e.message)


async def commit_items(ctx, bucket: str, todo: list[tuple[int, dict, m.PutItem]], results: list) -> list[int]:
    """Commit a batch's items (index in `results`, checksum fields, item) in one PutObjects; fills `results` with
    each item's PutResult or error; returns the blocks of the items the NameNode refused (the caller gives them
    back)."""
    res = await ctx.cluster.commit(bucket, ctx.cluster.namenode.put_objects(bucket, [p for _, _, p in todo]))
    lost = []
    for k, (i, cs, p) in enumerate(todo):
        done = res.done[k]
        if done is None:
            e = res.errs.get(k)
            results[i] = failed(errors.by_name(e.err)(e.msg) if e else errors.DomainError("not committed"))
            lost += [b.id for b in p.blocks]
            continue
        results[i] = m.PutResult(etag=done.etag, mt=done.mtime, vid=done.version_id or None, cs=cs or None)
    return lost


@extension("POST", "put")
async def batch_put(ctx, req):
    if req.bucket is None or req.key is not None:
        raise errors.InvalidInput("POST /_epochfs/put/<bucket>: name the bucket, and nothing after it")
    info = await bucket_access(ctx, req, "object")  # with a policy each item is checked on its own (it may name keys)
    if not info.policy:  # without one the ACLs decide for the whole batch, before any byte is read
        await bucket_access(ctx, req, "write", action="s3:PutObject")
    h = req.headers
    if "content-length" not in h or "transfer-encoding" in h:
        raise S3Error("MissingContentLength", "You must provide the Content-Length HTTP header.", 411)
    length = args.int_arg(h["content-length"], "content-length", 0, hi=args.MAX_INT)
    if length > MAX_BODY:
        raise S3Error("EntityTooLarge", f"A batch body holds at most {MAX_BODY} bytes; this one has {length}.", 400,
                      ProposedSize=length, MaxSizeAllowed=MAX_BODY)
    payload_hash = req.auth.payload_hash if req.auth else UNSIGNED
    if payload_hash in _STREAMING or "aws-chunked" in h.get("content-encoding", ""):
        raise invalid_request("A batch body can't be aws-chunked: send it with its Content-Length.")
    base = await object_attrs(ctx, req, info)  # the request's ACL and storage class, for every item
    sse.for_write(ctx, h, info.encryption)  # the encryption headers checked before the body is read
    body = await read_exactly(req.receive, length)
    if payload_hash != UNSIGNED:
        if len(payload_hash) != 64:
            raise errors.InvalidInput("x-amz-content-sha256 must be UNSIGNED-PAYLOAD or a SHA-256 hex digest")
        if (await asyncio.to_thread(lambda: hashlib.sha256(body).hexdigest())) != payload_hash:
            raise S3Error("XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match "
                          "what was computed.", 400)
    items, data = _parse(body)
    results: list[m.PutResult | None] = [None] * len(items)
    offsets = [0]
    for it in items:
        offsets.append(offsets[-1] + it.size)
    todo, attrs = [], {}
    limit = ctx.settings.max_object_size
    for i, it in enumerate(items):
        try:
            check_key(it.key)
            check_object_write(ctx, req, info, it.key, "s3:PutObject")
            if it.key.endswith("/"):
                raise errors.InvalidInput("A directory marker (a key ending in /) can't be a batch item.")
            if limit is not None and it.size > limit:
                raise errors.EntityTooLarge("Your proposed upload exceeds the maximum allowed size")
            if it.if_none_match not in (None, "*"):
                raise errors.InvalidInput("if_none_match must be *")
            attrs[i] = _item_attrs(base, it)
            todo.append((i, _item_check(it)))
        except (S3Error, errors.DomainError) as e:
            results[i] = failed(e)
    bs = await ctx.cluster.block_size(req.bucket)
    blocks = await asyncio.to_thread(_hash_all, todo, data, offsets, bs) if todo else []
    ok = []
    for (i, check), blks in zip(todo, blocks):
        try:
            check.verify()
            ok.append((i, check, blks))
        except (S3Error, errors.DomainError) as e:
            results[i] = failed(e)
    # each item encrypted as a PutObject would be (its own data key; by its headers or the bucket's default)
    sealed = [sse.for_write(ctx, h, info.encryption)[0] for _ in ok]
    written = await ctx.cluster.write_many(req.bucket, [blks for _, _, blks in ok],
                                           ciphers=[s.cipher if s else None for s in sealed])
    commit, ids = [], []
    for (i, check, _), w, sealed_i in zip(ok, written, sealed):
        if isinstance(w, errors.DomainError):
            results[i] = failed(w)
            continue
        cs = check.checksums()
        obj = msgspec.structs.replace(attrs[i], size=items[i].size,
                                      etag=sealed_i.etag(check.etag) if sealed_i else check.etag,
                                      checksum={**cs, "type": "FULL_OBJECT"} if cs else {},
                                      sse=sealed_i.info if sealed_i else None)
        commit.append((i, cs, m.PutItem(key=items[i].key, obj=obj, blocks=tuple(w),
                                        if_none_match=items[i].if_none_match)))
        ids += [b.id for b in w]
    if commit:
        try:
            lost = await commit_items(ctx, req.bucket, commit, results)
        except BaseException:
            await ctx.cluster.abandon(ids)
            raise
        if lost:
            await ctx.cluster.abandon(lost)
    return Response(200, [("content-type", "application/json")], msgspec.json.encode(m.PutResults(items=results)))
