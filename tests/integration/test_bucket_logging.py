"""Bucket logging: Put/GetBucketLogging as AWS checks them (compared with moto), the logging service's permission
to write into the target (its bucket policy or ACL), server access log records in AWS's format delivered as objects
into the target bucket (rolled by the first request after GW_ACCESS_LOG_FLUSH_S, else after GW_ACCESS_LOG_IDLE_S),
and the admin API and CLI for object lock and logging."""
from __future__ import annotations

import json
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


ROLL_S, IDLE_S = 0.5, 3.0


@pytest.fixture(scope="module")
def fast_logs(tmp_path_factory):
    """A cluster whose gateway rolls a log object 0.5 s old on the next record, and writes an idle one after 3 s."""
    c = Cluster(tmp_path_factory.mktemp("logging"), gw_env={"GW_ACCESS_LOG_FLUSH_S": str(ROLL_S),
                                                            "GW_ACCESS_LOG_IDLE_S": str(IDLE_S)}).start()
    yield c
    c.close()


def _name(p: str = "lg") -> str:
    return f"{p}-{uuid.uuid4().hex[:12]}"


def code(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


_LOG_DELIVERY = 'uri="http://acs.amazonaws.com/groups/s3/LogDelivery"'


def logging_policy(target: str, prefix: str, sources: dict[str, str]) -> str:
    """The target bucket policy AWS documents for server access logs: the logging service may PutObject under the
    prefix, for these source buckets (name -> owner) only."""
    return json.dumps({"Version": "2012-10-17", "Statement": [{
        "Sid": f"S3ServerAccessLogs{i}", "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"},
        "Action": "s3:PutObject", "Resource": f"arn:aws:s3:::{target}/{prefix}*",
        "Condition": {"ArnLike": {"aws:SourceArn": f"arn:aws:s3:::{src}"},
                      "StringEquals": {"aws:SourceAccount": owner}}} for i, (src, owner) in enumerate(sources.items())]})


def sc_logging_config(t: Transcript) -> None:
    target = t.bucket + "-logs"
    t("create", "create_bucket")
    t("create target", "create_bucket", Bucket=target)
    t("no permission for the logging service", "put_bucket_logging", BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": target, "TargetPrefix": "logs/"}})
    # the log-delivery group's grants on the target (the ACL way), ...
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
    # ... or a bucket policy letting the logging service in (the way AWS recommends)
    other = t.bucket + "-logs2"
    t("create target 2", "create_bucket", Bucket=other)
    def service_policy(prefix):
        return json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "logging.s3.amazonaws.com"}, "Action": "s3:PutObject",
            "Resource": f"arn:aws:s3:::{other}/{prefix}*"}]})
    t("policy for another prefix", "put_bucket_policy", Bucket=other, Policy=service_policy("elsewhere/"),
      s3={"status": 204})  # moto answers 200
    t("refused", "put_bucket_logging", BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": other, "TargetPrefix": "logs/"}})
    t("policy", "put_bucket_policy", Bucket=other, Policy=service_policy("logs/"), s3={"status": 204})
    t("enable with the policy", "put_bucket_logging", BucketLoggingStatus={"LoggingEnabled": {
        "TargetBucket": other, "TargetPrefix": "logs/"}})


def test_logging_configuration_matches_moto(targets):  # noqa: F811
    run_both(targets, sc_logging_config)


def test_access_log_records_are_delivered(fast_logs):
    s3 = fast_logs.s3()
    src, logs = _name(), _name()
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=logs)
    s3.put_bucket_policy(Bucket=logs, Policy=logging_policy(logs, "access/", {src: MAIN[2]}))
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
    s3.put_object(Bucket=src, Key="m1", Body=b"1")
    s3.delete_objects(Bucket=src, Delete={"Objects": [{"Key": "m1"}, {"Key": "never-was"}], "Quiet": True})

    def lines():
        out = []
        for o in s3.list_objects_v2(Bucket=logs).get("Contents", []):
            out += s3.get_object(Bucket=logs, Key=o["Key"])["Body"].read().decode().splitlines()
        return out
    wait_until(lambda: len(lines()) >= 8, 20, "access log records delivered")
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
    # a multi-object delete: its request, and one BATCH.DELETE.OBJECT record per key (quiet or not), as S3 logs it
    multi = by_op[("REST.POST.MULTI_OBJECT_DELETE", "-")]
    assert multi[9] == "200" and multi[8].startswith("POST /")
    for key in ("m1", "never-was"):
        rec = by_op[("BATCH.DELETE.OBJECT", key)]
        assert (rec[9], rec[5], rec[8]) == ("204", multi[5], multi[8])  # the same request id and URI


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
    fast_logs.s3().put_bucket_acl(Bucket=logs, GrantWrite=_LOG_DELIVERY, GrantReadACP=_LOG_DELIVERY)
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
    with pytest.raises(AdminError, match="HTTP 409"):  # object lock needs versioning Enabled first ...
        admin.call("PATCH", f"/buckets/{plain}", {"object_lock": {}, "quota_objects": 7, "tags": {"t": "1"},
                                                  "logging": {"target_bucket": logs, "target_prefix": "p/"}})
    got = admin.call("GET", f"/buckets/{plain}")  # ... and nothing else of that PATCH was applied
    assert (got["object_lock"], got["quota_objects"], got["tags"], got["logging"]) == (None, None, None, None), got

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
    s3.put_bucket_acl(Bucket=logs, GrantWrite=_LOG_DELIVERY, GrantReadACP=_LOG_DELIVERY)
    s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": logs,
                                                                              "TargetPrefix": ""}})
    anon = boto3.client("s3", endpoint_url=fast_logs.endpoint, region_name="us-east-1",
                        config=Config(signature_version=botocore_unsigned()))
    anon.list_objects_v2(Bucket=src)
    with pytest.raises(ClientError):
        fast_logs.s3(ALT).put_object(Bucket=src, Key="x", Body=b"x")

    def both():  # in one log object, or two: the PUT may come ROLL_S after the listing, and wait IDLE_S in a new one
        recs = [r for k in _log_keys(s3, logs) for r in _records(s3, logs, k)]
        return {r[6] for r in recs} >= {"REST.GET.BUCKET", "REST.PUT.OBJECT"} and recs
    recs = wait_until(both, 20, "both records delivered")
    listing = next(r for r in recs if r[6] == "REST.GET.BUCKET")
    assert listing[4] == "-" and listing[9] == "200" and listing[21] == "-"  # anonymous requester, no auth
    assert listing[25] == "Yes"  # let in by the bucket's ACL (AWS's ACLRequired)
    denied = next(r for r in recs if r[6] == "REST.PUT.OBJECT")
    assert (denied[4], denied[9], denied[10]) == (ALT[2], "403", "AccessDenied")


def botocore_unsigned():
    from botocore import UNSIGNED
    return UNSIGNED


def _records(s3, bucket: str, key: str) -> list[list[str]]:
    text = s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    return [shlex.split(line.replace("[", '"').replace("]", '"')) for line in text.splitlines()]


def _log_keys(s3, bucket: str) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_a_request_after_the_roll_time_finds_the_earlier_records_delivered(fast_logs):
    """As RGW rolls its log objects: the first request GW_ACCESS_LOG_FLUSH_S after a buffer began writes it before
    it is answered (its own record starts the next object); an object no request rolls is written when idle."""
    s3 = fast_logs.s3()
    src, logs = _name(), _name()
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=logs)
    s3.put_bucket_policy(Bucket=logs, Policy=logging_policy(logs, "log/", {src: MAIN[2]}))
    s3.put_bucket_logging(Bucket=src, BucketLoggingStatus={"LoggingEnabled": {"TargetBucket": logs,
                                                                              "TargetPrefix": "log/"}})
    for i in range(5):
        s3.put_object(Bucket=src, Key=f"obj{i}", Body=b"x")
    time.sleep(ROLL_S * 1.5)
    s3.put_object(Bucket=src, Key="roller", Body=b"x")
    keys = _log_keys(s3, logs)  # at once: no waiting for a background pass
    assert len(keys) == 1 and re.fullmatch(r"log/\d{4}(-\d\d){5}-[0-9A-F]+", keys[0]), keys
    recs = _records(s3, logs, keys[0])
    assert sorted(r[7] for r in recs if r[6] == "REST.PUT.OBJECT") == [f"obj{i}" for i in range(5)]
    assert all(len(r) == 26 and r[1] == src for r in recs)
    wait_until(lambda: len(_log_keys(s3, logs)) == 2, IDLE_S * 5, "the idle log object written")
    last = _records(s3, logs, max(_log_keys(s3, logs)))
    assert [r[7] for r in last if r[6] == "REST.PUT.OBJECT"] == ["roller"]


def test_other_owners_deliver_through_the_target_policy_and_target_grants_apply(fast_logs):
    """The target's policy may admit another owner's bucket (aws:SourceAccount); records of both sources share a
    log object (simple key format); the log object is the target owner's, with the TargetGrants as its ACL; a
    source the policy stops admitting has its records dropped, not delivered."""
    s3, alt = fast_logs.s3(), fast_logs.s3(ALT)
    mine, theirs, logs = _name(), _name(), _name()
    s3.create_bucket(Bucket=mine)
    alt.create_bucket(Bucket=theirs)
    s3.create_bucket(Bucket=logs)
    conf = {"LoggingEnabled": {"TargetBucket": logs, "TargetPrefix": "log/", "TargetGrants": [
        {"Grantee": {"Type": "AmazonCustomerByEmail", "EmailAddress": ALT[4]}, "Permission": "READ"}]}}
    s3.put_bucket_policy(Bucket=logs, Policy=logging_policy(logs, "log/", {mine: MAIN[2]}))
    with pytest.raises(ClientError) as e:  # the policy doesn't name alt's bucket
        alt.put_bucket_logging(Bucket=theirs, BucketLoggingStatus=conf)
    assert code(e) == (400, "InvalidTargetBucketForLogging")
    s3.put_bucket_policy(Bucket=logs, Policy=logging_policy(logs, "log/", {mine: MAIN[2], theirs: ALT[2]}))
    s3.put_bucket_logging(Bucket=mine, BucketLoggingStatus=conf)
    alt.put_bucket_logging(Bucket=theirs, BucketLoggingStatus=conf)
    s3.put_object(Bucket=mine, Key="from-main", Body=b"x")
    alt.put_object(Bucket=theirs, Key="from-alt", Body=b"x")
    wait_until(lambda: _log_keys(s3, logs), IDLE_S * 5, "the log object")
    [key] = _log_keys(s3, logs)
    recs = _records(alt, logs, key)  # alt reads it: the TargetGrants' READ (by e-mail) is its ACL
    assert {(r[1], r[7]) for r in recs if r[6] == "REST.PUT.OBJECT"} == {(mine, "from-main"), (theirs, "from-alt")}
    acl = s3.get_object_acl(Bucket=logs, Key=key)
    assert acl["Owner"]["ID"] == MAIN[2]
    assert {(g["Grantee"].get("ID"), g["Permission"]) for g in acl["Grants"]} == \
        {(MAIN[2], "FULL_CONTROL"), (ALT[2], "READ")}
    with pytest.raises(ClientError) as e:  # nobody else
        fast_logs.s3(ALT).delete_object(Bucket=logs, Key=key)
    assert code(e)[1] == "AccessDenied"
    # the target stops admitting alt's bucket: its records are dropped at delivery, main's still arrive
    s3.put_bucket_policy(Bucket=logs, Policy=logging_policy(logs, "log/", {mine: MAIN[2]}))
    alt.put_object(Bucket=theirs, Key="late-alt", Body=b"x")
    s3.put_object(Bucket=mine, Key="late-main", Body=b"x")
    wait_until(lambda: len(_log_keys(s3, logs)) == 2, IDLE_S * 5, "the second log object")
    recs = _records(s3, logs, max(_log_keys(s3, logs)))
    assert {r[7] for r in recs if r[6] == "REST.PUT.OBJECT"} == {"late-main"}
