"""Request bodies: plain or aws-chunked (signed chunks, unsigned with trailers), and the digests checked against them."""
from __future__ import annotations

import base64
import binascii
import hashlib
from typing import AsyncIterator

from epochfs.common import errors
from epochfs.common.checksums import ALGORITHMS, Hasher, new_hasher

from . import args
from .errors import S3Error, invalid_request
from .sigv4 import (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER, STREAMING_UNSIGNED_TRAILER, UNSIGNED, AuthResult,
                    ChunkSigner)


DECODED_LENGTH = "x-amz-decoded-content-length"


class ClientDisconnected(Exception):
    pass


async def raw_body(receive) -> AsyncIterator[bytes]:
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ClientDisconnected()
        body = msg.get("body", b"")
        if body:
            yield body
        if not msg.get("more_body", False):
            return


async def read_exactly(receive, n: int) -> memoryview:
    """A body of Content-Length `n` (already bounded by the caller) into one buffer, with one copy."""
    buf = bytearray(n)
    view, pos = memoryview(buf), 0
    async for piece in raw_body(receive):
        if pos + len(piece) > n:
            raise invalid_request("the body is longer than its Content-Length")
        view[pos:pos + len(piece)] = piece
        pos += len(piece)
    if pos != n:
        raise _incomplete()
    return view


async def read_all(receive, limit: int = 64 << 20) -> bytes:
    out = bytearray()
    async for piece in raw_body(receive):
        out += piece
        if len(out) > limit:
            raise invalid_request("request body too large")
    return bytes(out)


def _incomplete() -> S3Error:
    return S3Error("IncompleteBody", "You did not provide the number of bytes specified by the Content-Length "
                   "HTTP header.", 400)


class AwsChunkedDecoder:
    """Decodes `aws-chunked` bodies: `<hex-size>[;chunk-signature=<sig>]\\r\\n<data>\\r\\n` ... `0...\\r\\n`, then
    optional trailer lines `name:value\\r\\n` and a blank line. Checks the chunk signature chain when signed."""

    def __init__(self, source: AsyncIterator[bytes], signer: ChunkSigner | None) -> None:
        self.source = source
        self.signer = signer
        self.trailers: dict[str, str] = {}
        self._buf = bytearray()
        self._eof = False

    async def _piece(self):
        try:
            return await self.source.__anext__()
        except StopAsyncIteration:
            self._eof = True
            raise _incomplete() from None

    async def _more(self) -> None:
        self._buf += await self._piece()

    async def _line(self) -> bytes:
        while True:
            i = self._buf.find(b"\r\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[:i + 2]
                return line
            if len(self._buf) > 8192:
                raise errors.InvalidInput("aws-chunked: chunk header too long")
            await self._more()

    async def __aiter__(self):
        while True:
            header = await self._line()
            size_s, _, ext = header.partition(b";")
            try:
                size = int(size_s, 16)
            except ValueError:
                raise errors.InvalidInput("aws-chunked: bad chunk size") from None
            sig = None
            if ext.startswith(b"chunk-signature="):
                sig = ext[len(b"chunk-signature="):].decode()
            if self.signer is not None and sig is None:
                raise S3Error("SignatureDoesNotMatch", "aws-chunked: missing chunk signature", 403)
            sha = hashlib.sha256() if self.signer is not None else None
            left = size
            while left:  # the data: pieces of the body as they came (memoryviews), copied only where a piece
                # held a chunk header too (what followed the header, once per chunk): two copies less per byte
                if self._buf:
                    n = min(left, len(self._buf))
                    with memoryview(self._buf) as mv:
                        data = bytes(mv[:n])
                    del self._buf[:n]
                else:
                    data = memoryview(await self._piece())
                    if len(data) > left:
                        self._buf += data[left:]
                        data = data[:left]
                left -= len(data)
                if sha is not None:
                    sha.update(data)
                yield data
            if self.signer is not None:
                self.signer.check_chunk(sig, sha.hexdigest())
            if size == 0:
                break
            if await self._line() != b"":
                raise errors.InvalidInput("aws-chunked: chunk data not followed by CRLF")
        raw_trailer = bytearray()
        trailer_sig = None
        while True:
            try:
                line = await self._line()
            except (S3Error, errors.InvalidInput):
                break  # no trailer and no final CRLF: tolerated
            if line == b"":
                break
            name, _, value = line.decode().partition(":")
            name = name.strip().lower()
            if name == "x-amz-trailer-signature":
                trailer_sig = value.strip()
            else:
                raw_trailer += line + b"\n"
                self.trailers[name] = value.strip()
        if self.signer is not None and trailer_sig is not None:
            self.signer.check_trailer(trailer_sig, bytes(raw_trailer))


_CHECKSUM_BYTES = {"crc32": 4, "crc32c": 4, "crc64nvme": 8, "sha1": 20, "sha256": 32}


def _checksum_value(alg: str, value: str, where: str) -> str:
    """A checksum that can't be one (not base64, wrong length) is InvalidRequest in S3; BadDigest is for a mismatch."""
    try:
        ok = len(base64.b64decode(value, validate=True)) == _CHECKSUM_BYTES[alg]
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise invalid_request(f"Value for x-amz-checksum-{alg} {where} is invalid.")
    return value


class BodyCheck:
    """The digests a request asks us to verify (Content-MD5, x-amz-content-sha256, x-amz-checksum-*), computed while
    the body streams through `update`, and verified by `verify()` before anything is committed."""

    def __init__(self, headers: dict[str, str], auth: AuthResult | None, *, keep_alg: str | None = None) -> None:
        """keep_alg: an algorithm whose checksum is computed whatever the request names (a multipart upload's)."""
        self.headers = headers
        self.md5 = hashlib.md5()
        self.sha256 = None
        self.want_sha256 = None
        self.trailer_name = None
        payload_hash = auth.payload_hash if auth else headers.get("x-amz-content-sha256", UNSIGNED)
        if payload_hash and payload_hash not in (UNSIGNED, STREAMING_SIGNED, STREAMING_SIGNED_TRAILER,
                                                 STREAMING_UNSIGNED_TRAILER, "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD"):
            if len(payload_hash) != 64:
                raise errors.InvalidInput("x-amz-content-sha256 must be UNSIGNED-PAYLOAD, a STREAMING value "
                                          "or a SHA-256 hex digest")
            self.sha256 = hashlib.sha256()
            self.want_sha256 = payload_hash
        self.want_md5 = None
        if "content-md5" in headers:
            try:
                self.want_md5 = base64.b64decode(headers["content-md5"], validate=True)
            except (binascii.Error, ValueError):
                raise S3Error("InvalidDigest", "The Content-MD5 you specified was invalid.", 400) from None
            if len(self.want_md5) != 16:
                raise S3Error("InvalidDigest", "The Content-MD5 you specified was invalid.", 400)
        self.alg: str | None = None
        self.want_cs: str | None = None
        for alg in ALGORITHMS:
            v = headers.get(f"x-amz-checksum-{alg}")
            if v is not None:
                if self.alg is not None:
                    raise invalid_request("Expecting a single x-amz-checksum- header. Multiple checksum Types are "
                                          "not allowed.")
                self.alg, self.want_cs = alg, _checksum_value(alg, v, "header")
        trailer = headers.get("x-amz-trailer", "").strip().lower()
        if trailer:
            if not trailer.startswith("x-amz-checksum-") or trailer[15:] not in ALGORITHMS:
                raise invalid_request(f"unsupported trailer {trailer}")
            self.alg, self.trailer_name = trailer[15:], trailer
        sdk_alg = headers.get("x-amz-sdk-checksum-algorithm", "").lower()
        if self.alg is None and sdk_alg:
            if sdk_alg not in ALGORITHMS:
                raise invalid_request(f"Checksum algorithm {sdk_alg} is not supported")
            self.alg = sdk_alg
        if self.alg is None and keep_alg:
            self.alg = keep_alg
        self.cs: Hasher | None = new_hasher(self.alg) if self.alg else None
        self.kept: Hasher | None = new_hasher(keep_alg) if keep_alg and keep_alg != self.alg else None
        self.keep_alg = keep_alg

    def update(self, data) -> None:
        self.md5.update(data)
        if self.sha256 is not None:
            self.sha256.update(data)
        if self.cs is not None:
            self.cs.update(data)
        if self.kept is not None:
            self.kept.update(data)

    def verify(self, trailers: dict[str, str] | None = None) -> None:
        md5 = self.md5.digest()
        if self.want_md5 is not None and md5 != self.want_md5:
            raise errors.ChecksumMismatch("The Content-MD5 you specified did not match what we received.")
        if self.sha256 is not None and self.sha256.hexdigest() != self.want_sha256:
            raise S3Error("XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match "
                          "what was computed.", 400)
        if self.trailer_name is not None:
            self.want_cs = (trailers or {}).get(self.trailer_name)
            if self.want_cs is None:
                raise invalid_request(f"The trailer {self.trailer_name} was declared but not sent")
            _checksum_value(self.alg, self.want_cs, "trailing header")
        if self.cs is not None and self.want_cs is not None and self.cs.b64() != self.want_cs:
            raise errors.ChecksumMismatch(f"The {self.alg.upper()} you specified did not match the calculated "
                                          "checksum.")

    @property
    def etag(self) -> str:
        return f'"{self.md5.hexdigest()}"'

    def checksums(self) -> dict:
        out = {self.alg: self.cs.b64()} if self.cs is not None else {}
        if self.kept is not None:
            out[self.keep_alg] = self.kept.b64()
        return out


def body_stream(receive, headers: dict[str, str], auth: AuthResult | None) -> tuple[AsyncIterator[bytes], object]:
    """The request's payload as a stream of bytes, and the decoder (for trailers) if the body is aws-chunked."""
    args.int_arg(headers.get(DECODED_LENGTH), DECODED_LENGTH, 0, hi=args.MAX_INT)  # checked before any is stored
    src = raw_body(receive)
    payload_hash = auth.payload_hash if auth else ""
    # aws-chunked by the signature's payload hash, or (anonymous) by Content-Encoding with the decoded length: a
    # Content-Encoding of aws-chunked alone is just a stored header (S3 drops the token and keeps the rest)
    chunked = payload_hash.startswith("STREAMING-") or (
        "aws-chunked" in headers.get("content-encoding", "") and DECODED_LENGTH in headers)
    if not chunked:
        return _counted(src, headers), None
    signer = ChunkSigner(auth) if auth and payload_hash in (STREAMING_SIGNED, STREAMING_SIGNED_TRAILER) else None
    dec = AwsChunkedDecoder(src, signer)
    return _decoded(dec, headers), dec


async def _counted(src: AsyncIterator[bytes], headers: dict[str, str]) -> AsyncIterator[bytes]:
    want = headers.get("content-length")
    n = 0
    async for piece in src:
        n += len(piece)
        yield piece
    if want is not None and n < int(want):
        raise _incomplete()


async def _decoded(dec: AwsChunkedDecoder, headers: dict[str, str]) -> AsyncIterator[bytes]:
    want = headers.get(DECODED_LENGTH)
    n = 0
    async for piece in dec:
        n += len(piece)
        yield piece
    if want is not None and n != int(want):
        raise _incomplete()
