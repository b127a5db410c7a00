"""Bucket policies, policy status, public access block and ACL details against a live cluster (boto3, the aws CLI,
plain HTTP for anonymous callers, fsspec for the batch extension), with moto as an oracle for what it implements:
the policy documents it stores and answers, the status of a policy, the public access block's round trip."""
from __future__ import annotations

import json
import subprocess
import sys

import fsspec
import httpx
import pytest
from botocore.exceptions import ClientError
from cluster import ALT, MAIN
from test_s3_contract import moto_endpoint  # noqa: F401 (fixture: moto's server as an oracle)

pytestmark = pytest.mark.integration


def _code(fn, **kw) -> tuple[int, str]:
    with pytest.raises(ClientError) as e:
        fn(**kw)
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


def _policy(*statements) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _allow(action, resource, principal="*", **extra) -> dict:
    return {"Effect": "Allow", "Principal": principal, "Action": action, "Resource": resource, **extra}


def _deny(action, resource, principal="*", **extra) -> dict:
    return {"Effect": "Deny", "Principal": principal, "Action": action, "Resource": resource, **extra}


@pytest.fixture(scope="module")
def moto(moto_endpoint):
    """moto's server, an oracle for the policy and public access block calls it implements."""
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=moto_endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                        region_name="us-east-1", config=Config(retries={"max_attempts": 1}))


def _transcript(s3, bucket: str) -> list:
    """The same policy steps on any S3: what each answers (statuses, codes, documents, IsPublic)."""
    out = []

    def step(fn, **kw):
        try:
            r = fn(Bucket=bucket, **kw)
            r.pop("ResponseMetadata", None)
            out.append(("ok", r))
        except ClientError as e:
            out.append((e.response["ResponseMetadata"]["HTTPStatusCode"], e.response["Error"]["Code"]))

    public = _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/public/*"))
    pinned = _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*",
                            Condition={"IpAddress": {"aws:SourceIp": "10.1.2.0/24"}}))
    step(s3.get_bucket_policy)
    step(s3.put_bucket_policy, Policy=public)
    step(s3.get_bucket_policy)
    step(s3.get_bucket_policy_status)
    step(s3.put_bucket_policy, Policy=pinned)
    step(s3.get_bucket_policy_status)
    step(s3.delete_bucket_policy)
    step(s3.get_bucket_policy)
    step(s3.get_public_access_block)
    step(s3.put_public_access_block, PublicAccessBlockConfiguration={
        "BlockPublicAcls": True, "IgnorePublicAcls": False, "BlockPublicPolicy": True,
        "RestrictPublicBuckets": False})
    step(s3.get_public_access_block)
    step(s3.delete_public_access_block)
    step(s3.get_public_access_block)
    return out


def test_policy_calls_match_moto(cluster, s3, moto):
    s3.create_bucket(Bucket="pol-oracle")
    moto.create_bucket(Bucket="pol-oracle")
    ours, theirs = _transcript(s3, "pol-oracle"), _transcript(moto, "pol-oracle")
    status = (3, 5)  # moto answers GetBucketPolicyStatus with an empty PolicyStatus: checked on epochfs only
    assert [x for i, x in enumerate(ours) if i not in status] == [x for i, x in enumerate(theirs) if i not in status]
    # what it says: a policy for everyone is public, one pinned to a /24 is not
    assert ours[3] == ("ok", {"PolicyStatus": {"IsPublic": True}})
    assert ours[5] == ("ok", {"PolicyStatus": {"IsPublic": False}})
    assert ours[0] == ours[7] == (404, "NoSuchBucketPolicy")
    # without a policy the status is the ACL's (moto: 404); a public ACL makes the bucket public
    assert s3.get_bucket_policy_status(Bucket="pol-oracle")["PolicyStatus"]["IsPublic"] is False
    s3.put_bucket_acl(Bucket="pol-oracle", ACL="authenticated-read")
    assert s3.get_bucket_policy_status(Bucket="pol-oracle")["PolicyStatus"]["IsPublic"] is True
    assert ours[8] == ours[12] == (404, "NoSuchPublicAccessBlockConfiguration")


def test_malformed_policy_changes_nothing(cluster, s3, bucket):
    good = _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*"))
    s3.put_bucket_policy(Bucket=bucket, Policy=good)
    for bad in ("{not json", json.dumps({"Statement": []}), json.dumps([1]),
                _policy({"Effect": "Maybe", "Principal": "*", "Action": "s3:GetObject",
                         "Resource": f"arn:aws:s3:::{bucket}/*"}),
                _policy(_allow("s3:GetObject", "arn:aws:s3:::another-bucket/*")),  # not this bucket
                _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*",
                               Condition={"StringMaybe": {"s3:prefix": "x"}})),
                _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*",
                               Condition={"IpAddress": {"aws:SourceIp": "not-an-ip"}})),
                _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*" + "x" * 21000))):
        assert _code(s3.put_bucket_policy, Bucket=bucket, Policy=bad) == (400, "MalformedPolicy"), bad[:80]
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(good)
    # only the owner sees or changes the policy
    alt = cluster.s3(ALT)
    assert _code(alt.get_bucket_policy, Bucket=bucket) == (403, "AccessDenied")
    assert _code(alt.put_bucket_policy, Bucket=bucket, Policy=good) == (403, "AccessDenied")
    assert _code(alt.delete_bucket_policy, Bucket=bucket) == (403, "AccessDenied")


def test_read_only_prefix_for_another_user(cluster, s3, bucket):
    """The training-job case: alt may list and read train/ and nothing else, without a key of its own."""
    for k in ("train/a", "train/b", "eval/c"):
        s3.put_object(Bucket=bucket, Key=k, Body=k.encode())
    alt = cluster.s3(ALT)
    assert _code(alt.get_object, Bucket=bucket, Key="train/a") == (403, "AccessDenied")
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:GetObject", f"arn:aws:s3:::{bucket}/train/*", {"AWS": [f"arn:aws:iam::{ALT[2]}:root"]}),
        _allow("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"AWS": ALT[2]},
               Condition={"StringLike": {"s3:prefix": ["train/*"]}})))
    assert alt.get_object(Bucket=bucket, Key="train/a")["Body"].read() == b"train/a"
    assert [o["Key"] for o in alt.list_objects_v2(Bucket=bucket, Prefix="train/")["Contents"]] == \
        ["train/a", "train/b"]
    assert _code(alt.list_objects_v2, Bucket=bucket, Prefix="eval/") == (403, "AccessDenied")
    assert _code(alt.list_objects_v2, Bucket=bucket) == (403, "AccessDenied")  # no s3:prefix: the condition fails
    assert _code(alt.get_object, Bucket=bucket, Key="eval/c") == (403, "AccessDenied")
    assert _code(alt.put_object, Bucket=bucket, Key="train/x", Body=b"x") == (403, "AccessDenied")
    assert _code(alt.delete_object, Bucket=bucket, Key="train/a") == (403, "AccessDenied")
    # a key that doesn't exist: alt may list train/ (the key is the prefix s3:prefix is matched against), so it
    # learns the key is missing; elsewhere it learns nothing
    assert _code(alt.get_object, Bucket=bucket, Key="train/missing") == (404, "NoSuchKey")
    assert _code(alt.head_object, Bucket=bucket, Key="eval/missing")[0] == 403
    # presigned URLs carry the signer's rights, policy included
    url = alt.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "train/b"})
    assert httpx.get(url).content == b"train/b"
    url = alt.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "eval/c"})
    assert httpx.get(url).status_code == 403
    # the batch extension (fsspec's cat) checks each key the same way
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=ALT[0], secret=ALT[1],
                           skip_instance_cache=True, direct_reads=False)
    got = fs.cat([f"{bucket}/train/a", f"{bucket}/eval/c"], on_error="return")
    assert got[f"{bucket}/train/a"] == b"train/a"
    assert isinstance(got[f"{bucket}/eval/c"], PermissionError)
    fs = fsspec.filesystem("epochfs", endpoint_url=cluster.endpoint, key=ALT[0], secret=ALT[1],
                           skip_instance_cache=True, direct_reads=True)  # /locate, then the DataNodes
    got = fs.cat([f"{bucket}/train/b", f"{bucket}/eval/c"], on_error="return")
    assert got[f"{bucket}/train/b"] == b"train/b"
    assert isinstance(got[f"{bucket}/eval/c"], PermissionError)


def test_explicit_deny_wins_over_owner_and_acl(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="keep/model.pt", Body=b"w", ACL="public-read")
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _deny(["s3:DeleteObject", "s3:PutObject"], f"arn:aws:s3:::{bucket}/keep/*"),
        _deny("s3:GetObject", f"arn:aws:s3:::{bucket}/keep/*", Condition={"Bool": {"aws:SecureTransport": "false"},
                                                                           "StringEquals": {"aws:username": "alt"}})))
    assert _code(s3.delete_object, Bucket=bucket, Key="keep/model.pt") == (403, "AccessDenied")
    assert _code(s3.put_object, Bucket=bucket, Key="keep/other", Body=b"x") == (403, "AccessDenied")
    r = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "keep/model.pt"}, {"Key": "free"}]})
    assert [e["Code"] for e in r["Errors"]] == ["AccessDenied"] and [d["Key"] for d in r["Deleted"]] == ["free"]
    s3.put_object(Bucket=bucket, Key="other", Body=b"fine")  # outside keep/: allowed as before
    # the public-read ACL still lets anonymous callers in, but not alt (denied by name over plain HTTP)
    assert httpx.get(f"{cluster.endpoint}/{bucket}/keep/model.pt").content == b"w"
    assert _code(cluster.s3(ALT).get_object, Bucket=bucket, Key="keep/model.pt") == (403, "AccessDenied")
    # the owner can always take the policy back
    s3.delete_bucket_policy(Bucket=bucket)
    s3.delete_object(Bucket=bucket, Key="keep/model.pt")


def test_owner_locked_out_except_policy_calls(cluster, s3, bucket):
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(_deny("s3:*", [f"arn:aws:s3:::{bucket}",
                                                                      f"arn:aws:s3:::{bucket}/*"])))
    assert _code(s3.list_objects_v2, Bucket=bucket) == (403, "AccessDenied")
    assert _code(s3.put_object, Bucket=bucket, Key="k", Body=b"x") == (403, "AccessDenied")
    assert _code(s3.get_bucket_acl, Bucket=bucket) == (403, "AccessDenied")
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])["Statement"][0]["Effect"] == "Deny"
    s3.delete_bucket_policy(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")


def test_conditions(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="data", Body=b"d")
    alt = cluster.s3(ALT)
    # from loopback: an allow for 127.0.0.0/8 applies, one for 10.0.0.0/8 doesn't
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*", {"AWS": ALT[2]},
               Condition={"IpAddress": {"aws:SourceIp": ["10.0.0.0/8", "127.0.0.0/8"]}})))
    assert alt.get_object(Bucket=bucket, Key="data")["Body"].read() == b"d"
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*", {"AWS": ALT[2]},
               Condition={"NotIpAddress": {"aws:SourceIp": "127.0.0.0/8"}})))
    assert _code(alt.get_object, Bucket=bucket, Key="data") == (403, "AccessDenied")
    # numeric and IfExists: at most 10 keys per listing page; a listing without max-keys is fine (IfExists)
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:ListBucket", f"arn:aws:s3:::{bucket}", {"AWS": ALT[2]},
               Condition={"NumericLessThanEqualsIfExists": {"s3:max-keys": "10"}})))
    assert alt.list_objects(Bucket=bucket, MaxKeys=5)["Contents"][0]["Key"] == "data"
    assert _code(alt.list_objects, Bucket=bucket, MaxKeys=500) == (403, "AccessDenied")
    # writes only with a given canned ACL (s3:x-amz-acl), and a date window that has not begun
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:PutObject", f"arn:aws:s3:::{bucket}/up/*", {"AWS": ALT[2]},
               Condition={"StringEquals": {"s3:x-amz-acl": "bucket-owner-full-control"}}),
        _allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*", {"AWS": ALT[2]},
               Condition={"DateGreaterThan": {"aws:CurrentTime": "2999-01-01T00:00:00Z"}})))
    assert _code(alt.put_object, Bucket=bucket, Key="up/a", Body=b"a") == (403, "AccessDenied")
    alt.put_object(Bucket=bucket, Key="up/a", Body=b"a", ACL="bucket-owner-full-control")
    assert _code(alt.get_object, Bucket=bucket, Key="data") == (403, "AccessDenied")
    # NotPrincipal goes with Deny only: everyone but main is denied, main (the owner) still reads
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:GetObject", f"arn:aws:s3:::{bucket}/data"),
        {"Effect": "Deny", "NotPrincipal": {"AWS": MAIN[2]}, "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{bucket}/data"}))
    assert httpx.get(f"{cluster.endpoint}/{bucket}/data").status_code == 403
    assert _code(alt.get_object, Bucket=bucket, Key="data") == (403, "AccessDenied")
    assert s3.get_object(Bucket=bucket, Key="data")["Body"].read() == b"d"
    allow_not = _policy({"Effect": "Allow", "NotPrincipal": {"AWS": MAIN[2]}, "Action": "s3:GetObject",
                         "Resource": f"arn:aws:s3:::{bucket}/data"})
    assert _code(s3.put_bucket_policy, Bucket=bucket, Policy=allow_not) == (400, "MalformedPolicy")


def test_post_upload_follows_policy(cluster, s3, bucket):
    alt = cluster.s3(ALT)
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow("s3:PutObject", f"arn:aws:s3:::{bucket}/inbox/*", {"AWS": ALT[2]})))
    for key, status in (("inbox/a.txt", 204), ("elsewhere.txt", 403)):
        post = alt.generate_presigned_post(bucket, key)
        r = httpx.post(post["url"], data=post["fields"], files={"file": ("f", b"hello")})
        assert r.status_code == status, r.text
    assert s3.get_object(Bucket=bucket, Key="inbox/a.txt")["Body"].read() == b"hello"
    assert _code(s3.head_object, Bucket=bucket, Key="elsewhere.txt")[0] == 404


def test_public_access_block(cluster, s3, bucket):
    url = f"{cluster.endpoint}/{bucket}"
    s3.put_object(Bucket=bucket, Key="pub", Body=b"p", ACL="public-read")
    assert httpx.get(f"{url}/pub").status_code == 200
    pab = {"BlockPublicAcls": False, "IgnorePublicAcls": True, "BlockPublicPolicy": False,
           "RestrictPublicBuckets": False}
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration=pab)
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == pab
    assert httpx.get(f"{url}/pub").status_code == 403  # the public ACL is ignored
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={**pab, "IgnorePublicAcls": False,
                                                                              "BlockPublicAcls": True})
    assert httpx.get(f"{url}/pub").status_code == 200
    assert _code(s3.put_object, Bucket=bucket, Key="p2", Body=b"x", ACL="public-read") == (403, "AccessDenied")
    assert _code(s3.head_object, Bucket=bucket, Key="p2")[0] == 404
    assert _code(s3.put_bucket_acl, Bucket=bucket, ACL="public-read-write") == (403, "AccessDenied")
    assert _code(s3.put_object_acl, Bucket=bucket, Key="pub", ACL="authenticated-read") == (403, "AccessDenied")
    s3.put_object(Bucket=bucket, Key="p3", Body=b"x", ACL="private")
    # BlockPublicPolicy: a public policy is refused, one pinned to an account is fine
    public = _policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*"))
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={**pab, "BlockPublicPolicy": True,
                                                                              "IgnorePublicAcls": False})
    assert _code(s3.put_bucket_policy, Bucket=bucket, Policy=public) == (403, "AccessDenied")
    assert _code(s3.get_bucket_policy, Bucket=bucket) == (404, "NoSuchBucketPolicy")
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*",
                                                              {"AWS": ALT[2]})))
    # RestrictPublicBuckets: a public policy set before no longer lets anonymous callers in
    s3.delete_public_access_block(Bucket=bucket)
    s3.put_bucket_policy(Bucket=bucket, Policy=public)
    assert httpx.get(f"{url}/p3").status_code == 200
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={**pab, "IgnorePublicAcls": False,
                                                                              "RestrictPublicBuckets": True})
    assert httpx.get(f"{url}/p3").status_code == 403
    assert s3.get_object(Bucket=bucket, Key="p3")["Body"].read() == b"x"  # the owner still reads
    s3.delete_public_access_block(Bucket=bucket)
    assert _code(s3.get_public_access_block, Bucket=bucket) == (404, "NoSuchPublicAccessBlockConfiguration")


def _grants(acl: dict) -> list[tuple[str, str]]:
    return [(g["Grantee"].get("ID") or g["Grantee"].get("URI"), g["Permission"]) for g in acl["Grants"]]


def test_acl_details(cluster, s3, bucket):
    alt = cluster.s3(ALT)
    all_users = "http://acs.amazonaws.com/groups/global/AllUsers"
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    # a canned ACL: its group grants, then the owner's (as the ceph suite, run against AWS, expects)
    assert _grants(s3.get_bucket_acl(Bucket=bucket)) == [(all_users, "READ"), (MAIN[2], "FULL_CONTROL")]
    # header grants: exactly those, in S3's order, no owner grant added
    s3.put_bucket_acl(Bucket=bucket, GrantRead=f"id={ALT[2]}", GrantReadACP=f'emailAddress="{ALT[4]}"')
    assert _grants(s3.get_bucket_acl(Bucket=bucket)) == [(ALT[2], "READ"), (ALT[2], "READ_ACP")]
    assert s3.get_bucket_acl(Bucket=bucket)["Owner"]["ID"] == MAIN[2]
    # READ_ACP lets alt read the ACL, not change it; list works by READ
    assert _grants(alt.get_bucket_acl(Bucket=bucket)) == [(ALT[2], "READ"), (ALT[2], "READ_ACP")]
    assert _code(alt.put_bucket_acl, Bucket=bucket, ACL="private") == (403, "AccessDenied")
    alt.list_objects_v2(Bucket=bucket)
    # an explicit AccessControlPolicy comes back as sent
    policy = {"Owner": {"ID": MAIN[2]}, "Grants": [
        {"Grantee": {"Type": "Group", "URI": all_users}, "Permission": "READ"},
        {"Grantee": {"Type": "CanonicalUser", "ID": ALT[2]}, "Permission": "WRITE_ACP"},
        {"Grantee": {"Type": "AmazonCustomerByEmail", "EmailAddress": MAIN[4]}, "Permission": "FULL_CONTROL"}]}
    s3.put_bucket_acl(Bucket=bucket, AccessControlPolicy=policy)
    assert _grants(s3.get_bucket_acl(Bucket=bucket)) == [(all_users, "READ"), (ALT[2], "WRITE_ACP"),
                                                         (MAIN[2], "FULL_CONTROL")]
    alt.put_bucket_acl(Bucket=bucket, ACL="private")  # WRITE_ACP
    assert _grants(s3.get_bucket_acl(Bucket=bucket)) == [(MAIN[2], "FULL_CONTROL")]
    # unknown users and addresses are refused, and nothing changes
    assert _code(s3.put_bucket_acl, Bucket=bucket, GrantRead="id=no-such-user") == (400, "InvalidArgument")
    assert _code(s3.put_bucket_acl, Bucket=bucket, GrantRead='emailAddress="nobody@example.com"') == \
        (400, "UnresolvableGrantByEmailAddress")
    assert _grants(s3.get_bucket_acl(Bucket=bucket)) == [(MAIN[2], "FULL_CONTROL")]
    # object ACLs: READ_ACP / WRITE_ACP / FULL_CONTROL honoured
    s3.put_object(Bucket=bucket, Key="o", Body=b"o", GrantReadACP=f"id={ALT[2]}")
    assert _grants(alt.get_object_acl(Bucket=bucket, Key="o")) == [(ALT[2], "READ_ACP")]
    assert _code(alt.get_object, Bucket=bucket, Key="o") == (403, "AccessDenied")
    assert _code(alt.put_object_acl, Bucket=bucket, Key="o", ACL="public-read") == (403, "AccessDenied")
    s3.put_object_acl(Bucket=bucket, Key="o", GrantFullControl=f"id={ALT[2]}")
    assert alt.get_object(Bucket=bucket, Key="o")["Body"].read() == b"o"
    alt.put_object_acl(Bucket=bucket, Key="o", ACL="public-read")
    assert _grants(s3.get_object_acl(Bucket=bucket, Key="o")) == [(all_users, "READ"), (MAIN[2], "FULL_CONTROL")]
    # bucket-owner-full-control from another writer: both listed
    s3.put_bucket_acl(Bucket=bucket, GrantWrite=f"id={ALT[2]}")
    alt.put_object(Bucket=bucket, Key="from-alt", Body=b"a", ACL="bucket-owner-full-control")
    assert _grants(s3.get_object_acl(Bucket=bucket, Key="from-alt")) == [(ALT[2], "FULL_CONTROL"),
                                                                        (MAIN[2], "FULL_CONTROL")]
    assert s3.get_object(Bucket=bucket, Key="from-alt")["Body"].read() == b"a"


def test_expected_owner_metadata_and_encoding(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert _code(s3.list_objects_v2, Bucket=bucket, ExpectedBucketOwner=ALT[2]) == (403, "AccessDenied")
    assert _code(s3.put_object, Bucket=bucket, Key="k2", Body=b"v", ExpectedBucketOwner=ALT[2]) == \
        (403, "AccessDenied")
    assert s3.list_objects_v2(Bucket=bucket, ExpectedBucketOwner=MAIN[2])["KeyCount"] == 1
    assert _code(s3.copy_object, Bucket=bucket, Key="k3", CopySource=f"{bucket}/k",
                 ExpectedSourceBucketOwner=ALT[2]) == (403, "AccessDenied")
    # a non-ASCII metadata value, sent as the raw header byte (latin-1), signed and read back as sent
    s3.meta.events.register("before-call.s3.PutObject",
                            lambda params, **kw: params["headers"].__setitem__("x-amz-meta-meta1", "Hello World\xe9"))
    try:
        s3.put_object(Bucket=bucket, Key="uni", Body=b"u")
    finally:
        s3.meta.events.unregister("before-call.s3.PutObject")
    assert s3.get_object(Bucket=bucket, Key="uni")["Metadata"]["meta1"] == "Hello World\xe9"
    for sent, kept in (("gzip", "gzip"), ("deflate, gzip", "deflate, gzip"), ("gzip, aws-chunked", "gzip"),
                       ("aws-chunked, gzip", "gzip"), ("aws-chunked", None)):
        s3.put_object(Bucket=bucket, Key="enc", Body=b"e", ContentEncoding=sent)
        assert s3.head_object(Bucket=bucket, Key="enc").get("ContentEncoding") == kept


def test_aws_cli_and_admin(cluster, s3, bucket, tmp_path):
    env = {"AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0], "AWS_SECRET_ACCESS_KEY": MAIN[1],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "PATH": "/usr/bin:/bin", "COLUMNS": "300"}

    def run(*args, ok=True):
        p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert (p.returncode == 0) == ok, p.stderr
        return p.stdout + p.stderr
    doc = tmp_path / "policy.json"
    doc.write_text(_policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/pub/*")))
    aws = (sys.executable, "-m", "awscli", "s3api")
    run(*aws, "put-bucket-policy", "--bucket", bucket, "--policy", f"file://{doc}")
    assert json.loads(json.loads(run(*aws, "get-bucket-policy", "--bucket", bucket))["Policy"]) == \
        json.loads(doc.read_text())
    assert json.loads(run(*aws, "get-bucket-policy-status", "--bucket", bucket))["PolicyStatus"]["IsPublic"]
    assert "MalformedPolicy" in run(*aws, "put-bucket-policy", "--bucket", bucket, "--policy", "{", ok=False)
    # the admin API and CLI show and set it
    epochfs = (sys.executable, "-m", "epochfs.frontends.cli.main", "admin")
    assert json.loads(run(*epochfs, "buckets", "policy", bucket)) == json.loads(doc.read_text())
    assert "public" in run(*epochfs, "buckets")
    doc.write_text(_policy(_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*", {"AWS": ALT[2]})))
    run(*epochfs, "buckets", "policy", bucket, "--set", str(doc))
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(doc.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"Statement": [{"Effect": "Allow"}]}))
    assert "400" in run(*epochfs, "buckets", "policy", bucket, "--set", str(bad), ok=False)
    assert json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"]) == json.loads(doc.read_text())
    run(*epochfs, "buckets", "policy", bucket, "--delete")
    assert _code(s3.get_bucket_policy, Bucket=bucket) == (404, "NoSuchBucketPolicy")
    r = httpx.put(f"{cluster.endpoint}/admin/v1/buckets/{bucket}/policy", auth=(MAIN[0], MAIN[1]),
                  json={"Statement": [_allow("s3:GetObject", f"arn:aws:s3:::{bucket}/*")]})
    assert r.status_code == 200 and r.json()["policy_public"] is True
    r = httpx.put(f"{cluster.endpoint}/admin/v1/buckets/{bucket}/policy", auth=(MAIN[0], MAIN[1]), content=b"{")
    assert r.status_code == 400
    assert httpx.get(f"{cluster.endpoint}/admin/v1/buckets/{bucket}", auth=(MAIN[0], MAIN[1])).json()["policy_public"]


def test_object_tag_conditions(cluster, s3, bucket):
    """s3:ExistingObjectTag/<key> (the object's tags: GetObject, GetObjectTagging, PutObjectTagging) and
    s3:RequestObjectTag/<key> (x-amz-tagging of a PutObject), as ceph/s3-tests' test_bucket_policy_*_existing_tag
    and test_bucket_policy_put_obj_request_obj_tag check them."""
    alt = cluster.s3(ALT)
    s3.put_object(Bucket=bucket, Key="pub", Body=b"p", Tagging="security=public")
    s3.put_object(Bucket=bucket, Key="priv", Body=b"q", Tagging="security=private")
    s3.put_object(Bucket=bucket, Key="none", Body=b"n")
    public = {"StringEquals": {"s3:ExistingObjectTag/security": "public"}}
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(
        _allow(["s3:GetObject", "s3:GetObjectTagging", "s3:PutObjectTagging"], f"arn:aws:s3:::{bucket}/*",
               {"AWS": ALT[2]}, Condition=public),
        _allow("s3:PutObject", f"arn:aws:s3:::{bucket}/up/*", {"AWS": ALT[2]},
               Condition={"StringEquals": {"s3:RequestObjectTag/security": "public"}})))
    assert alt.get_object(Bucket=bucket, Key="pub")["Body"].read() == b"p"
    assert alt.get_object_tagging(Bucket=bucket, Key="pub")["TagSet"] == [{"Key": "security", "Value": "public"}]
    for key in ("priv", "none"):
        assert _code(alt.get_object, Bucket=bucket, Key=key) == (403, "AccessDenied")
        assert _code(alt.get_object_tagging, Bucket=bucket, Key=key) == (403, "AccessDenied")
        assert _code(alt.put_object_tagging, Bucket=bucket, Key=key,
                     Tagging={"TagSet": [{"Key": "security", "Value": "public"}]}) == (403, "AccessDenied")
    # retagging is decided on the tags the object has: once private, the next retag is refused
    alt.put_object_tagging(Bucket=bucket, Key="pub", Tagging={"TagSet": [{"Key": "security", "Value": "private"}]})
    assert _code(alt.put_object_tagging, Bucket=bucket, Key="pub",
                 Tagging={"TagSet": [{"Key": "security", "Value": "public"}]}) == (403, "AccessDenied")
    assert _code(alt.get_object, Bucket=bucket, Key="pub") == (403, "AccessDenied")
    # a PUT is allowed only with the tag the policy asks for
    alt.put_object(Bucket=bucket, Key="up/a", Body=b"a", Tagging="security=public")
    assert _code(alt.put_object, Bucket=bucket, Key="up/b", Body=b"b", Tagging="security=private") == \
        (403, "AccessDenied")
    assert _code(alt.put_object, Bucket=bucket, Key="up/c", Body=b"c") == (403, "AccessDenied")
    assert s3.get_object_tagging(Bucket=bucket, Key="up/a")["TagSet"] == [{"Key": "security", "Value": "public"}]


def _tagging_doc(**tags) -> str:
    return "<Tagging><TagSet>" + "".join(f"<Tag><Key>{k}</Key><Value>{v}</Value></Tag>" for k, v in tags.items()) + \
        "</TagSet></Tagging>"


def test_request_object_tag_from_the_body_and_the_post_form(cluster, s3, bucket):
    """s3:RequestObjectTag/<key> and s3:RequestObjectTagKeys come from the tags the request sets wherever it sets
    them: PutObjectTagging's body and a POST form's tagging field, not only x-amz-tagging; a request the condition
    refuses changes nothing, and AccessDenied comes before a malformed tag set's error."""
    import requests
    alt = cluster.s3(ALT)
    s3.put_object(Bucket=bucket, Key="obj", Body=b"o")
    s3.put_bucket_policy(Bucket=bucket, Policy=_policy(_allow(
        ["s3:PutObjectTagging", "s3:PutObject"], f"arn:aws:s3:::{bucket}/*", {"AWS": ALT[2]}, Condition={
            "StringEquals": {"s3:RequestObjectTag/security": "public"},
            "ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["security", "team"]}})))
    alt.put_object_tagging(Bucket=bucket, Key="obj", Tagging={"TagSet": [{"Key": "security", "Value": "public"},
                                                                         {"Key": "team", "Value": "a"}]})
    for tags in ([{"Key": "security", "Value": "private"}],
                 [{"Key": "security", "Value": "public"}, {"Key": "owner", "Value": "x"}]):
        assert _code(alt.put_object_tagging, Bucket=bucket, Key="obj", Tagging={"TagSet": tags}) == \
            (403, "AccessDenied")
    assert s3.get_object_tagging(Bucket=bucket, Key="obj")["TagSet"] == [
        {"Key": "security", "Value": "public"}, {"Key": "team", "Value": "a"}]
    s3.put_object_tagging(Bucket=bucket, Key="obj", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})  # the owner
    with pytest.raises(ClientError) as e:  # the owner's malformed tag set: its own error
        s3.put_object_tagging(Bucket=bucket, Key="obj", Tagging={"TagSet": [{"Key": "k" * 200, "Value": "v"}]})
    assert e.value.response["Error"]["Code"] == "InvalidTag"

    def post(key: str, doc: str) -> requests.Response:
        form = alt.generate_presigned_post(bucket, key, Fields={"tagging": doc}, Conditions=[{"tagging": doc}])
        return requests.post(form["url"], data=form["fields"], files={"file": ("f", b"posted")}, timeout=30)
    assert post("form-ok", _tagging_doc(security="public")).status_code == 204
    assert s3.get_object_tagging(Bucket=bucket, Key="form-ok")["TagSet"] == [{"Key": "security", "Value": "public"}]
    r = post("form-no", _tagging_doc(security="private"))
    assert r.status_code == 403 and b"AccessDenied" in r.content
    assert _code(s3.head_object, Bucket=bucket, Key="form-no")[0] == 404
