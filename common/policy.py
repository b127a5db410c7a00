"""Bucket policies: the IAM policy language as S3 applies it to a bucket (parse, validate, evaluate, "is it public").

A policy is parsed once into frozen `Statement`s; `evaluate` answers "Deny" (an explicit deny matched), "Allow" (an
allow matched and no deny) or None (the policy says nothing: the ACLs decide). The request is described by a
`RequestContext`: the caller (`Caller`: canonical id, name, anonymous or not), the action ("s3:GetObject"), the
resource ARN ("arn:aws:s3:::bucket/key") and the condition keys. Condition keys are looked up through
`RequestContext.value(key)`: fixed keys from a dict, and prefixed families (`s3:ExistingObjectTag/<tag>`,
`s3:RequestObjectTag/<tag>`) through resolvers registered by prefix, so a feature that knows an object's tags adds
them without touching the evaluator.

Shared by the NameNode (validation before a policy is stored) and the gateway (evaluation on every request).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from . import errors

_ORDER = {"Equals": operator.eq, "LessThan": operator.lt, "LessThanEquals": operator.le,
          "GreaterThan": operator.gt, "GreaterThanEquals": operator.ge}  # Numeric<op>, Date<op>

MAX_POLICY_BYTES = 20 * 1024  # S3's limit on a bucket policy
VERSIONS = ("2012-10-17", "2008-10-17")
EFFECTS = ("Allow", "Deny")
_STATEMENT_KEYS = {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource", "NotResource",
                   "Condition"}


MalformedPolicy = errors.MalformedPolicy


# ------------------------------------------------------------------ parsed form
@dataclass(frozen=True, slots=True)
class Condition:
    op: str  # the base operator, e.g. "StringLike" (without IfExists or a set prefix)
    key: str  # as written; looked up case-insensitively
    values: tuple  # strings (or bools/numbers as written)
    if_exists: bool = False
    set_op: str | None = None  # "ForAnyValue" | "ForAllValues"


@dataclass(frozen=True, slots=True)
class Statement:
    sid: str
    effect: str
    principals: tuple[str, ...] | None  # None: NotPrincipal is used; "*" matches everyone
    not_principals: tuple[str, ...] | None
    actions: tuple[re.Pattern, ...]
    not_action: bool
    resources: tuple[re.Pattern, ...]
    resource_text: tuple[str, ...]
    not_resource: bool
    conditions: tuple[Condition, ...]
    public_principal: bool  # the principal part matches anyone (before conditions)


@dataclass(frozen=True, slots=True)
class Policy:
    statements: tuple[Statement, ...]


# ------------------------------------------------------------------ the request
@dataclass(frozen=True, slots=True)
class Caller:
    canonical_id: str = ""  # "" when anonymous
    name: str = ""  # display name (aws:username)
    access_key: str = ""
    service: str = ""  # an AWS service principal acting on its own ("logging.s3.amazonaws.com"), not a user

    @property
    def anonymous(self) -> bool:
        return not self.canonical_id and not self.service


Resolver = Callable[[str], "str | list[str] | None"]  # the part after the prefix -> value(s) or None (absent)


@dataclass(slots=True)
class RequestContext:
    caller: Caller
    action: str  # "s3:GetObject"
    resource: str  # "arn:aws:s3:::bucket" or "arn:aws:s3:::bucket/key"
    keys: dict[str, Any] = field(default_factory=dict)  # lower-cased condition key -> str | list[str]
    any_key: bool = False
    """The request reaches objects by inode, not by key (the mount's operations): `resource` is the bucket's, a
    Deny naming any key of the bucket applies, and an Allow must name every key ("bucket/*")."""
    resolvers: dict[str, Resolver] = field(default_factory=dict)  # lower-cased prefix ("s3:existingobjecttag/")

    def value(self, key: str):
        k = key.lower()
        if k in self.keys:
            return self.keys[k]
        for prefix, fn in self.resolvers.items():
            if k.startswith(prefix):
                return fn(key[len(prefix):])
        return None


def arn(bucket: str, key: str | None = None) -> str:
    return f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else "")


# ------------------------------------------------------------------ parsing
def _bad(msg: str) -> MalformedPolicy:
    return MalformedPolicy(msg)


def _strings(v, what: str) -> tuple[str, ...]:
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x for x in v):
        raise _bad(f"{what} must be a non-empty string or list of strings")
    return tuple(v)


def _wildcard(pattern: str, case: bool) -> re.Pattern:
    """An IAM wildcard: * any run of characters (slashes too), ? one character."""
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(rx, re.DOTALL | (0 if case else re.IGNORECASE))


def _principals(v, what: str) -> tuple[tuple[str, ...], bool]:
    """Principal ids (ARNs, account or canonical ids, "*", "service:<name>" for a Service principal) and whether the
    principal is everyone."""
    if v == "*":
        return ("*",), True
    if not isinstance(v, dict) or not v:
        raise _bad(f"Invalid principal in policy: {what} must be \"*\" or an object such as {{\"AWS\": [...]}}")
    out: list[str] = []
    for kind, ids in v.items():
        if kind not in ("AWS", "CanonicalUser", "Service", "Federated"):
            raise _bad(f"Invalid principal in policy: unknown principal type {kind!r}")
        names = _strings(ids, f"{what}.{kind}")
        out += [f"service:{n}" for n in names] if kind == "Service" else names
    return tuple(out), "*" in out


_OPERATORS = {
    "StringEquals", "StringNotEquals", "StringEqualsIgnoreCase", "StringNotEqualsIgnoreCase", "StringLike",
    "StringNotLike", "NumericEquals", "NumericNotEquals", "NumericLessThan", "NumericLessThanEquals",
    "NumericGreaterThan", "NumericGreaterThanEquals", "DateEquals", "DateNotEquals", "DateLessThan",
    "DateLessThanEquals", "DateGreaterThan", "DateGreaterThanEquals", "Bool", "BinaryEquals", "IpAddress",
    "NotIpAddress", "ArnEquals", "ArnLike", "ArnNotEquals", "ArnNotLike", "Null"}


def _conditions(v) -> tuple[Condition, ...]:
    if not isinstance(v, dict):
        raise _bad("Condition must be an object")
    out = []
    for op_name, block in v.items():
        set_op, op = None, op_name
        for prefix in ("ForAnyValue:", "ForAllValues:"):
            if op.startswith(prefix):
                set_op, op = prefix[:-1], op[len(prefix):]
        if_exists = op.endswith("IfExists") and op != "IfExists"
        if if_exists:
            op = op[:-len("IfExists")]
        if op not in _OPERATORS or (if_exists and op == "Null"):
            raise _bad(f"Invalid Condition type : {op_name}")
        if not isinstance(block, dict) or not block:
            raise _bad(f"Condition {op_name} must map keys to values")
        for key, vals in block.items():
            if not isinstance(vals, list):
                vals = [vals]
            if not vals or not all(isinstance(x, (str, bool, int, float)) for x in vals):
                raise _bad(f"Condition {op_name} {key}: values must be strings, numbers or booleans")
            if op in ("IpAddress", "NotIpAddress"):
                for x in vals:
                    try:
                        ipaddress.ip_network(str(x), strict=False)
                    except ValueError:
                        raise _bad(f"Invalid IP address in condition: {x!r}") from None
            out.append(Condition(op, key, tuple(vals), if_exists, set_op))
    return tuple(out)


def parse(text: str | bytes, bucket: str | None = None) -> Policy:
    """A policy document, validated as S3 validates a bucket policy; MalformedPolicy says what is wrong. With `bucket`,
    every resource must be in that bucket (S3: "Policy has invalid resource")."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    if len(raw) > MAX_POLICY_BYTES:
        raise _bad(f"Policies must be no larger than {MAX_POLICY_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _bad("This policy contains invalid Json") from None
    if not isinstance(doc, dict):
        raise _bad("This policy contains invalid Json")
    unknown = set(doc) - {"Version", "Id", "Statement"}
    if unknown:
        raise _bad(f"Unknown field {sorted(unknown)[0]}")
    if "Version" in doc and doc["Version"] not in VERSIONS:
        raise _bad("The policy must contain a valid version string")
    stmts = doc.get("Statement")
    if isinstance(stmts, dict):
        stmts = [stmts]
    if not isinstance(stmts, list) or not stmts:
        raise _bad("Missing required field Statement")
    out = []
    for s in stmts:
        if not isinstance(s, dict):
            raise _bad("Statement must be an object")
        unknown = set(s) - _STATEMENT_KEYS
        if unknown:
            raise _bad(f"Unknown field {sorted(unknown)[0]}")
        effect = s.get("Effect")
        if effect not in EFFECTS:
            raise _bad("Invalid effect: " + str(effect) if effect is not None else "Missing required field Effect")
        if ("Principal" in s) == ("NotPrincipal" in s):
            raise _bad("Statement must name exactly one of Principal and NotPrincipal")
        if ("Action" in s) == ("NotAction" in s):
            raise _bad("Missing required field Action" if "Action" not in s and "NotAction" not in s
                       else "Statement must name exactly one of Action and NotAction")
        if ("Resource" in s) == ("NotResource" in s):
            raise _bad("Missing required field Resource" if "Resource" not in s and "NotResource" not in s
                       else "Statement must name exactly one of Resource and NotResource")
        if "Principal" in s:
            princ, public = _principals(s["Principal"], "Principal")
            notp = None
        else:
            if effect == "Allow":  # IAM: NotPrincipal only with Deny
                raise _bad("NotPrincipal is allowed only with Effect Deny")
            notp, _ = _principals(s["NotPrincipal"], "NotPrincipal")
            princ, public = None, False
        acts = _strings(s.get("Action", s.get("NotAction")), "Action")
        for a in acts:
            if a != "*" and not re.fullmatch(r"s3:[A-Za-z0-9*?]+", a):
                raise _bad(f"Policy has invalid action: {a}")
        res = _strings(s.get("Resource", s.get("NotResource")), "Resource")
        for r in res:
            if r == "*":
                continue
            if not r.startswith("arn:aws:s3:::"):
                raise _bad("Policy has invalid resource")
            if bucket is not None and not _wildcard(r.split("/", 1)[0], True).fullmatch(arn(bucket)):
                raise _bad("Policy has invalid resource")
        sid = s.get("Sid", "")
        if not isinstance(sid, str):
            raise _bad("Sid must be a string")
        out.append(Statement(
            sid=sid, effect=effect, principals=princ, not_principals=notp,
            actions=tuple(_wildcard(a, False) for a in acts), not_action="NotAction" in s,
            resources=tuple(_wildcard(r, True) for r in res), resource_text=res, not_resource="NotResource" in s,
            conditions=_conditions(s.get("Condition", {})), public_principal=public))
    return Policy(tuple(out))


def check(text: str | bytes, bucket: str | None = None) -> None:
    parse(text, bucket)


# ------------------------------------------------------------------ evaluation
def _principal_matches(ids: tuple[str, ...], caller: Caller) -> bool:
    if caller.service:  # a service is let in only by its name (Principal {"Service": ...}), never by "*"
        return f"service:{caller.service}" in ids
    for p in ids:
        if p == "*":
            return True
        if caller.anonymous:
            continue
        if p == caller.canonical_id or (caller.access_key and p == caller.access_key):
            return True
        if p.startswith("arn:aws:iam::"):
            account, _, rest = p[len("arn:aws:iam::"):].partition(":")
            if account == caller.canonical_id and rest == "root":
                return True
            if rest.startswith("user/") and rest[5:].rsplit("/", 1)[-1] == caller.name and \
                    account in ("", caller.canonical_id):
                return True
    return False


def _norm(x) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    return str(x)


def _num(x) -> float | None:
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _date(x) -> float | None:
    s = _norm(x)
    if re.fullmatch(r"\d+", s):
        return float(s)
    try:
        d = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.timezone.utc)
    return d.timestamp()


def _ip_in(ip: str, nets) -> bool:
    try:
        a = ipaddress.ip_address(ip)
    except ValueError:
        return False
    for n in nets:
        net = ipaddress.ip_network(str(n), strict=False)
        if a.version == net.version and a in net:
            return True
    return False


def _one(op: str, have: str, want) -> bool:
    """Does one request value satisfy operator `op` against one policy value (positive form)?"""
    w = _norm(want)
    if op == "StringEquals":
        return have == w
    if op == "StringEqualsIgnoreCase":
        return have.lower() == w.lower()
    if op in ("StringLike", "ArnLike"):
        return _wildcard(w, True).fullmatch(have) is not None
    if op == "ArnEquals":
        return have == w
    if op == "Bool":
        return have.lower() == w.lower()
    if op == "BinaryEquals":
        return have == w
    for kind, parse in (("Numeric", _num), ("Date", _date)):
        if op.startswith(kind):
            a, b = parse(have), parse(w)
            if a is None or b is None:
                return False
            return _ORDER[op[len(kind):]](a, b)
    if op == "IpAddress":
        return _ip_in(have, [want])
    raise AssertionError(op)


_NEGATED = {"StringNotEquals": "StringEquals", "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
            "StringNotLike": "StringLike", "NumericNotEquals": "NumericEquals", "DateNotEquals": "DateEquals",
            "NotIpAddress": "IpAddress", "ArnNotEquals": "ArnEquals", "ArnNotLike": "ArnLike"}


def _condition_holds(c: Condition, ctx: RequestContext) -> bool:
    have = ctx.value(c.key)
    if c.op == "Null":  # "true": the key is absent
        absent = have is None or have == []
        return any((_norm(v).lower() == "true") == absent for v in c.values)
    if have is None or have == []:
        if c.if_exists:
            return True
        # ForAllValues over an empty set holds; every other operator needs the key (negated ones included, as IAM)
        return c.set_op == "ForAllValues"
    haves = [_norm(h) for h in (have if isinstance(have, list) else [have])]
    negated = c.op in _NEGATED
    base = _NEGATED.get(c.op, c.op)

    def matches(h: str) -> bool:
        hit = any(_one(base, h, w) for w in c.values)
        return not hit if negated else hit

    if c.set_op == "ForAllValues":
        return all(matches(h) for h in haves)
    return any(matches(h) for h in haves)  # a single value, or ForAnyValue


def _statement_applies(s: Statement, ctx: RequestContext) -> bool:
    if s.principals is not None:
        if not _principal_matches(s.principals, ctx.caller):
            return False
    elif _principal_matches(s.not_principals or (), ctx.caller):
        return False
    hit = any(p.fullmatch(ctx.action) for p in s.actions)
    if hit == s.not_action:
        return False
    if ctx.any_key:
        if s.effect == "Deny":  # conservative: denied if any key of the bucket may be
            bucket_arn = ctx.resource.split("/", 1)[0]
            hit = s.not_resource or any(t == "*" or "/" in t and _wildcard(t.split("/", 1)[0], True).fullmatch(
                bucket_arn) for t in s.resource_text)
            if not hit:
                return False
        else:
            hit = any(p.fullmatch(ctx.resource + "/*") for p in s.resources)
            if hit == s.not_resource:
                return False
    else:
        hit = any(p.fullmatch(ctx.resource) for p in s.resources)
        if hit == s.not_resource:
            return False
    return all(_condition_holds(c, ctx) for c in s.conditions)


def evaluate(policy: Policy, ctx: RequestContext) -> str | None:
    """ "Deny" if a Deny statement applies, else "Allow" if an Allow statement does, else None."""
    allowed = False
    for s in policy.statements:
        if _statement_applies(s, ctx):
            if s.effect == "Deny":
                return "Deny"
            allowed = True
    return "Allow" if allowed else None


# ------------------------------------------------------------------ "public", as AWS defines it
# A condition on one of these keys with fixed values (no wildcard) limits an Allow to known principals or networks.
_LIMITING_KEYS = {"aws:sourcearn", "aws:sourcevpc", "aws:sourcevpce", "aws:sourceaccount", "aws:sourceowner",
                  "aws:principalorgid", "aws:principalaccount", "aws:principalarn", "aws:userid",
                  "aws:principalorgpaths", "s3:x-amz-server-side-encryption-aws-kms-key-id",
                  "s3:dataaccesspointarn", "s3:dataaccesspointaccount"}
_FIXED_OPS = {"StringEquals", "StringEqualsIgnoreCase", "ArnEquals", "StringLike", "ArnLike"}


def _limiting(c: Condition) -> bool:
    if c.set_op is not None or c.if_exists:
        return False
    k = c.key.lower()
    if k == "aws:sourceip" and c.op == "IpAddress":
        for v in c.values:  # a range wider than /8 (IPv4) or /32 (IPv6) is public, as AWS counts it
            n = ipaddress.ip_network(str(v), strict=False)
            if n.prefixlen < (8 if n.version == 4 else 32):
                return False
        return True
    if k in _LIMITING_KEYS and c.op in _FIXED_OPS:
        return not any("*" in _norm(v) or "?" in _norm(v) for v in c.values)
    return False


def is_public(policy: Policy) -> bool:
    """AWS's rule: a policy is public if an Allow statement lets in everyone ("*") without a
    condition that pins the caller to fixed accounts, ARNs, VPCs or an IP range of /8 or narrower."""
    for s in policy.statements:
        if s.effect == "Allow" and s.public_principal and not any(_limiting(c) for c in s.conditions):
            return True
    return False
