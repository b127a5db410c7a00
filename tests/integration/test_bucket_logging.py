"""Bucket logging: Put/GetBucketLogging as AWS checks them (compared with moto), server access log records in AWS's
format delivered as objects into the target bucket, and the admin API and CLI for object lock and logging."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from cluster import ALT, MAIN, Cluster, wait_until
from test_s3_contract import Transcript, moto_endpoint, run_both, targets  # noqa: F401  (fixtures)

from epochfs.frontends.cli.admin import AdminClient, AdminError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fast_logs(tmp_path_factory):
    """A cluster whose gateway flushes access logs after 0.5 s."""
    c = Cluster(tmp_path_factory.mktemp("logging"), gw_env={"GW_ACCESS_LOG_FLUSH_S": "0.5"}).start()
    yield c
    c.close()


def _name(p: str = "lg") -> str:
    return f"{p}-{uuid.uuid4().hex[:12]}"


def code(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


_LOG_DELIVERY = 'uri="http://acs.amazonaws.com/groups/s3/LogDelivery"'


def sc_logging_config(t: Transcript) -> None:
    target = t.bucket + "-logs"
    t("create", "create_bucket")
    t("create target", "create_bucket", Bucket=target)
    # moto wants the log-delivery group's grants on the target (AWS too, for a target that uses ACLs)
    t("target grants", "put_bucket_acl", Bucket=target, GrantWrite=_LOG_DELIVERY, GrantReadACP=_LOG_DELIVERY)
    t("none yet", "get_bucket_logging", keep=("LoggingEnabled",))
    t("missing target", "put_bucket_logging", BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": target + "-missing", "TargetPrefix": "x/"}})
    t("enable", "put_bucket_logging", BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": target, "TargetPrefix": "logs/"}})
    t("get", "get_bucket_logging", shape=lambda r: {"target": r["LoggingEnabled"]["TargetBucket"] == target,
                                                    "prefix": r["LoggingEnabled"]["TargetPrefix"]})
    t("disable", "put_bucket_logging", BucketLoggingStatus={})
    t("off", "get_bucket_logging", keep=("LoggingEnabled",))


def test_logging_configuration_matches_moto(targets):  # noqa: F811
    run_both(targets, sc_logging_config)


def test_access_log_records_are_delivered(fast_logs):
    s3 = fast_logs.s3()
    src, logs = _name(), _name()
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=logs)
    s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": logs, "TargetPrefix": "access/",
        "TargetGrants": [{"Grantee": {"Type": "CanonicalUser", "ID": MAIN[2]}, "Permission": "READ"}],
        "TargetObjectKeyFormat": {"PartitionedPrefix": {"PartitionDateSource": "EventTime"}}}})
    got = s3.get_bucket_logging(Bucket=src)["LoggingEnabled"]
    assert got["TargetGrants"][0]["Grantee"]["ID"] == MAIN[2] and got["TargetGrants"][0]["Permission"] == "READ"
    assert got["TargetObjectKeyFormat"] == {"PartitionedPrefix": {"PartitionDateSource": "EventTime"}}
    s3.put_object(Bucket=src, Key="a b.txt", Body=b"hello")
    assert s3.get_object(Bucket=src, Key="a b.txt")["Body"].read() == b"hello"
    with pytest.raises(ClientError):
        s3.get_object(Bucket=src, Key="missing")
    s3.delete_object(Bucket=src, Key="a b.txt")

    def lines():
        out = []
        for o in s3.list_objects_v2(Bucket=logs).get("Contents", []):
            out += s3.get_object(Bucket=logs, Key=o["Key"])["Body"].read().decode().splitlines()
        return out
    wait_until(lambda: len(lines()) >= 4, 20, "access log records delivered")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=logs)["Contents"]]
    assert all(k.startswith(f"access/{MAIN[2]}/us-east-1/{src}/") for k in keys), (src, keys)
    recs = [shlex.split(line.replace("[", '"').replace("]", '"')) for line in lines()]
    assert all(len(r) == 26 for r in recs), recs  # AWS's 26 fields (a key is URL-encoded)
    by_op = {(r[6], r[7]): r for r in recs}
    put = by_op[("REST.PUT.OBJECT", "a%20b.txt")]
    assert (put[0], put[1], put[4], put[9], put[12]) == (MAIN[2], src, MAIN[2], "200", "5")
    assert put[8].startswith("PUT /") and put[19] == "SigV4" and put[21] == "AuthHeader"
    get = by_op[("REST.GET.OBJECT", "a%20b.txt")]
    assert (get[9], get[11]) == ("200", "5")
    miss = by_op[("REST.GET.OBJECT", "missing")]
    assert (miss[9], miss[10]) == ("404", "NoSuchKey")
    assert by_op[("REST.DELETE.OBJECT", "a%20b.txt")][9] == "204"


def test_logging_target_checks(fast_logs):
    s3, alt = fast_logs.s3(), fast_logs.s3(ALT)
    src, theirs = _name(), _name()
    s3.create_bucket(Bucket=src)
    alt.create_bucket(Bucket=theirs)
    for target in (theirs, src + "-nope"):  # another owner's bucket, a missing one
        with pytest.raises(ClientError) as e:
            s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {
                "TargetBucket": target, "TargetPrefix": ""}})
        assert code(e) == (400, "InvalidTargetBucketForLogging")
    with pytest.raises(ClientError) as e:  # only the owner configures it
        alt.put_bucket_logging(Bucket=src, BucketLoggingStatus={})
    assert code(e) == (403, "AccessDenied")
    assert "LoggingEnabled" not in s3.get_bucket_logging(Bucket=src)
    # a target with a default object lock retention: its log objects could never be cleaned up
    locked = _name()
    s3.create_bucket(Bucket=locked, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=locked, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    with pytest.raises(ClientError) as e:
        s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {
            "TargetBucket": locked, "TargetPrefix": ""}})
    assert code(e) == (400, "InvalidTargetBucketForLogging")


def test_admin_api_and_cli_object_lock_and_logging(fast_logs):
    admin = AdminClient(fast_logs.endpoint, MAIN[0], MAIN[1])
    b, logs = _name("adm"), _name("adm")
    admin.call("POST", "/buckets", {"name": b, "object_lock": True})
    got = admin.call("GET", f"/buckets/{b}")
    assert got["object_lock"] == {"rule": None} and got["versioning"] == "Enabled" and got["logging"] is None
    admin.call("POST", "/buckets", {"name": logs})
    got = admin.call("PATCH", f"/buckets/{b}", {"object_lock": {"rule": {"mode": "COMPLIANCE", "days": 3}},
                                                "logging": {"target_bucket": logs, "target_prefix": "l/"}})
    assert got["object_lock"]["rule"] == {"mode": "COMPLIANCE", "days": 3}
    assert got["logging"] == {"target_bucket": logs, "target_prefix": "l/"}
    s3 = fast_logs.s3()
    assert s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]["Rule"] == \
        {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 3}}
    for bad in ({"object_lock": {"rule": {"mode": "COMPLIANCE", "days": 0}}},
                {"object_lock": {"rule": {"mode": "COMPLIANCE", "days": 1, "years": 1}}},
                {"logging": {"target_bucket": logs + "x"}}):
        with pytest.raises(AdminError, match="HTTP 4"):
            admin.call("PATCH", f"/buckets/{b}", bad)
    plain = _name("adm")
    admin.call("POST", "/buckets", {"name": plain})
    with pytest.raises(AdminError, match="HTTP 409"):  # object lock needs versioning Enabled first
        admin.call("PATCH", f"/buckets/{plain}", {"object_lock": {}})

    env = {**os.environ, "AWS_ENDPOINT_URL": fast_logs.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "250"}

    def cli(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", *args], env=env,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0) == ok, r.stderr
        return r.stdout + r.stderr
    table = cli("buckets")
    row = next(line for line in table.splitlines() if b in line)
    assert "COMPLIANCE 3d" in row and f"{logs}/l/" in row
    assert re.search(r"logging\s*│\s*-\s*│", cli("buckets", "set", b, "--logging", "off"))
    s3.put_bucket_versioning(Bucket=plain, VersioningConfiguration={"Status": "Enabled"})
    assert "GOVERNANCE 2y" in cli("buckets", "set", plain, "--object-lock", "GOVERNANCE:2y")
    assert "bad --object-lock" in cli("buckets", "set", plain, "--object-lock", "FOREVER", ok=False)
    assert s3.get_bucket_logging(Bucket=b).get("LoggingEnabled") is None


def test_anonymous_and_alt_requests_are_logged(fast_logs):
    s3 = fast_logs.s3()
    src, logs = _name(), _name()
    s3.create_bucket(Bucket=src, ACL="public-read")
    s3.create_bucket(Bucket=logs)
    s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": logs,
                                                                              "TargetPrefix": ""}})
    anon = boto3.client("s3", endpoint_url=fast_logs.endpoint, region_name="us-east-1",
                        config=Config(signature_version=botocore_unsigned()))
    anon.list_objects_v2(Bucket=src)
    with pytest.raises(ClientError):
        fast_logs.s3(ALT).put_object(Bucket=src, Key="x", Body=b"x")
    wait_until(lambda: s3.list_objects_v2(Bucket=logs).get("KeyCount", 0) > 0, 20, "log object")
    time.sleep(1.0)
    text = "".join(s3.get_object(Bucket=logs, Key=o["Key"])["Body"].read().decode()
                   for o in s3.list_objects_v2(Bucket=logs)["Contents"])
    recs = [shlex.split(line.replace("[", '"').replace("]", '"')) for line in text.splitlines()]
    listing = next(r for r in recs if r[6] == "REST.GET.BUCKET")
    assert listing[4] == "-" and listing[9] == "200"  # anonymous requester
    denied = next(r for r in recs if r[6] == "REST.PUT.OBJECT")
    assert (denied[4], denied[9], denied[10]) == (ALT[2], "403", "AccessDenied")


def botocore_unsigned():
    from botocore import UNSIGNED
    return UNSIGNED
