"""Direct writes: a native client stores blocks on the DataNodes itself; the gateway authorizes, allocates, commits.

  POST /_epochfs/allocate/<bucket>   body: a WriteAsk {"keys": [...], "sizes": [...], "more": n}
      Checked as a PutObject of each key (signed; the bucket's write permission or policy; valid keys); a bucket that
      encrypts new objects by default, or encryption headers, are refused with EncryptedObject (only a gateway
      encrypts: write through it). Allocates from the NameNode the blocks objects of `sizes` bytes need in the
      bucket's block size, plus `more`, and answers a WriteGrant (common/writetoken.py): the blocks with their nodes
      (primary first), the nodes' RPC addresses, the largest size a block may have, the copies the write policy
      waits for, the expiry, signed.
  POST /_epochfs/commit/<bucket>     body: a DirectCommit {"grants": [...], "items": [{"key", "blocks": [receipt, ...],
      "ctype", "meta", "checksum": {"crc32c": b64}, "if_none_match", "if_match"}, ...]}
      Answer: 200 and PutResults, one entry per item in request order (as the batch PUT's).
  POST /_epochfs/abandon/<bucket>    body: a DirectCommit with the grants and no items: their blocks never committed
      are given back (an aborted or failed write; what nobody gives back the NameNode's pending expiry collects).

The commit makes each item an object exactly as a PutObject of its bytes would, without seeing them: each block's
receipt must be a DataNode's (its MAC: size, CRC32C and MD5 as stored and checked there), name a block of one of the
caller's grants for this bucket (a grant is bound to an access key and a bucket), and every block but the last be
full-size; an x-amz-checksum-crc32c given is checked against the CRC32C combined from the blocks'. The NameNode
commits only blocks still pending (as every commit over RPC): a block committed once, or collected, can't be
committed again. Quota, write policy (each receipt's acks), conditions (If-None-Match: *, If-Match) and versioning
apply per item as for a PutObject; an item refused is its own error and its blocks are given back.

ETag: the MD5 of the bytes for an object of one block (every object up to the block size, 4 MiB by default: as S3's
PutObject), else S3's multipart form over the blocks, md5(digest(block 1) + ... + digest(block n)) + "-n", the blocks
standing for parts (as S3's ETag of a multipart upload, it is not the MD5 of the content). The DataNodes compute the
digests while they store: MD5s, or XXH3-128s for the blocks of an object the writer knows has several (its stream's
rounds after the first, or a round of more than one block: common/writetoken.py block_digest).
"""
from __future__ import annotations

import base64
import os

import msgspec
from awscrt import checksums as crt

from epochfs.common import errors, writetoken
from epochfs.common import messages as m

from . import sse
from .access import bucket_access, check_object_write
from .body import read_all
from .errors import S3Error, invalid_request
from .ext import extension
from .http import Response
from .ingest import _item_attrs, commit_items, failed
from .objects import check_key, object_attrs
from .objectlock import with_lock

MAX_BODY = 8 << 20
MAX_KEYS = 1000
MAX_BLOCKS = 4096  # in one allocation: a client streaming a larger object asks again
MAX_GRANTS = 4096

_decode_ask = msgspec.json.Decoder(m.WriteAsk).decode
_decode_commit = msgspec.json.Decoder(m.DirectCommit).decode


def _decode(decode, body: bytes, what: str):
    try:
        return decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise S3Error("MalformedBatch", f"Bad {what} body: {e}.", 400) from None


def _checked(check, *args, **kw) -> None:
    """A token or receipt check at the edge: a refusal is AccessDenied (403)."""
    try:
        check(*args, **kw)
    except errors.Unauthorized as e:
        raise errors.PermissionDenied(e.message) from None


def _who(req) -> str:
    return req.auth.user.access_key


async def _write_access(ctx, req, keys: list[str]):
    """The bucket's record if the caller may PutObject each of `keys` (the batch PUT's checks); the first refusal
    raises."""
    info = await bucket_access(ctx, req, "object")
    if not info.policy:
        await bucket_access(ctx, req, "write", action="s3:PutObject")
    for k in keys:
        check_key(k)
        if k.endswith("/"):
            raise errors.InvalidInput("A directory marker (a key ending in /) can't be written directly.")
        check_object_write(ctx, req, info, k, "s3:PutObject")
    return info


@extension("POST", "allocate")
async def allocate(ctx, req):
    if req.bucket is None or req.key is not None:
        raise errors.InvalidInput("POST /_epochfs/allocate/<bucket>: name the bucket, and nothing after it")
    ask = _decode(_decode_ask, await read_all(req.receive, MAX_BODY), "allocate")
    if not ask.keys or len(ask.keys) > MAX_KEYS or len(ask.sizes) > len(ask.keys):
        raise invalid_request(f"An allocation names 1 to {MAX_KEYS} keys, and at most one size per key.")
    info = await _write_access(ctx, req, ask.keys)
    sealed, _ = sse.for_write(ctx, req.headers, info.encryption)
    if sealed is not None:
        raise S3Error("EncryptedObject", "This bucket encrypts new objects: only the gateway writes them (PUT "
                      "them).", 400)
    limit = ctx.settings.max_object_size
    if limit is not None and any(s > limit for s in ask.sizes):
        raise errors.EntityTooLarge("Your proposed upload exceeds the maximum allowed size")
    bs = await ctx.cluster.block_size(req.bucket)
    count = sum(-(-s // bs) for s in ask.sizes) + ask.more
    if count > MAX_BLOCKS:
        raise invalid_request(f"An allocation has at most {MAX_BLOCKS} blocks; this one asks for {count}.")
    if count:
        alloc = await ctx.cluster.namenode.allocate(req.bucket, count=count,
                                                    seed=int.from_bytes(os.urandom(8), "big") >> 1)
    else:
        alloc = m.Allocation(block_size=bs, blocks=[], addrs={})
    grant = writetoken.issue(ctx.settings.cluster_secret, bucket=req.bucket, who=_who(req), alloc=alloc)
    return Response(200, [("content-type", "application/json")], msgspec.json.encode(grant))


def granted(ctx, req, grants: list[m.WriteGrant]) -> dict[int, int]:
    """The blocks the caller's write tokens for req.bucket allocated: block id -> the largest size it may have.
    AccessDenied for a token that is not the gateway's, another bucket's or another access key's (an expired one is
    fine: the NameNode's pending record decides whether its blocks can still be committed). For a commit of directly
    written blocks (this module's, and the mount's file writes)."""
    allowed: dict[int, int] = {}
    for g in grants:
        _checked(writetoken.check, ctx.settings.cluster_secret, g, live=False)
        if g.bucket != req.bucket or g.who != _who(req):
            raise errors.PermissionDenied("A write token of another bucket or another access key.")
        allowed.update((p.id, g.size) for p in g.blocks)
    return allowed


def written(ctx, receipts: list[m.BlockReceipt], allowed: dict[int, int], *,
            full_blocks: bool = True) -> tuple[list[m.WrittenBlock], int, int]:
    """The blocks of `receipts` as a commit names them, their total size and the CRC32C of their bytes in order,
    once each receipt is a DataNode's (AccessDenied if not) for a block of `allowed` (granted(); AccessDenied if
    not); with `full_blocks` every block but the last must have its grant's size (InvalidArgument). The NameNode's
    commit must still be `fresh` (only pending blocks)."""
    secret = ctx.settings.cluster_secret
    size = crc = 0
    out = []
    for j, r in enumerate(receipts):
        _checked(writetoken.check_receipt, secret, r)
        most = allowed.get(r.id)
        if most is None:
            raise errors.PermissionDenied(f"block {r.id} was not allocated to you for this bucket")
        if r.size > most or r.size <= 0 or (full_blocks and j < len(receipts) - 1 and r.size != most):
            raise errors.InvalidInput(f"block {r.id}: {r.size} bytes; every block but the last must have "
                                      f"{most}, the last at most that")
        crc = crt.combine_crc32c(crc, r.crc, r.size) if j else r.crc
        size += r.size
        out.append(m.WrittenBlock(r.id, r.size, r.crc, r.nodes, r.acks))
    return out, size, crc


def _check_item(ctx, it: m.DirectItem, allowed: dict[int, int]) -> tuple[list[m.WrittenBlock], int, int, str]:
    """(blocks, size, CRC32C of the whole, ETag) of an item whose receipts pass, else the error that refuses it."""
    blocks, size, crc = written(ctx, it.blocks, allowed)
    if ctx.settings.max_object_size is not None and size > ctx.settings.max_object_size:
        raise errors.EntityTooLarge("Your proposed upload exceeds the maximum allowed size")
    if it.if_none_match not in (None, "*"):
        raise errors.InvalidInput("if_none_match must be *")
    if set(it.checksum) - {"crc32c"}:
        raise invalid_request("A direct write's object checksum can only be crc32c (the blocks' CRCs make it).")
    if "crc32c" in it.checksum and it.checksum["crc32c"] != _b64(crc):
        raise S3Error("BadDigest", "The CRC32C you specified did not match the calculated checksum.", 400)
    return blocks, size, crc, f'"{writetoken.object_etag([r.digest for r in it.blocks])}"'


def _b64(crc: int) -> str:
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


@extension("POST", "commit")
async def commit(ctx, req):
    if req.bucket is None or req.key is not None:
        raise errors.InvalidInput("POST /_epochfs/commit/<bucket>: name the bucket, and nothing after it")
    body = _decode(_decode_commit, await read_all(req.receive, MAX_BODY), "commit")
    items = body.items
    if not items or len(items) > MAX_KEYS or len(body.grants) > MAX_GRANTS:
        raise invalid_request(f"A commit has 1 to {MAX_KEYS} items and at most {MAX_GRANTS} grants.")
    if len({it.key for it in items}) != len(items):
        raise S3Error("MalformedBatch", "Bad commit body: a key appears twice.", 400)
    allowed = granted(ctx, req, body.grants)
    info = await bucket_access(ctx, req, "object")
    if not info.policy:
        await bucket_access(ctx, req, "write", action="s3:PutObject")
    base = with_lock(req, info, await object_attrs(ctx, req, info), put=True)
    results: list[m.PutResult | None] = [None] * len(items)
    todo: list[tuple[int, dict, m.PutItem]] = []
    for i, it in enumerate(items):
        try:
            check_key(it.key)
            if it.key.endswith("/"):
                raise errors.InvalidInput("A directory marker (a key ending in /) can't be written directly.")
            check_object_write(ctx, req, info, it.key, "s3:PutObject")
            blocks, size, crc, etag = _check_item(ctx, it, allowed)
            cs = {"crc32c": _b64(crc)} if it.checksum else {}
            obj = msgspec.structs.replace(_item_attrs(base, it), size=size, etag=etag,
                                          checksum={**cs, "type": "FULL_OBJECT"} if cs else {})
            todo.append((i, cs, m.PutItem(key=it.key, obj=obj, blocks=tuple(blocks), if_match=it.if_match,
                                          if_none_match=it.if_none_match)))
        except (S3Error, errors.DomainError) as e:
            results[i] = failed(e)
    lost = [r.id for i, it in enumerate(items) if results[i] is not None for r in it.blocks if r.id in allowed]
    if todo:
        lost += await commit_items(ctx, req.bucket, todo, results)
    if lost:  # only pending blocks are given back: one committed (another item's, an earlier commit's) stays
        await ctx.cluster.abandon(lost)
    return Response(200, [("content-type", "application/json")], msgspec.json.encode(m.PutResults(items=results)))


@extension("POST", "abandon")
async def abandon(ctx, req):
    """POST /_epochfs/abandon/<bucket> (a DirectCommit with no items): the blocks of the caller's grants that were
    never committed are given back (deleted from their nodes); committed ones are not touched (only pending blocks
    can be abandoned)."""
    if req.bucket is None or req.key is not None:
        raise errors.InvalidInput("POST /_epochfs/abandon/<bucket>: name the bucket, and nothing after it")
    body = _decode(_decode_commit, await read_all(req.receive, MAX_BODY), "abandon")
    if body.items or len(body.grants) > MAX_GRANTS:
        raise invalid_request(f"An abandon names at most {MAX_GRANTS} grants and no items.")
    await ctx.cluster.abandon(list(granted(ctx, req, body.grants)))
    return Response(204)
