"""Admin API authentication: a request must come from an admin key (GW_ADMIN_USERS, the first GW_USERS entry, or a
key created with admin=true).

Accepted credentials, in the Authorization header:
- SigV4 (AWS4-HMAC-SHA256, service "s3", any region), as `epochfs admin` and any AWS signer send it; a signed
  payload hash is checked against the body. Presigned query auth works too. The secret never crosses the wire.
- HTTP Basic with the access key as user name and the secret key as password, for browsers (the dashboard) and curl;
  use it over TLS or a trusted network only.
No credentials (or wrong ones): 401 with a Basic challenge; a valid key without admin rights: 403.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from epochfs.common.sigv4 import UNSIGNED

from ..keys import access_key_of
from ..s3.errors import S3Error
from ..s3.sigv4 import STREAMING_SIGNED, User

CHALLENGE = {"WWW-Authenticate": 'Basic realm="epochfs admin", charset="UTF-8"'}


def _unauthorized(reason: str) -> HTTPException:
    return HTTPException(401, reason, headers=CHALLENGE)


async def _basic(ctx, value: str) -> User:
    try:
        ak, sep, sk = base64.b64decode(value, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        raise _unauthorized("malformed Basic credentials") from None
    await ctx.keys.load(ak)
    user = ctx.keys.get(ak)
    if not sep or user is None or not hmac.compare_digest(user.secret_key.encode(), sk.encode()):
        raise _unauthorized("unknown access key or wrong secret")
    return user


async def _sigv4(ctx, request: Request) -> User:
    headers = {k.lower(): v for k, v in request.headers.items()}
    query = list(request.query_params.multi_items())
    await ctx.keys.load(access_key_of(headers, dict(query)))
    raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
    try:
        auth = ctx.s3_verifier.verify(request.method, raw_path, query, headers)
    except S3Error as e:
        raise _unauthorized(f"{e.code}: {e.message}") from None
    if auth is None:
        raise _unauthorized("admin credentials required")
    if auth.payload_hash.startswith("STREAMING-") or auth.payload_hash == STREAMING_SIGNED:
        raise _unauthorized("streaming payloads are not accepted by the admin API")
    if auth.payload_hash != UNSIGNED:
        body = await request.body()
        if not hmac.compare_digest(hashlib.sha256(body).hexdigest(), auth.payload_hash):
            raise _unauthorized("x-amz-content-sha256 does not match the body")
    return auth.user


async def admin_user(request: Request) -> User:
    ctx = request.app.state.ctx
    auth = request.headers.get("authorization", "")
    if auth[:6].lower() == "basic ":
        user = await _basic(ctx, auth[6:].strip())
    elif auth or "X-Amz-Signature" in request.query_params:
        user = await _sigv4(ctx, request)
    else:
        raise _unauthorized("admin credentials required")
    if not ctx.is_admin(user):
        raise HTTPException(403, "this access key has no admin rights")
    return user


AdminDep = Annotated[User, Depends(admin_user)]
