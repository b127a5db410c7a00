"""Bucket CORS: Put/Get/DeleteBucketCors, OPTIONS preflight, and CORS headers on actual requests with an Origin."""
from __future__ import annotations

import fnmatch

from epochfs.common.messages import CorsRule, Unset

from . import args, xml
from .body import read_all
from .bucket import bucket_owned
from .errors import S3Error, malformed_xml
from .http import Response

METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")


def parse_cors(body: bytes) -> list[CorsRule]:
    root = xml.parse(body)
    if root.tag != "CORSConfiguration":
        raise malformed_xml()
    rules = []
    for r in root.findall("CORSRule"):
        rule = {"origins": [e.text or "" for e in r.findall("AllowedOrigin")],
                "methods": [e.text or "" for e in r.findall("AllowedMethod")],
                "headers": [e.text or "" for e in r.findall("AllowedHeader")],
                "expose": [e.text or "" for e in r.findall("ExposeHeader")]}
        if r.findtext("ID"):
            rule["id"] = r.findtext("ID")
        if r.findtext("MaxAgeSeconds"):
            rule["max_age"] = args.digits(r.findtext("MaxAgeSeconds").strip(), canonical=False)
            if rule["max_age"] is None or rule["max_age"] > args.INT32:
                raise malformed_xml()
        if not rule["origins"] or not rule["methods"]:
            raise malformed_xml()
        for v in (*rule["origins"], *rule["headers"], *rule["expose"]):  # they go out in response headers
            args.header_value(v, "CORSRule")
        for m in rule["methods"]:
            if m not in METHODS:
                raise S3Error("InvalidRequest", f"Found unsupported HTTP method in CORS config. Unsupported method "
                              f"is {m}", 400)
        for o in rule["origins"]:
            if o.count("*") > 1:
                raise S3Error("InvalidRequest", f'AllowedOrigin "{o}" can not have more than one wildcard.', 400)
        rules.append(CorsRule(**rule))
    if not rules or len(rules) > 100:
        raise malformed_xml()
    return rules


def cors_xml(rules: list[CorsRule]) -> bytes:
    out = []
    for r in rules:
        parts = [f"<ID>{xml.esc(r.id)}</ID>"] if r.id is not None else []
        parts += [f"<AllowedOrigin>{xml.esc(o)}</AllowedOrigin>" for o in r.origins]
        parts += [f"<AllowedMethod>{m}</AllowedMethod>" for m in r.methods]
        parts += [f"<AllowedHeader>{xml.esc(h)}</AllowedHeader>" for h in r.headers]
        parts += [f"<ExposeHeader>{xml.esc(h)}</ExposeHeader>" for h in r.expose]
        if r.max_age is not None:
            parts.append(f"<MaxAgeSeconds>{r.max_age}</MaxAgeSeconds>")
        out.append(f"<CORSRule>{''.join(parts)}</CORSRule>")
    return xml.doc("CORSConfiguration", "".join(out))


def _match(pattern: str, value: str) -> bool:
    return fnmatch.fnmatchcase(value.lower(), pattern.lower().replace("[", "[[]"))


def find_rule(rules: list[CorsRule], origin: str, method: str, req_headers: list[str]) -> CorsRule | None:
    for r in rules:
        if method not in r.methods or not any(_match(o, origin) for o in r.origins):
            continue
        if all(any(_match(p, h) for p in r.headers) for h in req_headers):
            return r
    return None


def cors_headers(rule: CorsRule, origin: str, method: str, req_headers: list[str] | None) -> list[tuple[str, str]]:
    allow_origin = "*" if "*" in rule.origins else origin
    h = [("access-control-allow-origin", allow_origin), ("access-control-allow-methods", ", ".join(rule.methods)),
         ("vary", "Origin, Access-Control-Request-Headers, Access-Control-Request-Method")]
    if allow_origin != "*":
        h.append(("access-control-allow-credentials", "true"))
    if req_headers:
        h.append(("access-control-allow-headers", ", ".join(req_headers)))
    if rule.expose:
        h.append(("access-control-expose-headers", ", ".join(rule.expose)))
    if rule.max_age is not None:
        h.append(("access-control-max-age", str(rule.max_age)))
    return h


async def put_cors(ctx, req):
    await bucket_owned(ctx, req)
    rules = parse_cors(await read_all(req.receive, 64 << 10))
    await ctx.cluster.namenode.bucket_settings(req.bucket, cors=rules)
    ctx.forget_bucket(req.bucket)
    return Response(200)


async def get_cors(ctx, req):
    info = await bucket_owned(ctx, req)
    if not info.cors:
        raise S3Error("NoSuchCORSConfiguration", "The CORS configuration does not exist", 404,
                      BucketName=req.bucket)
    return Response(200, [("content-type", "application/xml")], cors_xml(info.cors))


async def delete_cors(ctx, req):
    await bucket_owned(ctx, req)
    await ctx.cluster.namenode.bucket_settings(req.bucket, cors=Unset())
    ctx.forget_bucket(req.bucket)
    return Response(204)


async def preflight(ctx, req):
    """OPTIONS: answered from the bucket's CORS rules; needs no signature (browsers send none)."""
    origin = req.headers.get("origin")
    method = req.headers.get("access-control-request-method")
    if not origin:
        raise S3Error("BadRequest", "Insufficient information. Origin request header needed.", 400)
    if not method:
        raise S3Error("BadRequest", "Invalid Access-Control-Request-Method: null", 400)
    if req.bucket is None:
        raise S3Error("AccessForbidden", "CORSResponse: Bucket not found", 403)
    info = await ctx.bucket(req.bucket)
    asked = [h.strip().lower() for h in req.headers.get("access-control-request-headers", "").split(",") if h.strip()]
    rule = find_rule(info.cors or [], origin, method, asked)
    if rule is None:
        raise S3Error("AccessForbidden", "CORSResponse: This CORS request is not allowed. This is usually because "
                      "the evalution of Origin, request method / Access-Control-Request-Method or "
                      "Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.", 403,
                      Method=method, ResourceType="OBJECT" if req.key else "BUCKET")
    return Response(200, cors_headers(rule, origin, method, asked))


async def actual_request_headers(ctx, req) -> list[tuple[str, str]]:
    """CORS headers for a non-preflight request that carries an Origin (empty when no rule allows it)."""
    origin = req.headers.get("origin")
    if not origin or req.bucket is None:
        return []
    try:
        info = await ctx.bucket(req.bucket)
    except Exception:
        return []
    rule = find_rule(info.cors or [], origin, req.method, [])
    return cors_headers(rule, origin, req.method, None) if rule else []
