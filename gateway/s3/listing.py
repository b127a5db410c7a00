"""ListObjects (v1), ListObjectsV2 and ListObjectVersions; the NameNode walks the tree, this module speaks XML."""
from __future__ import annotations

import base64

from epochfs.common import errors
from epochfs.common.messages import ListEntry, Listing, ListPrefix, VersionEntry, VersionListing

from . import args, xml
from .access import bucket_access
from .http import Response


def _params(req) -> tuple[str, str, int, bool]:
    q = req.query
    enc = q.get("encoding-type")
    if enc is not None and enc.lower() != "url":
        raise errors.InvalidInput("Invalid Encoding Method specified in Request", argument="encoding-type",
                                  value=enc)
    max_keys = args.int_arg(q.get("max-keys"), "max-keys", 1000)
    if q.get("allow-unordered", "").lower() == "true" and q.get("delimiter"):
        # Ceph RGW's extension; listings here are always ordered, but the combination is refused as RGW does
        raise errors.InvalidInput("allow-unordered cannot be used with a delimiter", argument="allow-unordered")
    return q.get("prefix", ""), q.get("delimiter", ""), min(max_keys, 1000), enc is not None


async def _list(ctx, req, prefix, delimiter, after, max_keys) -> Listing:
    if max_keys == 0:
        return Listing(items=[], truncated=False)
    return await ctx.cluster.namenode.list_objects(req.bucket, prefix, delimiter, after, max_keys)


def _last_key(it: ListEntry | ListPrefix | VersionEntry) -> str:
    return it.prefix if isinstance(it, ListPrefix) else it.key


def _items_xml(items, url: bool, with_owner: bool, owners) -> tuple[str, str]:
    contents, prefixes = [], []
    for it in items:
        if isinstance(it, ListPrefix):
            prefixes.append(f"<CommonPrefixes><Prefix>{xml.enc_key(it.prefix, url)}</Prefix></CommonPrefixes>")
        else:
            o = xml.owner(it.owner, owners(it.owner)) if with_owner else ""
            contents.append(f"<Contents><Key>{xml.enc_key(it.key, url)}</Key><LastModified>{xml.iso8601(it.mtime)}"
                            f"</LastModified><ETag>{xml.esc(it.etag)}</ETag><Size>{it.size}</Size>{o}"
                            f"<StorageClass>{it.storage_class}</StorageClass></Contents>")
    return "".join(contents), "".join(prefixes)


def _opt(tag: str, value: str, url: bool = False) -> str:
    return f"<{tag}>{xml.enc_key(value, url)}</{tag}>" if value else ""


async def list_objects_v1(ctx, req):
    await bucket_access(ctx, req, "read")
    prefix, delimiter, max_keys, url = _params(req)
    marker = req.query.get("marker", "")
    res = await _list(ctx, req, prefix, delimiter, marker, max_keys)
    contents, prefixes = _items_xml(res.items, url, True, ctx.display_name)
    next_marker = ""
    if res.truncated and delimiter and res.items:
        next_marker = f"<NextMarker>{xml.enc_key(_last_key(res.items[-1]), url)}</NextMarker>"
    # v1's top-level Prefix is sent as it is even with encoding-type=url: S3 clients (botocore) decode Marker,
    # NextMarker, Delimiter and the keys of a v1 listing, not its Prefix
    body = xml.doc("ListBucketResult",
                   f"<Name>{xml.esc(req.bucket)}</Name><Prefix>{xml.text(prefix)}</Prefix>"
                   f"<Marker>{xml.enc_key(marker, url)}</Marker>{next_marker}<MaxKeys>{max_keys}</MaxKeys>"
                   f"{_opt('Delimiter', delimiter, url)}<IsTruncated>{str(res.truncated).lower()}</IsTruncated>"
                   f"{'<EncodingType>url</EncodingType>' if url else ''}{contents}{prefixes}")
    return Response(200, [("content-type", "application/xml")], body)


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def _untoken(tok: str) -> str:
    try:
        return base64.urlsafe_b64decode(tok.encode()).decode()
    except Exception:
        raise errors.InvalidInput("The continuation token provided is incorrect", argument="continuation-token") \
            from None


async def list_objects_v2(ctx, req):
    await bucket_access(ctx, req, "read")
    prefix, delimiter, max_keys, url = _params(req)
    q = req.query
    token = q.get("continuation-token")
    start_after = q.get("start-after", "")
    after = _untoken(token) if token else start_after  # an empty token means "from the start", as in S3
    res = await _list(ctx, req, prefix, delimiter, after, max_keys)
    contents, prefixes = _items_xml(res.items, url, q.get("fetch-owner") == "true", ctx.display_name)
    nxt = ""
    if res.truncated and res.items:
        nxt = f"<NextContinuationToken>{_token(_last_key(res.items[-1]))}</NextContinuationToken>"
    body = xml.doc("ListBucketResult",
                   f"<Name>{xml.esc(req.bucket)}</Name><Prefix>{xml.enc_key(prefix, url)}</Prefix>"
                   f"<MaxKeys>{max_keys}</MaxKeys><KeyCount>{len(res.items)}</KeyCount>"
                   f"{_opt('Delimiter', delimiter, url)}<IsTruncated>{str(res.truncated).lower()}</IsTruncated>"
                   f"{'' if token is None else f'<ContinuationToken>{xml.esc(token)}</ContinuationToken>'}{nxt}{_opt('StartAfter', start_after, url)}"
                   f"{'<EncodingType>url</EncodingType>' if url else ''}{contents}{prefixes}")
    return Response(200, [("content-type", "application/xml")], body)


async def list_versions(ctx, req):
    await bucket_access(ctx, req, "read")
    prefix, delimiter, max_keys, url = _params(req)
    marker, vid_marker = req.query.get("key-marker", ""), req.query.get("version-id-marker", "")
    if vid_marker and not marker:
        raise errors.InvalidInput("A version-id marker cannot be specified without a key marker.",
                                  argument="version-id-marker")
    res = VersionListing(items=[], truncated=False) if max_keys == 0 else \
        await ctx.cluster.namenode.list_versions(req.bucket, prefix, delimiter, marker, vid_marker, max_keys)
    parts = []
    for it in res.items:
        if isinstance(it, ListPrefix):
            parts.append(f"<CommonPrefixes><Prefix>{xml.enc_key(it.prefix, url)}</Prefix></CommonPrefixes>")
            continue
        owner = xml.owner(it.owner, ctx.display_name(it.owner))
        common = (f"<Key>{xml.enc_key(it.key, url)}</Key><VersionId>{xml.esc(it.version_id)}</VersionId>"
                  f"<IsLatest>{str(it.latest).lower()}</IsLatest><LastModified>{xml.iso8601(it.mtime)}</LastModified>")
        if it.delete_marker:
            parts.append(f"<DeleteMarker>{common}{owner}</DeleteMarker>")
        else:
            parts.append(f"<Version>{common}<ETag>{xml.esc(it.etag)}</ETag><Size>{it.size}</Size>"
                         f"{owner}<StorageClass>{it.storage_class}</StorageClass></Version>")
    nxt = ""
    if res.truncated and res.items:
        last = res.items[-1]
        nxt = f"<NextKeyMarker>{xml.enc_key(_last_key(last), url)}</NextKeyMarker>"
        if isinstance(last, VersionEntry):
            nxt += f"<NextVersionIdMarker>{xml.esc(last.version_id)}</NextVersionIdMarker>"
    body = xml.doc("ListVersionsResult",
                   f"<Name>{xml.esc(req.bucket)}</Name><Prefix>{xml.enc_key(prefix, url)}</Prefix>"
                   f"<KeyMarker>{xml.enc_key(marker, url)}</KeyMarker>"
                   f"<VersionIdMarker>{xml.esc(vid_marker)}</VersionIdMarker>{nxt}"
                   f"<MaxKeys>{max_keys}</MaxKeys>{_opt('Delimiter', delimiter, url)}"
                   f"<IsTruncated>{str(res.truncated).lower()}</IsTruncated>"
                   f"{'<EncodingType>url</EncodingType>' if url else ''}{''.join(parts)}")
    return Response(200, [("content-type", "application/xml")], body)
