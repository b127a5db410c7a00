"""Server-side encryption as S3 asks for it: SSE-S3 (AES256), SSE-KMS (aws:kms and a key id), SSE-C (the customer's
key in every request), and a bucket's default encryption (Put/Get/DeleteBucketEncryption).

The cryptography is in gateway/crypto.py; this module reads the request headers, chooses and checks keys, and writes
the response headers. What is stored (messages.SseInfo, in the object's record or the multipart upload's) is the data
key wrapped under the master key, a KMS key or the customer's key, never a key in the clear.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
from pathlib import Path

from epochfs.common.messages import BucketEncryption, SseInfo
from epochfs.common.worker import PassStats, Worker

from .. import crypto
from . import xml
from .body import read_all
from .bucket import bucket_owned
from .errors import S3Error, access_denied, invalid_request, malformed_xml
from .http import Response

SSE = "x-amz-server-side-encryption"
KMS_KEY = "x-amz-server-side-encryption-aws-kms-key-id"
BUCKET_KEY = "x-amz-server-side-encryption-bucket-key-enabled"
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"
DEFAULT_KMS_KEY = "aws/s3"  # the key aws:kms uses when none is named (S3's AWS-managed key)
MAX_KMS_KEY_ID = 2048
_PURPOSE = {"AES256": b"epochfs-sse-s3", "aws:kms": b"epochfs-sse-kms", "SSE-C": b"epochfs-sse-c"}


class KeyStore:
    """The gateway's keys: the cluster master key (a file under the gateway's data, or a setting; never sent to the
    NameNode or a DataNode) and the KMS key ids: those operators configured (GW_SSE_KMS_KEYS) and those created at
    run time through the admin API (kept by the NameNode, which stores the id only; every gateway loads them at
    start and every GW_KMS_REFRESH_S, the creating gateway at once). A KMS key's material is derived from the master
    key and its id, so every gateway with the same master key resolves the same ids."""

    def __init__(self, settings) -> None:
        self.master: bytes | None = None
        if settings.sse_master_key_file:
            self.master = _read_key(Path(settings.sse_master_key_file).read_bytes().strip())
        elif settings.sse_master_key:
            self.master = _read_key(settings.sse_master_key.encode())
        self.kms_ids = {k.strip() for k in settings.sse_kms_keys.split(",") if k.strip()} | {DEFAULT_KMS_KEY}
        self.created_ids: set[str] = set()  # made through the admin API (the NameNode's list)
        self._derived: dict[str, bytes] = {}

    def known(self, kms_key: str) -> bool:
        return kms_key in self.kms_ids or kms_key in self.created_ids

    def _master(self) -> bytes:
        if self.master is None:
            raise S3Error("NotImplemented", "Server-side encryption with S3 or KMS keys is not configured on this "
                          "gateway (GW_SSE_MASTER_KEY_FILE)", 501)
        return self.master

    def kek(self, alg: str, kms_key: str | None) -> bytes:
        """The key that wraps data keys of `alg` (AES256: the master key; aws:kms: the KMS key's)."""
        master = self._master()
        if alg == "AES256":
            return master
        if not self.known(kms_key):
            raise S3Error("KMS.NotFoundException", f"Invalid keyId {kms_key}", 400)
        k = self._derived.get(kms_key)
        if k is None:
            k = self._derived[kms_key] = crypto.derive(master, "kms:" + kms_key)
        return k


class KmsKeyRefresher(Worker):
    """Loads the KMS key ids created through the admin API (any gateway's) from the NameNode, every interval."""

    def __init__(self, keys: KeyStore, namenode, interval_s: float) -> None:
        self.keys, self.namenode, self.interval_s = keys, namenode, interval_s

    async def run_once(self) -> PassStats:
        self.keys.created_ids = {k.key_id for k in await self.namenode.kms_key_list()}
        return PassStats()  # nothing to hurry: the next pass after the interval


def _read_key(text: bytes) -> bytes:
    key = base64.b64decode(text, validate=True)
    if len(key) != crypto.KEY_BYTES:
        raise ValueError(f"the SSE master key must be {crypto.KEY_BYTES} bytes, base64-encoded")
    return key


@dataclasses.dataclass(frozen=True)
class Sealed:
    """The encryption of an object being written: what to store, its data key and cipher."""
    info: SseInfo
    data_key: bytes
    cipher: crypto.BlockCipher

    def etag(self, md5_etag: str) -> str:
        """The ETag S3 gives it: SSE-S3 keeps the MD5; SSE-C and SSE-KMS ETags are not the MD5 of the data."""
        if self.info.alg == "AES256":
            return md5_etag
        return f'"{crypto.etag_of(md5_etag.strip(chr(34)), self.data_key)}"'


def customer_key(headers, prefix: str = CUSTOMER) -> tuple[bytes, str] | None:
    """The SSE-C key of a request (or of its copy source) and its MD5 (base64), checked as S3 checks them."""
    alg, key, md5 = (headers.get(prefix + "algorithm"), headers.get(prefix + "key"),
                     headers.get(prefix + "key-md5"))
    if alg is None and key is None and md5 is None:
        return None
    if alg is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide a valid encryption algorithm.", 400, ArgumentName=prefix + "algorithm")
    if alg != "AES256":
        raise S3Error("InvalidEncryptionAlgorithmError", "The encryption request you specified is not valid. The "
                      "valid value is AES256.", 400, ArgumentName=prefix + "algorithm", ArgumentValue=alg[:64])
    if key is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide an appropriate secret key.", 400, ArgumentName=prefix + "key")
    try:
        raw = base64.b64decode(key.encode(), validate=True) if len(key) <= 64 else b""
    except ValueError:
        raw = b""
    if len(raw) != crypto.KEY_BYTES:
        raise S3Error("InvalidArgument", "The secret key was invalid for the specified algorithm.", 400,
                      ArgumentName=prefix + "key")
    if md5 is None:
        raise S3Error("InvalidArgument", "Requests specifying Server Side Encryption with Customer provided keys "
                      "must provide the client calculated MD5 of the secret key.", 400,
                      ArgumentName=prefix + "key-MD5")
    if md5 != base64.b64encode(hashlib.md5(raw).digest()).decode():
        raise S3Error("InvalidArgument", "The calculated MD5 hash of the key did not match the hash that was "
                      "provided.", 400, ArgumentName=prefix + "key-MD5")
    return raw, md5


def requested(headers) -> tuple[str, str | None] | None:
    """(algorithm, KMS key id) of x-amz-server-side-encryption, or None; bad combinations refused."""
    alg, kid = headers.get(SSE), headers.get(KMS_KEY)
    if alg is None:
        if kid is not None:
            raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key requires HTTP header "
                          "x-amz-server-side-encryption : aws:kms", 400, ArgumentName=SSE)
        return None
    if alg not in ("AES256", "aws:kms"):
        raise S3Error("InvalidArgument", "The encryption method specified is not supported", 400,
                      ArgumentName=SSE, ArgumentValue=alg[:64])
    if alg == "AES256" and kid is not None:
        raise S3Error("InvalidArgument", "Server Side Encryption with AWS KMS managed key requires HTTP header "
                      "x-amz-server-side-encryption : aws:kms", 400, ArgumentName=SSE)
    if kid is not None and not 0 < len(kid) <= MAX_KMS_KEY_ID:
        raise S3Error("InvalidArgument", "Invalid KMS key id", 400, ArgumentName=KMS_KEY)
    return alg, (kid or DEFAULT_KMS_KEY) if alg == "aws:kms" else None


def for_write(ctx, headers, default: BucketEncryption | None) -> tuple[Sealed | None, bool]:
    """How a new object (or upload) is encrypted: by its request's SSE headers, else the bucket's default; and
    whether the request asked for it explicitly. Every header is checked before anything is written."""
    ck = customer_key(headers)
    asked = requested(headers)
    if ck is not None and asked is not None:
        raise S3Error("InvalidArgument", "Server Side Encryption with Customer provided key is incompatible with "
                      "the encryption method specified", 400, ArgumentName=SSE)
    bucket_key = headers.get(BUCKET_KEY, "").lower() == "true"
    dk = crypto.new_data_key()
    if ck is not None:
        key, md5 = ck
        salt, mac = crypto.key_check(key)
        info = SseInfo(alg="SSE-C", dk=crypto.wrap(key, dk, _PURPOSE["SSE-C"]), key_md5=md5, salt=salt, mac=mac)
        return Sealed(info, dk, crypto.BlockCipher(dk)), True
    if asked is None:
        if default is None:
            return None, False
        asked = (default.alg, (default.kms_key or DEFAULT_KMS_KEY) if default.alg == "aws:kms" else None)
        bucket_key = bucket_key or default.bucket_key
    alg, kid = asked
    kek = ctx.sse_keys.kek(alg, kid)
    info = SseInfo(alg=alg, dk=crypto.wrap(kek, dk, _PURPOSE[alg] + (kid or "").encode()), kms_key=kid,
                   bucket_key=bucket_key)
    return Sealed(info, dk, crypto.BlockCipher(dk)), headers.get(SSE) is not None


def data_key(ctx, headers, sse: SseInfo | None, prefix: str = CUSTOMER, upload: bool = False) -> bytes | None:
    """The data key of an object (or upload) for a request that reads it (or adds a part to it): SSE-C needs the
    customer's key in the request (`prefix`: the copy source's headers for a copy), checked against the stored HMAC
    (403 AccessDenied if it is another key); SSE-S3 and SSE-KMS need none, and refuse encryption headers on a read.
    `upload`: the request adds to a multipart upload (UploadPart, UploadPartCopy, Complete), where S3 answers a
    missing or other key with 400 InvalidRequest rather than a read's 403."""
    ck = customer_key(headers, prefix)
    if sse is None:
        if ck is not None:
            raise invalid_request("The encryption parameters are not applicable to this object.")
        return None
    if sse.alg == "SSE-C":
        if ck is None:
            if upload:
                raise invalid_request("The multipart upload initiate requested encryption. Subsequent part "
                                      "requests must include the appropriate encryption parameters.")
            raise invalid_request("The object was stored using a form of Server Side Encryption. The correct "
                                  "parameters must be provided to retrieve the object.")
        key, _ = ck
        if not crypto.key_matches(key, sse.salt or "", sse.mac or ""):
            if upload:
                raise invalid_request("The provided encryption parameters did not match the ones used originally.")
            raise access_denied("The provided customer key does not match the key the object was encrypted with")
        try:
            return crypto.unwrap(key, sse.dk, _PURPOSE["SSE-C"])
        except crypto.KeyUnwrapError:
            raise access_denied() from None
    if ck is not None:
        raise invalid_request("The encryption parameters are not applicable to this object.")
    try:
        return crypto.unwrap(ctx.sse_keys.kek(sse.alg, sse.kms_key), sse.dk,
                             _PURPOSE[sse.alg] + (sse.kms_key or "").encode())
    except crypto.KeyUnwrapError:
        raise S3Error("InternalError", "The object's data key does not open with this gateway's master key", 500) \
            from None


def read_cipher(ctx, req, sse: SseInfo | None) -> crypto.BlockCipher | None:
    """The cipher to decrypt an object with for GET or HEAD (which may not carry x-amz-server-side-encryption)."""
    if req.headers.get(SSE) is not None or req.headers.get(KMS_KEY) is not None:
        raise S3Error("InvalidArgument", "x-amz-server-side-encryption header is not supported for this "
                      "operation.", 400, ArgumentName=SSE)
    dk = data_key(ctx, req.headers, sse)
    return None if dk is None else crypto.BlockCipher(dk)


def headers(sse: SseInfo | None) -> list[tuple[str, str]]:
    """The response headers that say how an object is encrypted, as S3 sends them on PUT, GET, HEAD, copy and
    multipart requests."""
    if sse is None:
        return []
    if sse.alg == "SSE-C":
        return [(CUSTOMER + "algorithm", "AES256"), (CUSTOMER + "key-MD5", sse.key_md5 or "")]
    h = [(SSE, sse.alg)]
    if sse.alg == "aws:kms":
        h.append((KMS_KEY, sse.kms_key or DEFAULT_KMS_KEY))
    if sse.bucket_key:
        h.append((BUCKET_KEY, "true"))
    return h


# ---------------------------------------------------------------------------------------------------------------------
# Put/Get/DeleteBucketEncryption
# ---------------------------------------------------------------------------------------------------------------------

def parse_encryption(body: bytes) -> BucketEncryption:
    root = xml.parse(body)
    if root.tag != "ServerSideEncryptionConfiguration":
        raise malformed_xml()
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise malformed_xml()
    d = rules[0].find("ApplyServerSideEncryptionByDefault")
    if d is None:
        raise malformed_xml()
    alg = (d.findtext("SSEAlgorithm") or "").strip()
    kid = d.findtext("KMSMasterKeyID")
    if alg not in ("AES256", "aws:kms"):
        raise malformed_xml()
    if kid is not None and (alg != "aws:kms" or not 0 < len(kid.strip()) <= MAX_KMS_KEY_ID):
        raise S3Error("InvalidArgument", "a KMSMasterKeyID goes only with aws:kms", 400)
    bk = (rules[0].findtext("BucketKeyEnabled") or "false").strip().lower()
    if bk not in ("true", "false"):
        raise malformed_xml()
    return BucketEncryption(alg=alg, kms_key=kid.strip() if kid else None, bucket_key=bk == "true")


def encryption_xml(enc: BucketEncryption) -> bytes:
    kid = f"<KMSMasterKeyID>{xml.esc(enc.kms_key)}</KMSMasterKeyID>" if enc.kms_key else ""
    return xml.doc("ServerSideEncryptionConfiguration",
                   f"<Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>{enc.alg}</SSEAlgorithm>{kid}"
                   f"</ApplyServerSideEncryptionByDefault>"
                   f"<BucketKeyEnabled>{str(enc.bucket_key).lower()}</BucketKeyEnabled></Rule>")


async def put_encryption(ctx, req):
    await bucket_owned(ctx, req)
    enc = parse_encryption(await read_all(req.receive, 64 << 10))
    ctx.sse_keys.kek(enc.alg, (enc.kms_key or DEFAULT_KMS_KEY) if enc.alg == "aws:kms" else None)  # known, usable
    await ctx.cluster.namenode.bucket_settings(req.bucket, encryption=enc)
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def get_encryption(ctx, req):
    info = await bucket_owned(ctx, req)
    if info.encryption is None:
        raise S3Error("ServerSideEncryptionConfigurationNotFoundError", "The server side encryption configuration "
                      "was not found", 404, BucketName=req.bucket)
    return Response(200, [("content-type", "application/xml")], encryption_xml(info.encryption))


async def delete_encryption(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, no_encryption=True)
    ctx.forget_bucket(req.bucket)
    return Response(204)
