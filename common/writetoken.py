"""Write tokens and receipts: a native client stores an object's blocks on the DataNodes itself.

The gateway checks the caller as for a PutObject of each key and allocates blocks from the NameNode (their placement:
primary and secondaries), then signs a WriteGrant: the bucket, the caller's access key, the blocks with their nodes,
the nodes' addresses, the largest size a block may have (the bucket's block size), the copies to wait for, and the
expiry. A DataNode stores a block from a connection without the cluster secret only if the grant is ours, live, names
that block on this node and allows its size (checked on the frame's head, before the payload is read), and only once.
It replicates to the other nodes the grant names (never to an address the client chose) and answers a receipt per
block: [id, size, crc, md5, nodes, acks] and a MAC, so that the gateway's commit trusts what was stored (size, CRC32C,
MD5 for the ETag) without seeing a byte. The commit (gateway/s3/direct.py) checks each receipt, that its block is one of
the caller's grants for this bucket, and has the NameNode commit only blocks still pending (allocated, never
committed): a block is never committed twice, and an object appears whole at its commit or not at all. Blocks never
committed are collected with the NameNode's other pending allocations (NN_PENDING_GRACE_S).

Keys of their own are derived from the cluster secret for tokens and for receipts, so neither can stand for the other
nor for a read token, and none reveals anything usable as the secret.
"""
from __future__ import annotations

import hashlib
import hmac
import time

import msgspec

from . import errors
from . import messages as m

TTL_S = 600  # a grant's life: long enough for a round of blocks on a slow link, short enough to bound a replay

_encode = msgspec.json.Encoder(order="sorted").encode


def _key(secret: str, what: bytes) -> bytes:
    return hashlib.sha256(b"epochfs " + what + b"\0" + secret.encode()).digest()


def _grant_mac(secret: str, g: m.WriteGrant) -> str:
    body = _encode([g.bucket, g.who, [[p.id, list(p.nodes)] for p in g.blocks], g.addrs, g.size, g.exp, g.acks])
    return hmac.new(_key(secret, b"write token"), body, hashlib.sha256).hexdigest()


def issue(secret: str, *, bucket: str, who: str, alloc: m.Allocation, ttl_s: float = TTL_S) -> m.WriteGrant:
    """The write token for the blocks of `alloc` (a NameNode allocation for `bucket`), for access key `who`."""
    g = m.WriteGrant(bucket=bucket, who=who, blocks=list(alloc.blocks),
                     addrs={str(n): alloc.addrs[str(n)] for p in alloc.blocks for n in p.nodes if str(n) in alloc.addrs},
                     size=alloc.block_size, exp=int(time.time() + ttl_s), acks=alloc.acks)
    return msgspec.structs.replace(g, tok=_grant_mac(secret, g))


def check(secret: str, grant: m.WriteGrant, *, live: bool = True) -> None:
    """Raise Unauthorized unless `grant` is one of ours (and, with `live`, not expired)."""
    if live and grant.exp < time.time():
        raise errors.Unauthorized("write token expired")
    if not hmac.compare_digest(_grant_mac(secret, grant).encode(), grant.tok.encode()):
        raise errors.Unauthorized("bad write token")


def check_heads(secret: str, grant: m.WriteGrant, heads: list[m.ReplicaHead], node: int | None,
                payload_len: int) -> dict[int, tuple[int, ...]]:
    """A DataNode's check of a tokened write before its payload is read: the grant is live and ours, every block is
    one it names, placed on this `node`, at most grant.size bytes, and the sizes add up to the payload.
    Returns block id -> its placed nodes."""
    check(secret, grant)
    placed = {p.id: p.nodes for p in grant.blocks}
    if sum(h.size for h in heads) != payload_len or any(h.size < 0 for h in heads):
        raise errors.InvalidInput("write_tokened: the block sizes do not add up to the payload")
    if len({h.id for h in heads}) != len(heads):
        raise errors.InvalidInput("write_tokened: a block is named twice")
    for h in heads:
        nodes = placed.get(h.id)
        if nodes is None:
            raise errors.Unauthorized(f"the write token does not cover block {h.id}")
        if node is None or node not in nodes:
            raise errors.Unauthorized(f"block {h.id} is not placed on this node")
        if h.size > grant.size:
            raise errors.EntityTooLarge(f"block {h.id}: {h.size} bytes, the write token allows {grant.size}")
    return placed


def _receipt_mac(secret: str, r: m.BlockReceipt) -> str:
    body = _encode([r.id, r.size, r.crc, r.md5, list(r.nodes), r.acks])
    return hmac.new(_key(secret, b"write receipt"), body, hashlib.sha256).hexdigest()


def receipt(secret: str, *, id: int, size: int, crc: int, md5: str, nodes, acks: int) -> m.BlockReceipt:
    """A DataNode's signed word that it stored block `id` (and replicates it to the rest of `nodes`)."""
    r = m.BlockReceipt(id=id, size=size, crc=crc, md5=md5, nodes=tuple(nodes), acks=acks, mac="")
    return msgspec.structs.replace(r, mac=_receipt_mac(secret, r))


def check_receipt(secret: str, r: m.BlockReceipt) -> None:
    """Raise Unauthorized unless `r` is a DataNode's receipt, as it wrote it."""
    if not hmac.compare_digest(_receipt_mac(secret, r).encode(), r.mac.encode()):
        raise errors.Unauthorized(f"bad receipt for block {r.id}")


def multipart_etag(md5s: list[str]) -> str:
    """The ETag of a directly written object from its blocks' MD5s (hex): the MD5 of the bytes when it is one block
    (as a PutObject's), else S3's multipart form, the MD5 of the blocks' binary MD5s and "-<blocks>" (each block a
    part); an empty object's is the MD5 of nothing."""
    if not md5s:
        return hashlib.md5(b"").hexdigest()
    if len(md5s) == 1:
        return md5s[0]
    return hashlib.md5(b"".join(bytes.fromhex(x) for x in md5s)).hexdigest() + f"-{len(md5s)}"
