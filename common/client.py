"""A small async S3 client on httpx (HTTP/1.1 keep-alive), shared by the native frontends.

Requests are signed with SigV4 and UNSIGNED-PAYLOAD (the connection is trusted for integrity; the body is not hashed).
S3 error codes become the domain errors of common/errors.py through one table, so callers map them once more at their
own edge (frontends/errmap.py). httpx runs on anyio, so the client works under asyncio and trio; it must be created
and used in one event loop, and never carried across a fork.
"""
from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import logging
import os
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import AsyncIterator, Callable, Iterable
from urllib.parse import unquote
from xml.sax.saxutils import escape

import anyio
import httpx
import msgspec
import orjson
import sniffio

from . import defaults, errors, localread, sigv4
from . import messages as m
from .blocks import crc32c, pick_replica, piece_starts, pieces_within
from .clients import DataNodeClient
from .config import parse_addr
from .directwrite import DirectUnavailable, DirectWriter
from .failover import read_deadline
from .http1 import LeanTransport
from .rpc import RpcClient, TrioRpcClient

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")  # characters no XML 1.0 document can hold
_CR = {"\r": "&#13;"}
MIN_PART = defaults.MIN_PART_SIZE
log = logging.getLogger("epochfs.client")
# what one batch PUT (gateway/s3/ingest.py) may hold
INGEST_MAX_ITEMS = 1000
INGEST_MAX_BYTES = 32 << 20
# after the DataNodes could not be reached directly, batch reads go through the gateway for this long
DIRECT_RETRY_S = 30.0
# a single put of at least this many bytes goes straight to the DataNodes (below it, one PUT through the gateway is
# one round trip against three: allocate, store, commit); batches (put_many) and streams (put_parts) always try
DIRECT_MIN_PUT = 1 << 20
# an open file's first read that takes the whole object is one GET through the gateway below this size, and reads
# straight from the DataNodes (locate, then the blocks) from it: the GET's body through httpx costs ~1.7 ms of client
# CPU per MiB, the DataNodes' frames ~0.5. fsspec open().read(), whole and located, alternated: 4 MiB 362 / 311 MB/s
# (7.8 / 9.3 ms of client CPU per file), 16 MiB 427 / 940 MB/s (28.2 / 11.9 ms)
WHOLE_GET_MAX = 8 << 20
DOWNLOAD_PIECE = 8 << 20  # a download from the DataNodes reads this much at a time (32 MiB: 40% slower, more sys CPU)

S3_CODES: dict[str, type[errors.DomainError]] = {
    "NoSuchBucket": errors.NoSuchBucket, "NoSuchKey": errors.NoSuchKey, "NoSuchUpload": errors.NoSuchUpload,
    "NoSuchVersion": errors.NoSuchVersion, "BucketNotEmpty": errors.BucketNotEmpty,
    "BucketAlreadyOwnedByYou": errors.BucketAlreadyOwnedByYou, "BucketAlreadyExists": errors.BucketAlreadyExists,
    "InvalidBucketName": errors.InvalidBucketName, "KeyTooLongError": errors.KeyTooLong,
    "InvalidPart": errors.InvalidPart, "InvalidPartOrder": errors.InvalidPartOrder,
    "EntityTooSmall": errors.EntityTooSmall, "PreconditionFailed": errors.PreconditionFailed,
    "MethodNotAllowed": errors.MethodNotAllowed, "ServiceUnavailable": errors.Unavailable,
    "SlowDown": errors.Unavailable, "AccessDenied": errors.Unauthorized,
    "InvalidAccessKeyId": errors.Unauthorized, "SignatureDoesNotMatch": errors.Unauthorized,
    "QuotaExceeded": errors.QuotaExceeded,
}
STATUS_FALLBACK: dict[int, type[errors.DomainError]] = {
    400: errors.InvalidInput, 403: errors.Unauthorized, 404: errors.NotFound, 405: errors.MethodNotAllowed,
    409: errors.Conflict, 412: errors.PreconditionFailed, 503: errors.Unavailable,
}


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    etag: str = ""
    last_modified: str = ""


@dataclass(slots=True)
class Listing:
    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)


def _strip_ns(root: ET.Element) -> ET.Element:
    for el in root.iter():
        if "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]
    return root


def _error(resp: httpx.Response, body: bytes, resource: str) -> errors.DomainError:
    code, message = "", ""
    if body:
        try:
            root = _strip_ns(ET.fromstring(body))
            code, message = root.findtext("Code") or "", root.findtext("Message") or ""
        except ET.ParseError:
            pass
    cls = S3_CODES.get(code) or STATUS_FALLBACK.get(resp.status_code, errors.DomainError)
    return cls(f"{message or code or resp.status_code} ({resource})", code=code, status=resp.status_code)


class PieceFailed(Exception):
    """A DataNode could not serve a piece of a direct batch read (the gateway's path retries other replicas)."""


class MalformedReply(errors.DomainError):
    """A gateway's answer that doesn't decode into its type (common/messages.py): the error says what is wrong where."""


def _item_error(item: m.BatchItem | m.PutResult, bucket: str, key: str) -> errors.DomainError:
    return S3_CODES.get(item.err, errors.DomainError)(f"{item.msg} (/{bucket}/{key})", code=item.err)


def _batch_body(items: list[tuple[str, str, int | None, int | None]]) -> bytes:
    return orjson.dumps({"items": [{"bucket": b, "key": k, "start": s, "end": e} for b, k, s, e in items]})


class S3Client:
    def __init__(self, endpoint: str | None = None, access_key: str | None = None, secret_key: str | None = None,
                 *, region: str | None = None, max_connections: int = 32, timeout: float = 60.0,
                 multipart_threshold: int = 16 << 20, part_size: int = 8 << 20, direct_reads: bool = True,
                 direct_writes: bool = True, stale_reads: bool = False) -> None:
        """`stale_reads`: the dataset readers' namespace reads (manifest, batch reads and locates, the mount's reads
        by inode) may be answered by a standby NameNode (HA observer reads: at most NN_STALE_READ_MAX_S old; the
        S3 calls stay read-after-write consistent whatever this says). They still see every write answered before
        this client's first stale read, and its own writes: the first such read, and the first after a write, asks
        the active NameNode's log position first (`msync`)."""
        self.endpoint = (endpoint or os.environ.get("AWS_ENDPOINT_URL") or defaults.ENDPOINT).rstrip("/")
        self._guessed = not (endpoint or os.environ.get("AWS_ENDPOINT_URL"))  # (an error then says so)
        self.access_key = access_key or os.environ.get("AWS_ACCESS_KEY_ID", "")
        self.secret_key = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY", "")
        self.region = region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        self.multipart_threshold = multipart_threshold
        self.part_size = max(part_size, MIN_PART)
        self._host = httpx.URL(self.endpoint).netloc.decode()
        # httpx's transport (its connection pool) without its Client layer, whose redirects, cookie jar and auth
        # flows this client never uses: a small request costs 0.60-0.67 instead of 0.74-0.86 ms of the caller's CPU
        # (an fs_getattr loop under trio against a local cluster), the cookie jar's parse of every answer most of it
        self._http = httpx.AsyncHTTPTransport(http1=True, http2=False,
                                              limits=httpx.Limits(max_connections=max_connections,
                                                                  max_keepalive_connections=max_connections))
        # small requests (bytes in, the whole answer back) go through a leaner one (common/http1.py: less than half
        # the CPU per call); HTTPS, streamed bodies and streamed answers through httpx's
        url = httpx.URL(self.endpoint)
        self._lean = LeanTransport(url.host, url.port or 80, max_connections) if url.scheme == "http" else None
        self._timeout = timeout
        self._timeouts = {"timeout": httpx.Timeout(timeout).as_dict()}  # each request's extensions
        self._direct_after = 0.0 if direct_reads else float("inf")  # monotonic time from which to try direct reads
        self._datanodes: dict[str, DataNodeClient] = {}
        self._dn_down: dict[str, float] = {}  # DataNodes that could not be reached -> monotonic time to try again
        # writes: straight to the DataNodes with a write token (common/directwrite.py) from this monotonic time on
        self._direct_write_after = 0.0 if direct_writes else float("inf")
        self.direct = DirectWriter(self)
        self.direct_writes = 0  # objects written directly / through the gateway, for tests and benchmarks
        self.gateway_writes = 0
        self.stale_reads = stale_reads
        self.stale_pos = 0   # the log position its stale reads ask for (msync): they see the writes before it
        self._unsynced = stale_reads  # no msync yet, or a write answered since the last

    async def close(self) -> None:
        await self._http.aclose()
        if self._lean is not None:
            await self._lean.aclose()
        for dn in self._datanodes.values():
            await dn.close()

    @property
    def _stale(self) -> m.StaleOk | None:
        """The `stale` field of the mount's reads by inode (`_fs` makes the msync it needs first)."""
        return m.StaleOk(min_seq=self.stale_pos) if self.stale_reads else None

    async def _stale_q(self) -> list[tuple[str, str]]:
        """The query of the other dataset reads: a standby may answer, once it has this client's writes."""
        if not self.stale_reads:
            return []
        if self._unsynced:
            await self.msync()
        return [("stale", "1"), *([("min_seq", str(self.stale_pos))] if self.stale_pos else [])]

    async def msync(self) -> int:
        """The active NameNode's log position (HDFS's msync, GET /_epochfs/msync): from now on this client's stale
        reads are answered only by standbys that applied at least that far, so they see every write answered
        before this call (done by the first stale read after a write)."""
        self._unsynced = False  # (a write answered from now on is after it: the next stale read asks again)
        r = await self._fs_send("GET", "msync")
        self.stale_pos = max(self.stale_pos, orjson.loads(r.content)["seq"])
        return self.stale_pos

    async def __aenter__(self) -> "S3Client":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---------------------------------------------------------------- signing and transport
    def _sign(self, method: str, path: str, query: list[tuple[str, str]], headers: dict[str, str]) -> str:
        """Add the SigV4 headers; return the request URL (encoded exactly as signed)."""
        now = dt.datetime.now(dt.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        headers["host"] = self._host
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = sigv4.UNSIGNED
        canon_uri = sigv4.canonical_path(path)
        canon_query = sigv4.canonical_query(query)
        signed = sorted((k, v) for k, v in headers.items() if k in ("host", "content-md5") or k.startswith("x-amz-"))
        creq, signed_names = sigv4.canonical_request(method, canon_uri, canon_query, signed, sigv4.UNSIGNED)
        scope = sigv4.scope(amz_date[:8], self.region, "s3")
        sts = sigv4.string_to_sign(amz_date, scope, creq)
        sig = sigv4.sign(sigv4.signing_key(self.secret_key, amz_date[:8], self.region, "s3"), sts)
        headers["authorization"] = (f"{sigv4.ALGORITHM} Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed_names}, Signature={sig}")
        return self.endpoint + canon_uri + ("?" + canon_query if canon_query else "")

    @staticmethod
    def _path(bucket: str = "", key: str = "") -> str:
        return "/" + bucket + ("/" + key if key else "") if bucket else "/"

    async def _send(self, method: str, bucket: str = "", key: str = "", *, query=(), headers=None,
                    content: bytes | None = None, stream: bool = False, read: bool = False,
                    whole: bool = False) -> httpx.Response:
        """`read`: a POST that changes nothing (every PUT, POST and DELETE else counts as a write for msync).
        `whole`: an answer of any size is read whole (an object's bytes: the caller asked for them in one piece),
        not only a small one (common/http1.py MAX_ANSWER)."""
        headers = {k.lower(): v for k, v in (headers or {}).items()}
        q = [(k, str(v)) for k, v in query]
        url = self._sign(method, self._path(bucket, key), q, headers)
        req = httpx.Request(method, httpx.URL(url), headers=headers, content=content,
                            extensions={**self._timeouts, "max_answer": None} if whole else self._timeouts)
        lean = self._lean is not None and not stream and (content is None or isinstance(content, bytes))
        try:
            resp = await (self._lean if lean else self._http).handle_async_request(req)
        except httpx.ConnectError as e:
            if not self._guessed:
                raise
            raise httpx.ConnectError(f"{e} (no endpoint given and AWS_ENDPOINT_URL unset, so the default: start a "
                                     "cluster with `epochfs up`, or export the line it printed)", request=req) from None
        resp.request = req
        if not read and method not in ("GET", "HEAD"):
            self._unsynced = True
        if resp.status_code >= 300:
            body = await resp.aread()
            await resp.aclose()
            if method == "HEAD" and resp.status_code == 404:
                raise (errors.NoSuchKey if key else errors.NoSuchBucket)(f"/{bucket}/{key}")
            raise _error(resp, body, f"/{bucket}/{key}")
        if not stream:
            await resp.aread()
            await resp.aclose()
        return resp

    async def _xml(self, method: str, bucket: str = "", key: str = "", **kw) -> ET.Element:
        resp = await self._send(method, bucket, key, **kw)
        root = _strip_ns(ET.fromstring(resp.content))
        if root.tag == "Error":  # CompleteMultipartUpload and CopyObject can fail after a 200
            code = root.findtext("Code") or ""
            raise S3_CODES.get(code, errors.DomainError)(root.findtext("Message") or code, code=code)
        return root

    # ---------------------------------------------------------------- buckets
    async def list_buckets(self) -> list[str]:
        root = await self._xml("GET")
        return [b.findtext("Name") for b in root.iter("Bucket")]

    async def head_bucket(self, bucket: str) -> None:
        await self._send("HEAD", bucket)

    async def create_bucket(self, bucket: str) -> None:
        await self._send("PUT", bucket)

    async def versioning(self, bucket: str) -> str | None:
        """GetBucketVersioning: "Enabled", "Suspended" or None (never enabled)."""
        return (await self._xml("GET", bucket, query=[("versioning", "")])).findtext("Status")

    async def delete_bucket(self, bucket: str) -> None:
        await self._send("DELETE", bucket)

    # ---------------------------------------------------------------- listing
    async def list_pages(self, bucket: str, prefix: str = "", delimiter: str = "",
                         max_keys: int = 1000) -> AsyncIterator[Listing]:
        """ListObjectsV2, one Listing per page."""
        token = None
        while True:
            # keys URL-encoded, as botocore asks: a key may hold characters XML 1.0 can't carry (gateway/s3/xml.py)
            q = [("list-type", "2"), ("max-keys", str(max_keys)), ("encoding-type", "url")]
            if prefix:
                q.append(("prefix", prefix))
            if delimiter:
                q.append(("delimiter", delimiter))
            if token:
                q.append(("continuation-token", token))
            root = await self._xml("GET", bucket, query=q)
            page = Listing(
                [ObjectInfo(unquote(c.findtext("Key")), int(c.findtext("Size") or 0),
                            (c.findtext("ETag") or "").strip('"'), c.findtext("LastModified") or "")
                 for c in root.iter("Contents")],
                [unquote(p.findtext("Prefix")) for p in root.iter("CommonPrefixes")])
            yield page
            token = root.findtext("NextContinuationToken")
            if root.findtext("IsTruncated") != "true" or not token:
                return

    async def list(self, bucket: str, prefix: str = "", delimiter: str = "", limit: int | None = None) -> Listing:
        """All keys (and common prefixes) under prefix; at most `limit` entries of each kind if given."""
        out = Listing()
        async for page in self.list_pages(bucket, prefix, delimiter, min(limit or 1000, 1000)):
            out.objects += page.objects
            out.prefixes += page.prefixes
            if limit is not None and len(out.objects) + len(out.prefixes) >= limit:
                break
        return out

    # ---------------------------------------------------------------- objects
    async def head(self, bucket: str, key: str) -> ObjectInfo:
        r = await self._send("HEAD", bucket, key)
        return ObjectInfo(key, int(r.headers.get("content-length", 0)), r.headers.get("etag", "").strip('"'),
                          r.headers.get("last-modified", ""))

    async def get(self, bucket: str, key: str, start: int | None = None, end: int | None = None, *,
                  if_match: str | None = None) -> bytes:
        """The object's bytes [start, end) (end exclusive, like Python slices; non-negative offsets); with
        `if_match`, of that ETag only (PreconditionFailed if the key holds another version now)."""
        headers = {} if if_match is None else {"if-match": f'"{if_match.strip(chr(34))}"'}
        if start is not None or end is not None:
            start = start or 0
            if end is not None and end <= start:
                return b""
            headers["range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            return (await self._send("GET", bucket, key, headers=headers, whole=True)).content
        except errors.DomainError as e:
            if e.details.get("status") == 416:  # range starts past the end: like a slice, nothing
                return b""
            raise

    async def download(self, bucket: str, key: str, write: Callable[[bytes], object], *,
                       size: int | None = None) -> int:
        """Stream the object into write() (bytes-like pieces); return its size. `size`, what a listing said: from
        WHOLE_GET_MAX bytes the object is read straight from the DataNodes, DOWNLOAD_PIECE bytes at a time (all
        their blocks at once), pinned to the version located first (never a mix of two); else, and if it can't be
        located, as one GET through the gateway."""
        if size is not None and size >= WHOLE_GET_MAX and time.monotonic() >= self._direct_after:
            r = PinnedReader(self, bucket, key, "", size)
            if await r.locate():
                n = 0
                for start in range(0, r.size, DOWNLOAD_PIECE):
                    for b in await r.buffers(start, start + DOWNLOAD_PIECE):
                        write(b)
                        n += len(b)
                return n
        resp = await self._send("GET", bucket, key, stream=True)
        n = 0
        try:
            async for chunk in resp.aiter_bytes():
                write(chunk)
                n += len(chunk)
        finally:
            await resp.aclose()
        return n

    # ---------------------------------------------------------------- direct writes (common/directwrite.py)
    def _direct_ok(self) -> bool:
        return time.monotonic() >= self._direct_write_after

    def _direct_failed(self, e: Exception) -> None:
        """A direct write could not be done (nothing of it is visible): the gateway's path for DIRECT_RETRY_S."""
        if getattr(e, "lasting", True):
            log.info("direct writes unavailable (%s): through the gateway for %.0f s", e, DIRECT_RETRY_S)
            self._direct_write_after = time.monotonic() + DIRECT_RETRY_S

    async def put(self, bucket: str, key: str, data: bytes, *, if_none_match: str | None = None) -> str:
        """Store data (straight to the DataNodes from DIRECT_MIN_PUT bytes when they can be reached, else through
        the gateway; multipart above the threshold). Returns the ETag."""
        if DIRECT_MIN_PUT <= len(data) <= self.multipart_threshold and self._direct_ok():
            try:
                r, = await self.direct.put_objects(bucket, [(key, data)], if_none_match=if_none_match)
            except DirectUnavailable as e:
                self._direct_failed(e)
            else:
                if isinstance(r, errors.DomainError):
                    raise r
                self.direct_writes += 1
                return r
        self.gateway_writes += 1
        if len(data) <= self.multipart_threshold:
            headers = {"if-none-match": if_none_match} if if_none_match else {}
            r = await self._send("PUT", bucket, key, headers=headers, content=bytes(data))
            return r.headers.get("etag", "").strip('"')
        view = memoryview(data)
        parts = (view[i:i + self.part_size] for i in range(0, len(data), self.part_size))
        return await self.put_parts(bucket, key, parts, if_none_match=if_none_match)

    def writer(self, bucket: str, key: str, *, if_none_match: str | None = None) -> "ObjectWriter":
        """A stream written into one object (see ObjectWriter): straight to the DataNodes when they can be reached,
        else a multipart upload through the gateway; visible at `finish`, whole."""
        return ObjectWriter(self, bucket, key, if_none_match=if_none_match)

    async def put_parts(self, bucket: str, key: str, parts: Iterable[bytes], *,
                        if_none_match: str | None = None) -> str:
        """Store an object from its parts (any sizes) with an ObjectWriter: its ETag; nothing is visible unless all
        of it was stored."""
        w = self.writer(bucket, key, if_none_match=if_none_match)
        try:
            for p in parts:
                await w.write(p)
            return await w.finish()
        except BaseException:
            await w.abort()
            raise

    async def create_multipart(self, bucket: str, key: str) -> str:
        return (await self._xml("POST", bucket, key, query=[("uploads", "")])).findtext("UploadId")

    async def upload_part(self, bucket: str, key: str, upload_id: str, number: int, data: bytes) -> str:
        r = await self._send("PUT", bucket, key, query=[("partNumber", number), ("uploadId", upload_id)],
                             content=bytes(data))
        return r.headers["etag"]

    async def complete_multipart(self, bucket: str, key: str, upload_id: str, etags: list[str], *,
                                 if_none_match: str | None = None) -> str:
        body = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(e)}</ETag></Part>" for n, e in enumerate(etags, 1)
        ) + "</CompleteMultipartUpload>"
        headers = {"if-none-match": if_none_match} if if_none_match else {}
        root = await self._xml("POST", bucket, key, query=[("uploadId", upload_id)], headers=headers,
                               content=body.encode())
        return (root.findtext("ETag") or "").strip('"')

    async def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        try:
            await self._send("DELETE", bucket, key, query=[("uploadId", upload_id)])
        except (errors.DomainError, httpx.HTTPError):
            pass  # best effort: the NameNode garbage-collects abandoned uploads

    async def delete(self, bucket: str, key: str) -> None:
        await self._send("DELETE", bucket, key)

    async def delete_many(self, bucket: str, keys: list[str]) -> dict[str, errors.DomainError]:
        """DeleteObjects in batches of 1000; returns the keys that failed with their errors."""
        failed: dict[str, errors.DomainError] = {}
        alone = [k for k in keys if _NOT_XML.search(k)]  # no XML 1.0 document can name these: one DELETE each
        for k in alone:
            try:
                await self.delete(bucket, k)
            except errors.DomainError as e:
                failed[k] = e
        keys = [k for k in keys if not _NOT_XML.search(k)] if alone else keys
        for i in range(0, len(keys), 1000):
            body = ("<Delete><Quiet>true</Quiet>" + "".join(  # CR as a reference: a parser would read LF
                f"<Object><Key>{escape(k, _CR)}</Key></Object>" for k in keys[i:i + 1000]) + "</Delete>").encode()
            md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
            root = await self._xml("POST", bucket, query=[("delete", "")], headers={"content-md5": md5},
                                   content=body)
            for e in root.iter("Error"):
                code = e.findtext("Code") or ""
                failed[e.findtext("Key")] = S3_CODES.get(code, errors.DomainError)(e.findtext("Message") or code)
        return failed

    async def copy(self, src_bucket: str, src_key: str, dst_bucket: str, dst_key: str) -> str:
        """Server-side CopyObject; returns the new ETag."""
        source = sigv4.canonical_path(f"/{src_bucket}/{src_key}")
        root = await self._xml("PUT", dst_bucket, dst_key, headers={"x-amz-copy-source": source})
        return (root.findtext("ETag") or "").strip('"')

    # ---------------------------------------------------------------- the mount's API (gateway/s3/posix.py)
    async def _fs_send(self, method: str, key: str, **kw) -> httpx.Response:
        """A call to /_epochfs/<key>; a gateway that can't be reached (or answers too late) is Unavailable."""
        try:
            return await self._send(method, "_epochfs", key, **kw)
        except httpx.HTTPError as e:
            raise errors.Unavailable(f"gateway {self.endpoint}: {e!r}") from None

    async def _fs(self, bucket: str | None, req: m.Request):
        """One namespace operation by inode in `bucket` (None: on the root, the tree of buckets): its typed reply. A
        POSIX failure raises its domain error (frontends/errmap.py gives its errno)."""
        if getattr(req, "stale", None) is not None and self._unsynced:  # a stale read, the first or after a write
            await self.msync()
            req = msgspec.structs.replace(req, stale=self._stale)
        r = await self._fs_send("POST", f"fs/{bucket}" if bucket else "fs", content=msgspec.json.encode(req),
                                read=hasattr(req, "stale"))
        res = orjson.loads(r.content)
        if "err" in res:
            raise errors.by_name(res["err"])(res.get("msg", ""))
        return msgspec.convert(res["r"], type(req).Reply)

    # The namespace operations (namenode/posix.py). Attributes and pages come back as the JSON form of their
    # messages (InodeAttr, DirPage, FileLayout: dicts, entries [name, attr]), which the mount keeps and merges.
    async def fs_lookup(self, bucket: str | None, *, parent: int, name: str) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsLookup(parent=parent, name=name, stale=self._stale)))

    async def fs_getattr(self, bucket: str | None, *, ino: int) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsGetattr(ino=ino, stale=self._stale)))

    async def fs_readdir(self, bucket: str | None, *, ino: int, after: str = "", limit: int = 1000) -> dict:
        """{"entries": [[name, attr], ...], "next": the `after` of the next page or None}."""
        page = await self._fs(bucket, m.FsReaddir(ino=ino, after=after, limit=limit, stale=self._stale))
        return {"entries": m.to_builtins(page.entries), "next": page.next}

    async def fs_dirs(self, bucket: str, inos: list[int]) -> list[m.DirNames]:
        """The attributes and names (not their attributes) of up to 256 directories in one request."""
        return (await self._fs(bucket, m.FsDirs(inos=inos))).dirs

    async def fs_readlink(self, bucket: str | None, *, ino: int) -> str:
        return (await self._fs(bucket, m.FsReadlink(ino=ino, stale=self._stale))).target

    async def fs_layout(self, bucket: str | None, *, ino: int) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsLayout(ino=ino)))

    async def fs_mkdir(self, bucket: str | None, *, parent: int, name: str, mode: int, uid: int, gid: int) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsMkdir(parent=parent, name=name, mode=mode, uid=uid, gid=gid)))

    async def fs_mknod(self, bucket: str | None, *, parent: int, name: str, mode: int, uid: int, gid: int,
                       rdev: int = 0) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsMknod(parent=parent, name=name, mode=mode, uid=uid, gid=gid,
                                                              rdev=rdev)))

    async def fs_symlink(self, bucket: str | None, *, parent: int, name: str, target: str, uid: int,
                         gid: int) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsSymlink(parent=parent, name=name, target=target, uid=uid,
                                                                gid=gid)))

    async def fs_link(self, bucket: str | None, *, ino: int, parent: int, name: str) -> dict:
        return m.to_builtins(await self._fs(bucket, m.FsLink(ino=ino, parent=parent, name=name)))

    async def fs_unlink(self, bucket: str | None, *, parent: int, name: str) -> int:
        """The NameNode time of the unlink (0 if it doesn't say): the parent's new mtime and ctime."""
        return (await self._fs(bucket, m.FsUnlink(parent=parent, name=name))).t

    async def fs_rmdir(self, bucket: str | None, *, parent: int, name: str) -> None:
        await self._fs(bucket, m.FsRmdir(parent=parent, name=name))

    async def fs_rename(self, bucket: str | None, *, parent: int, name: str, newparent: int, newname: str,
                        flags: int = 0) -> None:
        await self._fs(bucket, m.FsRename(parent=parent, name=name, newparent=newparent, newname=newname,
                                          flags=flags))

    async def fs_setattr(self, bucket: str | None, *, ino: int, fields: dict) -> dict:
        """`fields`: any of mode, uid, gid, at, mt (ns) and size (0 only)."""
        return m.to_builtins(await self._fs(bucket, m.FsSetattr(ino=ino, fields=m.AttrChanges(**fields))))

    async def fs_getxattr(self, bucket: str | None, *, ino: int, name: str) -> str:
        return (await self._fs(bucket, m.FsGetxattr(ino=ino, name=name, stale=self._stale))).value

    async def fs_listxattr(self, bucket: str | None, *, ino: int) -> list[str]:
        return (await self._fs(bucket, m.FsListxattr(ino=ino, stale=self._stale))).names

    async def fs_setxattr(self, bucket: str | None, *, ino: int, name: str, value: str, flags: int = 0) -> None:
        await self._fs(bucket, m.FsSetxattr(ino=ino, name=name, value=value, flags=flags))

    async def fs_removexattr(self, bucket: str | None, *, ino: int, name: str) -> None:
        await self._fs(bucket, m.FsRemovexattr(ino=ino, name=name))

    async def fs_statfs(self) -> dict:
        """{"capacity", "used"} bytes of the live DataNodes and "files", the inodes ever made."""
        return m.to_builtins(await self._fs(None, m.FsStatfs()))

    async def fs_read(self, bucket: str, ino: int, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) of file `ino` (in `bucket`), short at its end."""
        r = await self._fs_send("GET", f"fs/{bucket}", query=[("ino", ino), ("off", offset), ("len", length),
                                                             *await self._stale_q()])
        return r.content

    async def fs_locate(self, bucket: str, ino: int, offset: int, length: int) -> m.FileLocated:
        """Where bytes [offset, offset + length) of file `ino` are: the file's version and size, the pieces to give
        read_pieces with the holders' addresses and the read token (gateway/s3/posix.py)."""
        r = await self._fs_send("GET", f"fs/{bucket}", query=[("ino", ino), ("off", offset), ("len", length),
                                                             ("locate", 1), *await self._stale_q()])
        return _reply(_decode_file_located, r.content, "locate")

    async def fs_write(self, bucket: str, ino: int, layout: m.FileWrite,
                       chunks: AsyncIterator[bytes] | bytes) -> dict:
        """New content of file `ino` (in `bucket`): `layout` says which blocks of version `layout.base` stay and
        which extents are new, `chunks` the new extents' bytes, streamed or (small ones) whole (gateway/s3/posix.py
        fs_write; a layout of one RestOfBody: all of the content, sent chunked as it comes); returns the
        file's new attributes, with its new layout, once the content is committed."""
        head = msgspec.json.encode(layout)
        prefix = len(head).to_bytes(4, "big") + head
        if isinstance(chunks, bytes):  # one body: the lean transport's request (common/http1.py)
            content, headers = prefix + chunks, {}
        else:
            async def body():
                yield prefix
                async for c in chunks:
                    yield c
            new = sum(seg.length for seg in layout.segs if type(seg) is m.NewExtent)
            streamed = any(type(seg) is m.RestOfBody for seg in layout.segs)  # of a length not yet known
            content, headers = body(), {} if streamed else {"content-length": str(len(prefix) + new)}
        r = await self._fs_send("PUT", f"fs/{bucket}", query=[("ino", ino)], headers=headers, content=content)
        return _fs_answer(r.content)

    async def fs_reserve_inodes(self, bucket: str, n: int) -> range:
        """Inode numbers for the files this client will create itself (fs_create_files)."""
        r = await self._fs(bucket, m.FsReserveInodes(n=n))
        return range(r.first, r.first + r.n)

    async def fs_create_files(self, bucket: str, files: list[tuple[m.NewFile, bytes]]) -> list[dict | errors.DomainError]:
        """Many new files with their content in one request (gateway/s3/posix.py fs_create_files), each with an
        inode number from fs_reserve_inodes: per file its attributes, or its own error (nothing of it made)."""
        head = msgspec.json.encode(m.NewFiles(items=[f for f, _ in files]))
        content = b"".join([len(head).to_bytes(4, "big"), head, *(data for _, data in files)])
        r = await self._fs_send("PUT", f"fs/{bucket}", query=[("files", 1)], content=content)
        res = orjson.loads(r.content)
        if "err" in res:
            raise errors.by_name(res["err"])(res.get("msg", ""))
        return [{**it["a"], "layout": it["layout"], "bs": it["bs"]} if "a" in it
                else errors.by_name(it["err"])(it.get("msg", "")) for it in res["r"]["items"]]

    async def fs_allocate(self, bucket: str, n: int) -> m.WriteGrant:
        """A write token for `n` new blocks of `bucket`, for a file's content stored on the DataNodes directly
        (common/directwrite.py DirectWriter.store) and committed with fs_write_direct."""
        r = await self._fs_send("PUT", f"fs/{bucket}", query=[("alloc", n)], content=b"")
        return _reply(_decode_grant, r.content, "allocate")

    async def fs_write_direct(self, bucket: str, ino: int, layout: m.FileWriteDirect) -> dict:
        """New content of file `ino`, all of it, as the blocks of `layout.receipts` (stored directly); the file's
        new attributes with its new layout once committed."""
        r = await self._fs_send("PUT", f"fs/{bucket}", query=[("ino", ino), ("direct", 1)],
                                content=msgspec.json.encode(layout))
        return _fs_answer(r.content)

    # ---------------------------------------------------------------- loaders (gateway/s3/batch.py)
    async def batch_get(self, items: list[tuple[str, str, int | None, int | None]]) -> list[bytes | errors.DomainError]:
        """Many objects or ranges (bucket, key, start, end; a Python slice, negatives from the end) in one request;
        each result is the bytes or the item's own error.

        The bytes come straight from the DataNodes with the gateway's read token when they can be reached (the
        gateway then only locates), else through the gateway's batch read: a DataNode that can't be reached, a bad
        replica or a refused token sends the batch through the gateway, which falls back over replicas and repairs."""
        body = _batch_body(items)
        if time.monotonic() >= self._direct_after:
            try:
                return await self._batch_direct(items, body)
            except errors.Unavailable:
                self._direct_after = time.monotonic() + DIRECT_RETRY_S
            except (errors.DomainError, PieceFailed):
                pass  # a refused token, a bad replica: the gateway's path sorts it out
        return await self._batch_proxy(items, body)

    # ---------------------------------------------------------------- batch ingest (gateway/s3/ingest.py)
    async def put_many(self, bucket: str, items: list[tuple[str, bytes]], *, content_types: list[str | None] = None,
                       if_none_match: str | None = None) -> list[str | errors.DomainError]:
        """Store many small objects (key, bytes) in one request (at most INGEST_MAX_ITEMS items, INGEST_MAX_BYTES
        bytes); each result is the object's ETag or its own error. Every item carries its CRC32C, which the gateway
        verifies and stores as its x-amz-checksum-crc32c (the body itself is sent unsigned, as every body here)."""
        if self._direct_ok():
            try:
                out = await self.direct.put_objects(bucket, items, if_none_match=if_none_match,
                                                    content_types=content_types)
                self.direct_writes += len(items)
                return out
            except DirectUnavailable as e:
                self._direct_failed(e)
        self.gateway_writes += len(items)
        index = []
        for j, (key, data) in enumerate(items):
            it = {"key": key, "size": len(data),
                  "checksum": {"crc32c": base64.b64encode(crc32c(data).to_bytes(4, "big")).decode()}}
            ct = content_types[j] if content_types else None
            if ct:
                it["ctype"] = ct
            if if_none_match:
                it["if_none_match"] = if_none_match
            index.append(it)
        head = orjson.dumps({"items": index})
        pieces = [len(head).to_bytes(4, "big"), head, *(d for _, d in items)]

        async def body():  # the pieces as they are: joining 8 MiB cost the CLI a sixth of its CPU
            for p in pieces:
                yield p
        r = await self._fs_send("POST", f"put/{bucket}", content=body(),
                                headers={"content-length": str(sum(len(p) for p in pieces))})
        out: list[str | errors.DomainError] = []
        for (key, _), res in zip(items, _reply(_decode_put_results, r.content, "batch put").items):
            out.append(_item_error(res, bucket, key) if res.err else res.etag.strip('"'))
        return out

    def _datanode(self, addr: str) -> DataNodeClient:
        """The client of a DataNode, for the event loop this client runs on (asyncio, or the mount's trio)."""
        dn = self._datanodes.get(addr)
        if dn is None:
            host, port = parse_addr(addr)
            kind = TrioRpcClient if sniffio.current_async_library() == "trio" else RpcClient
            dn = self._datanodes[addr] = DataNodeClient(
                kind(host, port, "", timeout=self._timeout or 60.0, connect_timeout=1.0),
                localread.LocalReader(addr) if localread.enabled() else None)
        return dn

    async def read_pieces(self, pieces: list[m.LocatedPiece], addrs: dict, grant: m.ReadGrant, *,
                          skip_down: bool = True) -> list[memoryview]:
        """Block pieces as a locate answer lists them, read straight from the DataNodes with its read token: one
        call per node for all the pieces it holds, the nodes in parallel. A piece a node can't serve (a bad or
        missing copy; the DataNode reports it for repair) or a node that can't be reached or does not answer in
        time (common/failover.py) is read from the block's next holder; a node that could not be reached is skipped
        for DIRECT_RETRY_S (tried all the same when not `skip_down`). Raises PieceFailed when no holder could serve
        a piece, Unavailable when none could be reached, and a node's refusal of the token as it is."""
        out: list = [None] * len(pieces)
        now = time.monotonic()
        down = {a for a, t in self._dn_down.items() if t > now} if skip_down else set()
        tried: list[set[str]] = [set(down) for _ in pieces]
        todo = list(range(len(pieces)))
        last: list[Exception] = []
        refused: list[errors.Unauthorized] = []
        while todo:
            by_node: dict[str, list[int]] = {}
            for i in todo:
                p = pieces[i]
                addr = pick_replica(p.id, p.nodes, addrs, tried[i])
                if addr is None:
                    if not last or all(isinstance(e, errors.Unavailable) for e in last):
                        raise errors.Unavailable(f"no holder of block {p.id} can be reached: "
                                                 f"{last[-1] if last else 'all down or unknown'}")
                    raise PieceFailed(f"no holder of block {p.id} could serve it: {last[-1]}")
                tried[i].add(addr)
                by_node.setdefault(addr, []).append(i)
            todo = []

            async def node_reads(addr: str, refs: list[int]) -> None:
                dn = self._datanode(addr)
                reads = [m.BlockRead(id=p.id, offset=p.offset, length=p.length) for p in (pieces[i] for i in refs)]
                # a node that does not answer in time while every piece has another holder: those are asked
                # (common/failover.py: a stopped DataNode); the last holder left gets the whole timeout
                others = all(pick_replica(pieces[i].id, pieces[i].nodes, addrs, tried[i]) for i in refs)
                deadline = read_deadline(sum(r.length for r in reads)) if others else None
                try:
                    got = await dn.read_local(reads, grant, timeout=deadline)  # a node on this machine: its files
                    if got is not None:
                        for i, piece in zip(refs, got):
                            out[i] = piece
                        return
                    head, payload = await dn.read_tokened(reads, grant, timeout=deadline)
                except errors.Unauthorized as e:  # the token: every holder refuses it alike
                    refused.append(e)
                    return
                except errors.DomainError as e:  # unreachable, or failing: its pieces go to other holders
                    if isinstance(e, errors.Unavailable):
                        self._dn_down[addr] = time.monotonic() + DIRECT_RETRY_S
                    last.append(e)
                    todo.extend(refs)
                    return
                view, pos = memoryview(payload), 0
                for i, n in zip(refs, head.lens):
                    if n < 0:
                        last.append(PieceFailed(f"{addr}: {head.errs}"))
                        todo.append(i)
                        continue
                    out[i] = view[pos:pos + n]
                    pos += n

            if len(by_node) == 1:
                await node_reads(*by_node.popitem())
            else:
                async with anyio.create_task_group() as tg:  # asyncio or trio (the mount)
                    for addr, refs in by_node.items():
                        tg.start_soon(node_reads, addr, refs)
            if refused:
                raise refused[0]
        return out

    async def locate(self, items: list[tuple[str, str, int | None, int | None]]) -> m.BatchLocated:
        """Where the bytes of batch items are, instead of the bytes (gateway/s3/batch.py batch_locate): each item's
        pieces for read_pieces (or its error), the holders' addresses and the read token."""
        return await self._locate(_batch_body(items))

    async def _locate(self, body: bytes) -> m.BatchLocated:
        r = await self._fs_send("POST", "locate", content=body, query=await self._stale_q(), read=True)
        return _reply(_decode_batch_located, r.content, "locate")

    async def _batch_direct(self, items: list, body: bytes) -> list[bytes | errors.DomainError]:
        plan = await self._locate(body)
        flat = [p for item in plan.items if item.pieces for p in item.pieces]
        got = iter(await self.read_pieces(flat, plan.addrs, plan.grant))
        out: list[bytes | errors.DomainError] = []
        for (b, k, _, _), item in zip(items, plan.items):
            if item.err is not None:
                out.append(_item_error(item, b, k))
            else:
                out.append(b"".join([next(got) for _ in item.pieces or ()]))
        # objects encrypted server-side are decrypted only by the gateway: those come through its batch read
        enc = [i for i, item in enumerate(plan.items) if item.err == "EncryptedObject"]
        if enc:
            for i, r in zip(enc, await self._batch_proxy([items[i] for i in enc],
                                                          _batch_body([items[i] for i in enc]))):
                out[i] = r
        return out

    async def _batch_proxy(self, items: list, body: bytes) -> list[bytes | errors.DomainError]:
        content = (await self._fs_send("POST", "batch", content=body, query=await self._stale_q(), read=True,
                                        whole=True)).content
        n = int.from_bytes(content[:4], "big")
        pos = 4 + n
        out: list[bytes | errors.DomainError] = []
        for (b, k, _, _), item in zip(items, _reply(_decode_batch_index, content[4:pos], "batch").items):
            if item.err is not None:
                out.append(_item_error(item, b, k))
                continue
            out.append(content[pos:pos + item.length])
            pos += item.length
        return out

    def pinned(self, bucket: str, key: str, etag: str, size: int) -> "PinnedReader":
        return PinnedReader(self, bucket, key, etag, size)

    async def manifest(self, bucket: str, prefix: str = "") -> AsyncIterator[list[list]]:
        """Every key under prefix as pages of [key, size, etag, mtime_ns], streamed in S3 order."""
        path = f"manifest/{bucket}" + (f"/{prefix}" if prefix else "")
        resp = await self._fs_send("GET", path, stream=True, query=await self._stale_q())
        try:
            buf = bytearray()
            async for chunk in resp.aiter_bytes():
                buf += chunk
                cut = buf.rfind(b"\n")
                if cut >= 0:
                    for line in bytes(buf[:cut]).split(b"\n"):
                        yield orjson.loads(line)
                    del buf[:cut + 1]
            if buf:
                yield orjson.loads(buf)
        finally:
            await resp.aclose()


class _Coalescer:
    """Requests made in one turn of the event loop go out together when that turn ends, or as soon as a group
    reaches `max_bytes` or `max_items`; groups (one per slot: what a request must share with its group) go out
    concurrently through `send(slot, items)`, which answers each item (a DomainError is that item's own error).
    For asyncio callers that start many small transfers at once (fsspec's put, pipe and get of many files)."""

    def __init__(self, send, *, max_bytes: int, max_items: int) -> None:
        self._send_group, self.max_bytes, self.max_items = send, max_bytes, max_items
        self._open: dict[object, list] = {}  # slot -> [items, bytes, keys]
        self._scheduled = False
        self._tasks: set[asyncio.Task] = set()

    async def add(self, slot, key, item, size: int):
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        group = self._open.get(slot)
        if group is not None and (key in group[2] or group[1] + size > self.max_bytes):
            self._send(slot)  # a key twice in one group goes in the next one (a batch PUT refuses it)
            group = None
        if group is None:
            group = self._open[slot] = [[], 0, set()]
        group[0].append((item, fut))
        group[1] += size
        group[2].add(key)
        if len(group[0]) >= self.max_items:
            self._send(slot)
        elif not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._send_all)
        return await fut

    def _send_all(self) -> None:
        self._scheduled = False
        for slot in list(self._open):
            self._send(slot)

    def _send(self, slot) -> None:
        items, _, _ = self._open.pop(slot)
        t = asyncio.ensure_future(self._go(slot, items))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _go(self, slot, items: list) -> None:
        try:
            res = await self._send_group(slot, [item for item, _ in items])
        except BaseException as e:  # the whole request failed: every item with it
            for _, fut in items:
                if not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else errors.Unavailable(repr(e)))
            if not isinstance(e, Exception):
                raise
            return
        for (_, fut), r in zip(items, res):
            if not fut.done():
                fut.set_exception(r) if isinstance(r, errors.DomainError) else fut.set_result(r)


class PutBatcher:
    """Coalesces small PUTs made at the same time into batch PUTs (S3Client.put_many): `await put(bucket, key,
    data)` returns the object's ETag or raises its own error (see _Coalescer)."""

    def __init__(self, client: S3Client, *, max_bytes: int = 8 << 20, max_items: int = INGEST_MAX_ITEMS) -> None:
        self.client = client
        self._c = _Coalescer(self._put_many, max_bytes=min(max_bytes, INGEST_MAX_BYTES - (1 << 20)),
                             max_items=max_items)

    async def put(self, bucket: str, key: str, data: bytes, *, if_none_match: str | None = None) -> str:
        return await self._c.add((bucket, if_none_match), key, (key, data), len(data))

    async def _put_many(self, slot, items: list) -> list:
        bucket, inm = slot
        return await self.client.put_many(bucket, items, if_none_match=inm)


class GetBatcher:
    """Coalesces reads of small whole objects made at the same time into batch reads (S3Client.batch_get: one
    locate and one call per DataNode): `await get(bucket, key, size)` returns the object's bytes or raises its own
    error; `size` (the listing's) only bounds a group's bytes (see _Coalescer)."""

    def __init__(self, client: S3Client, *, max_bytes: int = 8 << 20, max_items: int = 1000) -> None:
        self.client = client
        self._c = _Coalescer(self._get_many, max_bytes=max_bytes, max_items=max_items)

    async def get(self, bucket: str, key: str, size: int) -> bytes:
        return await self._c.add(None, (bucket, key), (bucket, key, None, None), size)

    async def _get_many(self, _slot, items: list) -> list:
        return await self.client.batch_get(items)


class ObjectWriter:
    """One object written as a stream (fsspec's open('wb'), a large file of `epochfs cp`, put_parts): `write` any
    sizes, `finish` makes the object visible, whole, and returns its ETag; `abort` leaves nothing.

    Straight to the DataNodes when they can be reached (common/directwrite.py DirectUpload: blocks stored as they
    fill, a few at once); if the first blocks can't be stored that way (unreachable nodes, a bucket only the gateway
    writes), what was written so far and the rest go through the gateway instead, as a multipart upload of
    part_size parts (or one PUT if it all fits below the client's multipart threshold). Memory: a few blocks, or
    one part, plus what a write brings (and, until the first direct blocks are stored, what was written)."""

    def __init__(self, client: S3Client, bucket: str, key: str, *, if_none_match: str | None = None) -> None:
        self.c, self.bucket, self.key, self.if_none_match = client, bucket, key, if_none_match
        self._up = client.direct.upload(bucket, key, if_none_match=if_none_match) if client._direct_ok() else None
        self._held: list | None = [] if self._up is not None else None  # written before a direct block was stored
        self._buf: list = []  # the gateway's path: bytes of the next part
        self._have = 0
        self.upload_id: str | None = None
        self.etags: list[str] = []

    @property
    def direct(self) -> bool:
        return self._up is not None

    async def write(self, data) -> None:
        if self._up is not None:
            if self._held is not None:
                self._held.append(data if isinstance(data, bytes) else bytes(data))
            try:
                await self._up.write(data)
            except DirectUnavailable as e:
                await self._to_gateway(e)
                return
            if self._up.stored:
                self._held = None
            return
        await self._gateway_write(data)

    async def _to_gateway(self, e: DirectUnavailable) -> None:
        """The direct write failed before storing anything: everything written so far goes through the gateway."""
        up, held, self._up, self._held = self._up, self._held, None, None
        await up.abort()
        if held is None:  # blocks were stored directly already: the write fails, nothing is visible
            raise e
        self.c._direct_failed(e)
        for d in held:
            await self._gateway_write(d)

    async def _gateway_write(self, data) -> None:
        self._buf.append(data if isinstance(data, bytes) else bytes(data))
        self._have += len(data)
        if self._have >= max(self.c.part_size, self.c.multipart_threshold if self.upload_id is None else 0):
            await self._send_part()

    async def _send_part(self, final: bool = False) -> None:
        """Upload the buffered bytes as part_size parts; a shorter rest stays buffered unless `final`."""
        data, ps = b"".join(self._buf), self.c.part_size
        end = len(data) if final else len(data) - len(data) % ps
        self._buf = [data[end:]] if end < len(data) else []
        self._have = len(data) - end
        if self.upload_id is None:
            self.upload_id = await self.c.create_multipart(self.bucket, self.key)
        for o in range(0, max(end, 1 if final and not self.etags else 0), ps):
            self.etags.append(await self.c.upload_part(self.bucket, self.key, self.upload_id, len(self.etags) + 1,
                                                       data[o:min(o + ps, end)]))

    async def finish(self) -> str:
        if self._up is not None:
            try:
                etag = await self._up.finish()
                self.c.direct_writes += 1
                return etag
            except DirectUnavailable as e:
                await self._to_gateway(e)
        self.c.gateway_writes += 1
        if self.upload_id is None:  # it all fits below the multipart threshold: one PUT
            data = b"".join(self._buf)
            self._buf, self._have = [], 0
            headers = {"if-none-match": self.if_none_match} if self.if_none_match else {}
            r = await self.c._send("PUT", self.bucket, self.key, headers=headers, content=data)
            return r.headers.get("etag", "").strip('"')
        if self._buf or not self.etags:
            await self._send_part(final=True)
        return await self.c.complete_multipart(self.bucket, self.key, self.upload_id, self.etags,
                                               if_none_match=self.if_none_match)

    async def abort(self) -> None:
        if self._up is not None:
            await self._up.abort()
        if self.upload_id is not None:
            await self.c.abort_multipart(self.bucket, self.key, self.upload_id)
        self._buf, self._held, self.upload_id = [], None, None


# the gateway's read plans, one decoder per reply type (msgspec decoders are plain functions: asyncio and trio alike)
_decode_grant = msgspec.json.Decoder(m.WriteGrant).decode
_decode_file_located = msgspec.json.Decoder(m.FileLocated).decode
_decode_batch_located = msgspec.json.Decoder(m.BatchLocated).decode
_decode_batch_index = msgspec.json.Decoder(m.BatchIndex).decode
_decode_put_results = msgspec.json.Decoder(m.PutResults).decode


def _fs_answer(body: bytes) -> dict:
    """A file write's answer (gateway/s3/posix.py): the file's new attributes, or its error raised."""
    res = orjson.loads(body)
    if "err" in res:
        raise errors.by_name(res["err"])(res.get("msg", ""))
    return res["r"]


def _reply(decode, body: bytes, what: str):
    """A gateway reply decoded into its type; a malformed one is an error that says where it is malformed."""
    try:
        return decode(body)
    except msgspec.DecodeError as e:  # ValidationError too
        raise MalformedReply(f"malformed {what} reply from the gateway: {e}") from None


@dataclass(frozen=True, slots=True)
class _PinnedPlan:
    """Where a pinned object's bytes are: its pieces, their offsets in it, the holders' addresses, the read token."""
    pieces: list[m.LocatedPiece]
    starts: list[int]
    addrs: dict
    grant: m.ReadGrant


class PinnedReader:
    """Ranges of one version of one object (ETag `etag`), as a file opened on it reads them: a change of the key
    after the first read doesn't show. The first read locates the whole object (its blocks and a read token, one
    request) and every read takes its bytes straight from the DataNodes, which keep a removed object's blocks for a
    grace period (NN_FREE_GRACE_S): a file opened before a DELETE or an overwrite reads the old bytes whole. Once
    the token expires (60 s) it is located again, which works while the key still holds that version. Where the
    DataNodes can't be reached, ranged GETs with If-Match: a changed object fails the read (after one more try of the
    DataNodes, which may have been down only briefly), never mixes versions."""

    def __init__(self, client: S3Client, bucket: str, key: str, etag: str, size: int) -> None:
        self.c, self.bucket, self.key, self.etag, self.size = client, bucket, key, etag.strip('"'), size
        self._plan: _PinnedPlan | None = None

    async def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) as bytes (a file's read() returns them as they are: never a view of a reply)."""
        got = await self.buffers(start, end)
        return bytes(got[0]) if len(got) == 1 else b"".join(got)

    async def buffers(self, start: int, end: int) -> list:
        """Bytes [start, end) as a list of buffers (as the DataNodes sent them: no join)."""
        end = min(end, self.size)
        if end <= start:
            return []
        c = self.c
        if self._plan is None and start == 0 and end >= self.size and self.size < WHOLE_GET_MAX:
            return [await self._get(start, end)]  # all of it in one read: one GET is as atomic, and one request
        if time.monotonic() >= c._direct_after:
            try:
                if self._plan is None or time.time() >= self._plan.grant.exp - 5:
                    self._plan = await self._locate()
                if (plan := self._plan) is not None:
                    return await c.read_pieces(pieces_within(plan.pieces, plan.starts, start, end), plan.addrs,
                                               plan.grant)
            except errors.Unavailable:
                c._direct_after = time.monotonic() + DIRECT_RETRY_S
            except (errors.DomainError, PieceFailed):
                self._plan = None  # a refused token, a bad replica: the gateway's path sorts it out
        plan = self._plan
        try:
            return [await self._get(start, end)]
        except errors.PreconditionFailed:
            # The key holds another version now, which the gateway's GET can't read past; the DataNodes still
            # hold this one's blocks (the grace period). Direct reads were set aside after a failure that may
            # have been brief (a node slow to answer on a loaded machine): try every holder once more before
            # failing the read.
            if plan is None or c._direct_after == float("inf") or time.time() >= plan.grant.exp - 5:
                raise
            try:
                return await c.read_pieces(pieces_within(plan.pieces, plan.starts, start, end), plan.addrs,
                                           plan.grant, skip_down=False)
            except (errors.DomainError, PieceFailed):
                pass
            raise

    async def locate(self) -> bool:
        """Locate the version the key holds now (or the one this reader was opened on) and take its size from its
        blocks; False if it can't be (the key changed or is gone: the gateway's answer says why)."""
        self._plan = await self._locate()
        if self._plan is None:
            return False
        p = self._plan
        self.size = p.starts[-1] + p.pieces[-1].length if p.pieces else 0
        return True

    async def _get(self, start: int, end: int) -> bytes:
        try:
            return await self.c.get(self.bucket, self.key, start, end, if_match=self.etag or None)
        except errors.PreconditionFailed:
            raise errors.PreconditionFailed(f"{self.bucket}/{self.key} changed since it was opened (it was ETag "
                                            f"{self.etag}); open it again to read the new version") from None

    async def _locate(self) -> _PinnedPlan | None:
        """The object's pieces, if the key still holds this version (else None: the If-Match GET says why)."""
        plan = await self.c.locate([(self.bucket, self.key, None, None)])
        item = plan.items[0]
        etag = (item.etag or "").strip('"')
        self.etag = self.etag or etag  # opened without knowing it (an info that had none): the first one found
        if item.err is not None or etag != self.etag:
            return None
        pieces = item.pieces or []
        return _PinnedPlan(pieces, piece_starts(pieces, 0), plan.addrs, plan.grant)
