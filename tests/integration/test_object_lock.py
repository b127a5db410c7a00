"""Object lock: bucket configuration, retention and legal hold, as AWS documents them, compared with moto where
moto implements them; enforcement on every path that removes or rewrites a version (DeleteObject with a version id,
DeleteObjects, the mount's unlink, rename and truncate), and the aws CLI."""
from __future__ import annotations

import datetime as dt
import errno
import json
import os
import uuid

import pytest
from botocore.exceptions import ClientError
from cluster import MAIN
from test_aws_cli import aws  # noqa: F401  (fixture)
from test_s3_contract import Transcript, moto_endpoint, run_both, targets  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration

UTC = dt.timezone.utc
FAR = dt.datetime(2031, 1, 1, tzinfo=UTC)
GOV = {"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}}


def code(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


def lock_bucket(s3) -> str:
    name = f"l-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    return name


# ---------------------------------------------------------------- the same scenario on moto and on epochfs
def sc_object_lock(t: Transcript) -> None:
    t("create", "create_bucket", ObjectLockEnabledForBucket=True)
    t("versioning on", "get_bucket_versioning", keep=("Status",))
    t("config", "get_object_lock_configuration", keep=("ObjectLockConfiguration",))
    t("put config", "put_object_lock_configuration", ObjectLockConfiguration=GOV)
    t("config again", "get_object_lock_configuration", keep=("ObjectLockConfiguration",),
      s3={"status": 200, "ObjectLockConfiguration": GOV})  # moto adds "Years": 0
    t("suspend", "put_bucket_versioning", VersioningConfiguration={"Status": "Suspended"},
      s3=(409, "InvalidBucketState"), moto_skip=True)  # moto lets a lock bucket's versioning be suspended
    r = t("put (default retention)", "put_object", Key="k", Body=b"v1", keep=())
    v1 = r["VersionId"]
    t("head", "head_object", Key="k", shape=lambda r: {"mode": r.get("ObjectLockMode"),
                                                       "has_date": "ObjectLockRetainUntilDate" in r})
    t("delete locked version", "delete_object", Key="k", VersionId=v1)
    t("retention", "put_object_retention", Key="k", VersionId=v1,
      Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    t("get retention", "get_object_retention", Key="k", VersionId=v1, keep=("Retention",),
      s3={"status": 200, "Retention": {"Mode": "GOVERNANCE", "RetainUntilDate": FAR.isoformat()}})  # moto: 500
    t("legal hold", "put_object_legal_hold", Key="k", VersionId=v1, LegalHold={"Status": "ON"})
    t("get legal hold", "get_object_legal_hold", Key="k", VersionId=v1, keep=("LegalHold",))
    t("bypass does not lift a legal hold", "delete_object", Key="k", VersionId=v1, BypassGovernanceRetention=True)
    t("hold off", "put_object_legal_hold", Key="k", VersionId=v1, LegalHold={"Status": "OFF"})
    t("delete without version: a marker", "delete_object", Key="k", keep=("DeleteMarker",))
    t("bypass governance", "delete_object", Key="k", VersionId=v1, BypassGovernanceRetention=True)
    t("gone", "get_object", Key="k", VersionId=v1)


def test_object_lock_matches_moto(targets):  # noqa: F811
    run_both(targets, sc_object_lock)


def sc_lock_on_plain_bucket(t: Transcript) -> None:
    t("create", "create_bucket")
    t("put", "put_object", Key="k", Body=b"x")
    t("no config", "get_object_lock_configuration")
    t("retention", "put_object_retention", Key="k", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR},
      s3=(400, "InvalidRequest"), moto_skip=True)  # moto stores it
    t("lock config on an unversioned bucket", "put_object_lock_configuration", ObjectLockConfiguration=GOV,
      s3=(409, "InvalidBucketState"), moto_skip=True)  # moto accepts it
    t("legal hold", "put_object_legal_hold", Key="k", LegalHold={"Status": "ON"},
      s3=(400, "InvalidRequest"), moto_skip=True)  # moto stores it


def test_lock_needs_a_lock_bucket_as_moto(targets):  # noqa: F811
    run_both(targets, sc_lock_on_plain_bucket)


# ---------------------------------------------------------------- AWS's rules, on epochfs
def test_retention_rules(s3):
    b = lock_bucket(s3)
    v = s3.put_object(Bucket=b, Key="k", Body=b"x")["VersionId"]
    s3.put_object_retention(Bucket=b, Key="k", Retention={"Mode": "GOVERNANCE", "RetainUntilDate": FAR})
    shorter = {"Mode": "GOVERNANCE", "RetainUntilDate": FAR - dt.timedelta(days=1)}
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=b, Key="k", Retention=shorter)
    assert code(e) == (403, "AccessDenied")
    s3.put_object_retention(Bucket=b, Key="k", Retention=shorter, BypassGovernanceRetention=True)
    assert s3.get_object_retention(Bucket=b, Key="k")["Retention"] == shorter
    # a date in the past, a bad mode, a malformed document: refused, nothing changed
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=b, Key="k", BypassGovernanceRetention=True, Retention={
            "Mode": "GOVERNANCE", "RetainUntilDate": dt.datetime(2020, 1, 1, tzinfo=UTC)})
    assert code(e) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as e:
        s3.put_object_retention(Bucket=b, Key="k", Retention={"Mode": "governance", "RetainUntilDate": FAR})
    assert code(e) == (400, "MalformedXML")
    assert s3.get_object_retention(Bucket=b, Key="k")["Retention"] == shorter
    # COMPLIANCE: extend only, never shorten, change or remove, bypass or not
    s3.put_object_retention(Bucket=b, Key="k", Retention={"Mode": "COMPLIANCE", "RetainUntilDate": FAR},
                            BypassGovernanceRetention=True)
    for ret in ({"Mode": "GOVERNANCE", "RetainUntilDate": FAR}, {"Mode": "COMPLIANCE", "RetainUntilDate": shorter[
            "RetainUntilDate"]}):
        with pytest.raises(ClientError) as e:
            s3.put_object_retention(Bucket=b, Key="k", Retention=ret, BypassGovernanceRetention=True)
        assert code(e) == (403, "AccessDenied")
    s3.put_object_retention(Bucket=b, Key="k", Retention={"Mode": "COMPLIANCE",
                                                          "RetainUntilDate": FAR + dt.timedelta(days=1)})
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="k", VersionId=v, BypassGovernanceRetention=True)
    assert code(e) == (403, "AccessDenied")
    # DeleteObjects: the locked version is an AccessDenied item, the others go
    v2 = s3.put_object(Bucket=b, Key="free", Body=b"y")["VersionId"]
    r = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "k", "VersionId": v},
                                                        {"Key": "free", "VersionId": v2}]})
    assert [(x["Key"], x["VersionId"]) for x in r["Deleted"]] == [("free", v2)]
    assert [(x["Key"], x["VersionId"], x["Code"]) for x in r["Errors"]] == [("k", v, "AccessDenied")]
    assert s3.get_object(Bucket=b, Key="k", VersionId=v)["Body"].read() == b"x"


def test_lock_headers_on_put_copy_multipart_and_get(s3):
    b = lock_bucket(s3)
    s3.put_object(Bucket=b, Key="src", Body=b"abc", ObjectLockMode="GOVERNANCE", ObjectLockRetainUntilDate=FAR,
                  ObjectLockLegalHoldStatus="ON")
    h = s3.head_object(Bucket=b, Key="src")
    assert (h["ObjectLockMode"], h["ObjectLockRetainUntilDate"], h["ObjectLockLegalHoldStatus"]) == \
        ("GOVERNANCE", FAR, "ON")
    g = s3.get_object(Bucket=b, Key="src")
    assert g["ObjectLockMode"] == "GOVERNANCE" and g["ObjectLockLegalHoldStatus"] == "ON"
    # a copy gets its own lock headers, not the source's
    s3.copy_object(Bucket=b, Key="copy", CopySource=f"{b}/src", ObjectLockMode="COMPLIANCE",
                   ObjectLockRetainUntilDate=FAR)
    h = s3.head_object(Bucket=b, Key="copy")
    assert h["ObjectLockMode"] == "COMPLIANCE" and "ObjectLockLegalHoldStatus" not in h
    up = s3.create_multipart_upload(Bucket=b, Key="mp", ObjectLockLegalHoldStatus="ON")["UploadId"]
    etag = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"part")["ETag"]
    vid = s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"ETag": etag, "PartNumber": 1}]})["VersionId"]
    assert s3.get_object_legal_hold(Bucket=b, Key="mp")["LegalHold"] == {"Status": "ON"}
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=b, Key="mp", VersionId=vid, BypassGovernanceRetention=True)
    assert code(e) == (403, "AccessDenied")
    # bad headers: refused before anything is stored
    for kw in ({"ObjectLockMode": "GOVERNANCE"}, {"ObjectLockLegalHoldStatus": "MAYBE"},
               {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": dt.datetime(2001, 1, 1, tzinfo=UTC)}):
        with pytest.raises(ClientError) as e:
            s3.put_object(Bucket=b, Key="bad", Body=b"x", **kw)
        assert code(e) == (400, "InvalidArgument"), kw
    assert "Versions" not in s3.list_object_versions(Bucket=b, Prefix="bad")
    # headers into a bucket without object lock: InvalidRequest
    plain = f"p-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=plain)
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=plain, Key="k", Body=b"x", ObjectLockLegalHoldStatus="ON")
    assert code(e) == (400, "InvalidRequest")


def test_lock_configuration_errors(s3):
    b = lock_bucket(s3)
    for rule, want in (({"Mode": "GOVERNANCE", "Days": 1, "Years": 1}, (400, "MalformedXML")),
                       ({"Mode": "GOVERNANCE", "Days": 0}, (400, "InvalidRetentionPeriod")),
                       ({"Mode": "GOVERNANCE", "Years": -1}, (400, "InvalidRetentionPeriod")),
                       ({"Mode": "governance", "Years": 1}, (400, "MalformedXML"))):
        with pytest.raises(ClientError) as e:
            s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": rule}})
        assert code(e) == want, rule
    assert s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"] == {"ObjectLockEnabled": "Enabled"}
    plain = f"p-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=plain)
    with pytest.raises(ClientError) as e:
        s3.get_object_lock_configuration(Bucket=plain)
    assert code(e) == (404, "ObjectLockConfigurationNotFoundError")
    # enabling it on an existing bucket needs versioning Enabled first
    s3.put_bucket_versioning(Bucket=plain, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=plain, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    with pytest.raises(ClientError) as e:
        s3.put_bucket_versioning(Bucket=plain, VersioningConfiguration={"Status": "Suspended"})
    assert code(e) == (409, "InvalidBucketState")
    # an object without retention or hold
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    for op in (s3.get_object_retention, s3.get_object_legal_hold):
        with pytest.raises(ClientError) as e:
            op(Bucket=b, Key="k")
        assert code(e) == (404, "NoSuchObjectLockConfiguration")


def test_retention_needs_a_content_md5_or_checksum(cluster, s3):
    """PutObjectRetention, PutObjectLegalHold and PutObjectLockConfiguration require Content-MD5 (or a checksum)."""
    from test_s3_contract import Target
    b = lock_bucket(s3)
    s3.put_object(Bucket=b, Key="k", Body=b"x")
    t = Target("epochfs", cluster.endpoint, MAIN[:2])
    body = b'<LegalHold xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>ON</Status></LegalHold>'
    r = t.raw("PUT", f"/{b}/k", "legal-hold", body=body)
    assert r.status_code == 400 and b"<Code>InvalidRequest</Code>" in r.content
    r = t.raw("PUT", f"/{b}/k", "legal-hold", headers={"content-md5": "AAAAAAAAAAAAAAAAAAAAAA=="}, body=body)
    assert r.status_code == 400 and b"<Code>BadDigest</Code>" in r.content
    assert "ObjectLockLegalHoldStatus" not in s3.head_object(Bucket=b, Key="k")  # nothing changed


def test_mount_cannot_remove_or_rewrite_a_locked_file(cluster, s3, bucket, mnt):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object_lock_configuration(Bucket=bucket, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"})
    s3.put_object(Bucket=bucket, Key="locked", Body=b"keep me", ObjectLockMode="COMPLIANCE",
                  ObjectLockRetainUntilDate=dt.datetime.now(UTC) + dt.timedelta(days=1))
    s3.put_object(Bucket=bucket, Key="free", Body=b"free")
    s3.put_object(Bucket=bucket, Key="dir/held", Body=b"held", ObjectLockLegalHoldStatus="ON")
    root = mnt.path
    for op in (lambda: os.unlink(root / "locked"), lambda: os.rename(root / "locked", root / "moved"),
               lambda: os.rename(root / "free", root / "locked"), lambda: os.truncate(root / "locked", 0),
               lambda: os.rename(root / "dir", root / "dir2"), lambda: os.unlink(root / "dir" / "held")):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno in (errno.EPERM, errno.EACCES)
    assert (root / "locked").read_bytes() == b"keep me"
    assert s3.get_object(Bucket=bucket, Key="locked")["Body"].read() == b"keep me"
    os.unlink(root / "free")  # an unlocked file goes as usual


def test_aws_cli_object_lock(aws, s3):
    b = f"cli-{uuid.uuid4().hex[:12]}"
    aws("s3api", "create-bucket", "--bucket", b, "--object-lock-enabled-for-bucket")
    aws("s3api", "put-object-lock-configuration", "--bucket", b, "--object-lock-configuration",
        json.dumps({"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE",
                                                                                   "Days": 2}}}))
    conf = json.loads(aws("s3api", "get-object-lock-configuration", "--bucket", b))
    assert conf["ObjectLockConfiguration"]["Rule"]["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 2}
    vid = json.loads(aws("s3api", "put-object", "--bucket", b, "--key", "k", "--body", __file__))["VersionId"]
    ret = json.loads(aws("s3api", "get-object-retention", "--bucket", b, "--key", "k"))["Retention"]
    until = dt.datetime.fromisoformat(ret["RetainUntilDate"].replace("Z", "+00:00"))
    assert ret["Mode"] == "GOVERNANCE" and dt.timedelta(days=1.99) < until - dt.datetime.now(UTC) < dt.timedelta(2)
    aws("s3api", "put-object-legal-hold", "--bucket", b, "--key", "k", "--legal-hold", "Status=ON")
    assert json.loads(aws("s3api", "get-object-legal-hold", "--bucket", b, "--key", "k"))["LegalHold"] == \
        {"Status": "ON"}
    aws("s3api", "put-object-legal-hold", "--bucket", b, "--key", "k", "--legal-hold", "Status=OFF")
    aws("s3api", "delete-object", "--bucket", b, "--key", "k", "--version-id", vid,
        "--bypass-governance-retention")
    assert "Versions" not in s3.list_object_versions(Bucket=b)
