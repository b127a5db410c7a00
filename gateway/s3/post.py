"""Browser-form uploads: POST /<bucket> with a multipart/form-data body (what boto3's generate_presigned_post makes).

The form's fields come first, then the file. The fields say the key (`${filename}` stands for the file's name), the
object's headers, metadata and ACL, and carry a policy (base64 JSON: an expiration and conditions every other field
must meet) signed with SigV4 (x-amz-algorithm, -credential, -date, -signature) or SigV2 (AWSAccessKeyId, signature).
Without a policy the upload is anonymous and needs a bucket ACL that lets anyone write. All is checked before any
byte of the file is stored; the file streams into blocks as it arrives, and the object appears whole or not at all.

The body is parsed with python-multipart's push parser, fed from the ASGI receive channel.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import hashlib
import hmac
import re
from collections import deque
from urllib.parse import quote

import msgspec
import orjson
from python_multipart.multipart import MultipartParser, parse_options_header

from epochfs.common import errors, tagging
from epochfs.common.sigv4 import UNSIGNED, signing_key

from . import args, objectlock, sse, xml
from .access import bucket_access
from .body import BodyCheck
from .errors import S3Error, access_denied
from .http import Response
from .objects import check_key, object_attrs, written_version_headers
from .sigv4 import AuthResult
from .tagging import body_tags

_ISO8601 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
MAX_PART_HEADER = 8 << 10             # one header line of a part
MAX_FIELDS_BYTES = 1 << 20            # all fields together (AWS allows 20 KB of policy; metadata stays within 2 KiB)
NOT_IN_POLICY = {"policy", "x-amz-signature", "signature", "awsaccesskeyid", "file"}  # fields a policy needn't name


def _policy_error(why: str) -> S3Error:
    return access_denied(f"Invalid according to Policy: {why}")


class _Form:
    """The parts of a multipart/form-data body, pulled one event at a time: ("part", name, filename, headers),
    ("data", bytes) and ("end",) per part, then ("eof",)."""

    def __init__(self, receive, boundary: bytes) -> None:
        self.receive, self.events, self.done = receive, deque(), False
        self._hname = self._hvalue = b""
        self._headers: dict[str, str] = {}
        self.parser = MultipartParser(boundary, {
            "on_part_begin": self._begin, "on_header_field": self._field, "on_header_value": self._value,
            "on_header_end": self._header_end, "on_headers_finished": self._headers_done,
            "on_part_data": lambda d, s, e: self.events.append(("data", bytes(d[s:e]))),
            "on_part_end": lambda: self.events.append(("end",)), "on_end": lambda: self.events.append(("eof",))})

    def _begin(self) -> None:
        self._headers = {}

    def _field(self, d, s, e) -> None:
        self._hname += d[s:e]
        self._bounded()

    def _value(self, d, s, e) -> None:
        self._hvalue += d[s:e]
        self._bounded()

    def _bounded(self) -> None:
        if len(self._hname) + len(self._hvalue) > MAX_PART_HEADER:
            raise S3Error("MalformedPOSTRequest", "A part header of your POST request is too large.", 400)

    def _header_end(self) -> None:
        self._headers[self._hname.decode("latin-1").lower()] = self._hvalue.decode("utf-8", "replace")
        self._hname = self._hvalue = b""

    def _headers_done(self) -> None:
        _, opts = parse_options_header(self._headers.get("content-disposition", ""))
        name = opts.get(b"name")
        if name is None:
            raise S3Error("MalformedPOSTRequest", "The body of your POST request is not well-formed "
                          "multipart/form-data.", 400)
        filename = opts.get(b"filename")
        self.events.append(("part", name.decode("utf-8", "replace"),
                            None if filename is None else filename.decode("utf-8", "replace"), self._headers))

    async def next(self) -> tuple:
        while not self.events:
            if self.done:
                raise S3Error("IncompleteBody", "The request body terminated unexpectedly", 400)
            msg = await self.receive()
            body = msg.get("body", b"")
            try:
                if body:
                    self.parser.write(body)
                if not msg.get("more_body", False):
                    self.done = True
                    self.parser.finalize()
            except (S3Error, errors.DomainError):
                raise
            except Exception:  # python-multipart's parse errors
                raise S3Error("MalformedPOSTRequest", "The body of your POST request is not well-formed "
                              "multipart/form-data.", 400) from None
        return self.events.popleft()

    async def value(self) -> bytes:
        out = []
        size = 0
        while (ev := await self.next())[0] == "data":
            size += len(ev[1])
            if size > MAX_FIELDS_BYTES:
                raise S3Error("MaxPostPreDataLengthExceeded", "Your POST request fields preceding the upload file "
                              "were too large.", 400)
            out.append(ev[1])
        return b"".join(out)

    async def file(self):
        while (ev := await self.next())[0] == "data":
            yield ev[1]


async def _fields(form: _Form) -> tuple[dict[str, str], str, dict]:
    """The fields before the file (names lowercased), and the file part's name and headers."""
    fields: dict[str, str] = {}
    total = 0
    while True:
        ev = await form.next()
        if ev[0] == "eof":
            raise errors.InvalidInput("POST requires exactly one file upload per request.", argument="file",
                                      value="0")
        _, name, filename, headers = ev
        if name.lower() == "file":
            return fields, filename or "", headers
        value = await form.value()
        total += len(value)
        if total > MAX_FIELDS_BYTES:
            raise S3Error("MaxPostPreDataLengthExceeded", "Your POST request fields preceding the upload file were "
                          "too large.", 400)
        fields[name.lower()] = value.decode("utf-8", "replace")


def _verify(ctx, fields: dict[str, str]) -> AuthResult:
    """The user who signed the form's policy; S3Error if the signature is wrong or missing."""
    policy = fields["policy"]
    if "x-amz-signature" in fields:
        if fields.get("x-amz-algorithm") != "AWS4-HMAC-SHA256":
            raise errors.InvalidInput("Only AWS4-HMAC-SHA256 is supported for POST policy signatures.",
                                      argument="x-amz-algorithm", value=fields.get("x-amz-algorithm", ""))
        parts = fields.get("x-amz-credential", "").split("/")
        if len(parts) != 5 or parts[3:] != ["s3", "aws4_request"]:
            raise errors.InvalidInput("The credential is malformed.", argument="x-amz-credential",
                                      value=fields.get("x-amz-credential", ""))
        user = ctx.s3_verifier._user(parts[0])
        key = signing_key(user.secret_key, parts[1], parts[2], "s3")
        expected = hmac.new(key, policy.encode(), hashlib.sha256).hexdigest()
        given = fields["x-amz-signature"]
    elif "signature" in fields and "awsaccesskeyid" in fields:
        user = ctx.s3_verifier._user(fields["awsaccesskeyid"])
        expected = base64.b64encode(hmac.new(user.secret_key.encode(), policy.encode(), hashlib.sha1).digest()).decode()
        given = fields["signature"]
    else:
        raise errors.InvalidInput("Bucket POST must contain a signature with its policy.", argument="x-amz-signature",
                                  value="")
    if not hmac.compare_digest(expected, given):
        raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not match the signature you "
                      "provided. Check your key and signing method.", 403)
    return AuthResult(user, UNSIGNED, given, fields.get("x-amz-date", ""), "", b"")


def _conditions(policy_b64: str, now: dt.datetime) -> list:
    try:
        doc = orjson.loads(base64.b64decode(policy_b64, validate=True))
        if not _ISO8601.match(doc["expiration"]):
            raise ValueError
        expiration = dt.datetime.fromisoformat(doc["expiration"].replace("Z", "+00:00"))
        conds = doc["conditions"]
        if not isinstance(conds, list):
            raise ValueError
    except (binascii.Error, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid JSON.", 400) from None
    if now > expiration:
        raise _policy_error("Policy expired.")
    return conds


def _check_policy(conds: list, fields: dict[str, str], bucket: str) -> tuple[int, int] | None:
    """Check the form fields against the policy's conditions; returns its content-length-range, if any."""
    values = {**fields, "bucket": bucket}
    covered, length_range = {"bucket"}, None
    for c in conds:
        if isinstance(c, dict) and len(c) == 1:
            (name, want), = c.items()
            op, name = "eq", name.lower().lstrip("$")
        elif isinstance(c, list) and len(c) == 3 and str(c[0]).lower() == "content-length-range":
            try:
                length_range = (int(c[1]), int(c[2]))
            except (TypeError, ValueError):
                raise S3Error("InvalidPolicyDocument", "Invalid Policy: Invalid content-length-range.", 400) from None
            continue
        elif isinstance(c, list) and len(c) == 3 and str(c[0]).lower() in ("eq", "starts-with") \
                and isinstance(c[1], str) and c[1].startswith("$"):
            op, name, want = str(c[0]).lower(), c[1][1:].lower(), c[2]
        else:
            raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid Condition: {c!r}", 400)
        if not isinstance(want, str):
            raise S3Error("InvalidPolicyDocument", f"Invalid Policy: Invalid Condition: {c!r}", 400)
        have = values.get(name)
        covered.add(name)
        if have is None and op == "starts-with" and want == "":
            continue  # an optional field: ["starts-with", "$x-amz-server-side-encryption", ""] without it
        if have is None or not (have == want if op == "eq" else have.startswith(want)):
            raise _policy_error(f'Policy Condition failed: ["{op}", "${name}", "{want}"]')
    extra = [n for n in fields if n not in covered and n not in NOT_IN_POLICY
             and not n.startswith(("x-ignore-", "x-amz-checksum-"))
             and not (n.startswith("x-amz-") and n in ("x-amz-algorithm", "x-amz-credential", "x-amz-date",
                                                       "x-amz-security-token"))]
    if extra:
        raise _policy_error(f"Extra input fields: {', '.join(sorted(extra))}")
    return length_range


async def post_object(ctx, req):
    ctype, opts = parse_options_header(req.headers.get("content-type", ""))
    boundary = opts.get(b"boundary")
    if ctype != b"multipart/form-data" or not boundary:
        raise S3Error("PreconditionFailed", "Bucket POST must be of the enclosure-type multipart/form-data", 412,
                      Condition="Bucket POST must be of the enclosure-type multipart/form-data")
    form = _Form(req.receive, boundary)
    fields, filename, _ = await _fields(form)
    if "key" not in fields:
        raise errors.InvalidInput("Bucket POST must contain a field named 'key'.  If it is specified, please check the "
                                  "order of the fields.", argument="key", value="")
    fields["key"] = fields["key"].replace("${filename}", filename)
    length_range = None
    if "policy" in fields:
        await ctx.keys.load(fields.get("x-amz-credential", "").split("/")[0] or fields.get("awsaccesskeyid"))
        auth = _verify(ctx, fields)
        length_range = _check_policy(_conditions(fields["policy"], dt.datetime.now(dt.timezone.utc)), fields,
                                     req.bucket)
    else:
        auth = req.auth  # anonymous, unless the request itself was signed
    key = fields["key"]
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect:
        args.header_value(redirect, "success_action_redirect")  # it goes out in the Location header
    # the form's fields stand for the request headers of a PUT: headers, metadata, ACL, storage class
    headers = {n: v for n, v in fields.items() if n not in NOT_IN_POLICY and n != "key"}
    if "acl" in headers:
        headers["x-amz-acl"] = headers.pop("acl")
    req = dataclasses.replace(req, key=key, auth=auth, headers=headers)
    bad = None
    if "tagging" in fields:  # the form's tag set is a <Tagging> document, not the header's query form
        req.request_tags, bad = body_tags(fields["tagging"].encode(), tagging.MAX_OBJECT_TAGS)
    info = await bucket_access(ctx, req, "write")
    if bad is not None:
        raise bad
    check_key(key)
    attrs = objectlock.with_lock(req, info, await object_attrs(ctx, req, info))
    if req.request_tags is not None:
        attrs = msgspec.structs.replace(attrs, tags=req.request_tags)
    sealed, _ = sse.for_write(ctx, headers, info.encryption)  # the form's encryption fields, as a PUT's headers
    check = BodyCheck(headers, None)  # the form's x-amz-checksum-* fields, verified like a PUT's headers
    blocks, size = await ctx.cluster.write_stream(req.bucket, form.file(), check.update,
                                                  limit=ctx.settings.max_object_size,
                                                  cipher=sealed.cipher if sealed else None)
    try:
        check.verify(None)
        if length_range is not None and not length_range[0] <= size <= length_range[1]:
            if size > length_range[1]:
                raise S3Error("EntityTooLarge", "Your proposed upload exceeds the maximum allowed size", 400,
                              ProposedSize=size, MaxSizeAllowed=length_range[1])
            raise S3Error("EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size", 400,
                          ProposedSize=size, MinSizeAllowed=length_range[0])
        cs = check.checksums()
        obj = msgspec.structs.replace(attrs, size=size, etag=sealed.etag(check.etag) if sealed else check.etag,
                                      checksum={**cs, "type": "FULL_OBJECT"} if cs else {},
                                      sse=sealed.info if sealed else None)
        res = await ctx.cluster.commit(req.bucket, ctx.cluster.namenode.put_object(req.bucket, key, obj, blocks))
    except BaseException:
        await ctx.abandon(blocks)
        raise
    location = f"/{req.bucket}/{quote(key)}"
    out = [("etag", res.etag)] + written_version_headers(res.version_id) + sse.headers(sealed.info if sealed else None)
    if redirect:
        sep = "&" if "?" in redirect else "?"
        target = f"{redirect}{sep}bucket={quote(req.bucket)}&key={quote(key)}&etag={quote(res.etag)}"
        return Response(303, out + [("location", target)])
    out.append(("location", location))
    status = fields.get("success_action_status")
    if status == "201":
        body = (f"{xml.HEAD}<PostResponse><Location>{xml.esc(location)}</Location><Bucket>{xml.esc(req.bucket)}"
                f"</Bucket><Key>{xml.key(key)}</Key><ETag>{xml.esc(res.etag)}</ETag></PostResponse>").encode()
        return Response(201, out + [("content-type", "application/xml")], body)
    return Response(200 if status == "200" else 204, out)
