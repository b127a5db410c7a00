"""The policy language itself (common/policy.py): parsing, evaluation, conditions, "public"."""
from __future__ import annotations

import json

import pytest

from epochfs.common import errors, policy

ALT = policy.Caller("alt-id", "alt", "ALTKEY")
ANON = policy.Caller()


def _p(*statements, bucket="b") -> policy.Policy:
    return policy.parse(json.dumps({"Version": "2012-10-17", "Statement": list(statements)}), bucket)


def _st(effect="Allow", principal="*", action="s3:GetObject", resource="arn:aws:s3:::b/*", **extra) -> dict:
    return {"Effect": effect, "Principal": principal, "Action": action, "Resource": resource, **extra}


def _ctx(caller=ALT, action="s3:GetObject", key="k", **keys) -> policy.RequestContext:
    return policy.RequestContext(caller, action, policy.arn("b", key), {k.lower(): v for k, v in keys.items()})


def test_wildcards_in_actions_and_resources():
    p = _p(_st(action="s3:Get*", resource="arn:aws:s3:::b/train/??.jpg"))
    assert policy.evaluate(p, _ctx(action="s3:GetObjectVersion", key="train/01.jpg")) == "Allow"
    assert policy.evaluate(p, _ctx(action="s3:getobject", key="train/01.jpg")) == "Allow"  # actions: any case
    assert policy.evaluate(p, _ctx(key="train/001.jpg")) is None
    assert policy.evaluate(p, _ctx(key="Train/01.jpg")) is None  # resources: case matters
    assert policy.evaluate(p, _ctx(action="s3:PutObject", key="train/01.jpg")) is None


def test_deny_wins_and_not_forms():
    p = _p(_st(), _st("Deny", resource="arn:aws:s3:::b/secret/*"))
    assert policy.evaluate(p, _ctx(key="x")) == "Allow"
    assert policy.evaluate(p, _ctx(key="secret/x")) == "Deny"
    p = _p({"Effect": "Deny", "NotPrincipal": {"AWS": "arn:aws:iam::alt-id:root"}, "NotAction": "s3:List*",
            "NotResource": "arn:aws:s3:::b/pub/*"})
    assert policy.evaluate(p, _ctx(caller=ANON, key="x")) == "Deny"
    assert policy.evaluate(p, _ctx(caller=ANON, key="pub/x")) is None
    assert policy.evaluate(p, _ctx(caller=ANON, action="s3:ListBucket", key=None)) is None
    assert policy.evaluate(p, _ctx(key="x")) is None  # alt is the NotPrincipal


def test_principals():
    for principal in ({"AWS": "alt-id"}, {"AWS": ["x", "arn:aws:iam::alt-id:root"]}, {"CanonicalUser": "alt-id"},
                      {"AWS": "arn:aws:iam::alt-id:user/alt"}, {"AWS": "*"}, "*"):
        assert policy.evaluate(_p(_st(principal=principal)), _ctx()) == "Allow", principal
    assert policy.evaluate(_p(_st(principal={"AWS": "alt-id"})), _ctx(caller=ANON)) is None
    assert policy.evaluate(_p(_st(principal={"AWS": "arn:aws:iam::other:root"})), _ctx()) is None


@pytest.mark.parametrize("cond,keys,want", [
    ({"StringEquals": {"s3:x-amz-acl": "private"}}, {"s3:x-amz-acl": "private"}, True),
    ({"StringEquals": {"s3:x-amz-acl": "private"}}, {}, False),
    ({"StringNotEquals": {"s3:x-amz-acl": "private"}}, {"s3:x-amz-acl": "public-read"}, True),
    ({"StringNotEquals": {"s3:x-amz-acl": "private"}}, {}, False),  # a missing key fails negated operators too
    ({"StringNotEqualsIfExists": {"s3:x-amz-acl": "private"}}, {}, True),
    ({"StringLike": {"s3:prefix": ["home/*", "pub/"]}}, {"s3:prefix": "home/alt/"}, True),
    ({"StringEqualsIgnoreCase": {"aws:username": "ALT"}}, {"aws:username": "alt"}, True),
    ({"IpAddress": {"aws:SourceIp": "127.0.0.0/8"}}, {"aws:sourceip": "127.0.0.1"}, True),
    ({"NotIpAddress": {"aws:SourceIp": ["10.0.0.0/8", "::1/128"]}}, {"aws:sourceip": "127.0.0.1"}, True),
    ({"Bool": {"aws:SecureTransport": "false"}}, {"aws:securetransport": "false"}, True),
    ({"Bool": {"aws:SecureTransport": False}}, {"aws:securetransport": "true"}, False),
    ({"NumericLessThanEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": "10"}, True),
    ({"NumericGreaterThan": {"s3:max-keys": 10}}, {"s3:max-keys": "abc"}, False),
    ({"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}, {"aws:currenttime": "2026-11-26T00:00:00Z"},
     True),
    ({"Null": {"s3:x-amz-acl": "true"}}, {}, True),
    ({"Null": {"s3:x-amz-acl": "false"}}, {}, False),
    ({"ForAnyValue:StringEquals": {"s3:tags": ["a", "b"]}}, {"s3:tags": ["c", "b"]}, True),
    ({"ForAllValues:StringEquals": {"s3:tags": ["a", "b"]}}, {"s3:tags": ["c", "b"]}, False),
    ({"ForAllValues:StringEquals": {"s3:tags": ["a", "b"]}}, {}, True),
])
def test_conditions(cond, keys, want):
    got = policy.evaluate(_p(_st(Condition=cond)), _ctx(**keys))
    assert (got == "Allow") is want


def test_resolvers_add_key_families():
    """How object tagging plugs in: a prefix and a function of what follows it."""
    p = _p(_st(Condition={"StringEquals": {"s3:ExistingObjectTag/team": "vision"}}))
    ctx = _ctx()
    ctx.resolvers["s3:existingobjecttag/"] = {"team": "vision"}.get
    assert policy.evaluate(p, ctx) == "Allow"
    ctx.resolvers["s3:existingobjecttag/"] = {"team": "nlp"}.get
    assert policy.evaluate(p, ctx) is None


@pytest.mark.parametrize("doc", [
    "", "[]", "{", '{"Statement": []}', '{"Version": "2020-01-01", "Statement": {}}',
    json.dumps({"Statement": [_st(effect="allow")]}),
    json.dumps({"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}),
    json.dumps({"Statement": [_st(action="ec2:RunInstances")]}),
    json.dumps({"Statement": [_st(resource="arn:aws:s3:::other/*")]}),
    json.dumps({"Statement": [_st(Condition={"StringSorta": {"a": "b"}})]}),
    json.dumps({"Statement": [_st(Condition={"IpAddress": {"aws:SourceIp": "999.1.1.1"}})]}),
    json.dumps({"Statement": [{"Effect": "Allow", "NotPrincipal": "*", "Action": "s3:*", "Resource": "*"}]}),
    json.dumps({"Statement": [_st(Extra=1)]}),
    json.dumps({"Statement": [_st(resource="arn:aws:s3:::b/" + "x" * 21000)]}),
])
def test_malformed(doc):
    with pytest.raises(errors.MalformedPolicy):
        policy.parse(doc, "b")


def test_public():
    assert policy.is_public(_p(_st()))
    assert policy.is_public(_p(_st(principal={"AWS": ["x", "*"]})))
    assert not policy.is_public(_p(_st(principal={"AWS": "alt-id"})))
    assert not policy.is_public(_p(_st("Deny")))
    assert not policy.is_public(_p(_st(Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})))
    assert policy.is_public(_p(_st(Condition={"IpAddress": {"aws:SourceIp": "0.0.0.0/1"}})))
    assert not policy.is_public(_p(_st(Condition={"StringEquals": {"aws:SourceAccount": "123"}})))
    assert policy.is_public(_p(_st(Condition={"StringLike": {"aws:SourceAccount": "1*"}})))
    assert policy.is_public(_p(_st(Condition={"StringEquals": {"s3:prefix": "x"}})))


def test_service_principal_is_named_not_a_wildcard():
    """The logging service (a Service principal) is let in by its name only: not by "*", nor a user by its name."""
    logging = policy.Caller(service="logging.s3.amazonaws.com")
    p = _p(_st(principal={"Service": "logging.s3.amazonaws.com"}, action="s3:PutObject",
               resource="arn:aws:s3:::b/log/*", Condition={"StringEquals": {"aws:SourceAccount": "main-id"}}))
    assert policy.evaluate(p, _ctx(logging, "s3:PutObject", "log/x", **{"aws:SourceAccount": "main-id"})) == "Allow"
    assert policy.evaluate(p, _ctx(logging, "s3:PutObject", "log/x", **{"aws:SourceAccount": "alt-id"})) is None
    assert policy.evaluate(p, _ctx(policy.Caller("logging.s3.amazonaws.com"), "s3:PutObject", "log/x",
                                   **{"aws:SourceAccount": "main-id"})) is None  # a user id of that name is a user
    everyone = _p(_st(action="s3:PutObject"), _st(principal={"AWS": "*"}, action="s3:PutObject"))
    assert policy.evaluate(everyone, _ctx(logging, "s3:PutObject", "log/x")) is None
    assert not policy.is_public(p) and not logging.anonymous
