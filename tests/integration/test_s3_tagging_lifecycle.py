"""Object and bucket tagging, bucket lifecycle configuration and the versioning details of S3 answers, with boto3
against a live cluster. The configuration scenarios run on moto's server too and must give the same transcript
(moto as an oracle, see test_s3_contract.py); the lifecycle worker, which moto does not have, runs on a cluster of
its own whose lifecycle "day" is 1 s (NN_LIFECYCLE_DAY_S)."""
from __future__ import annotations

import copy
import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from botocore.exceptions import ClientError
from cluster import MAIN, Cluster, wait_until
from test_s3_contract import Transcript, moto_endpoint, run_both, targets  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration


def _tags(n: int, key="k", value="v") -> dict:
    return {"TagSet": [{"Key": f"{key}{i}", "Value": f"{value}{i}"} for i in range(n)]}


def _tagset(r: dict) -> dict:
    return {"TagSet": sorted((t["Key"], t["Value"]) for t in r["TagSet"])}


# ---------------------------------------------------------------- scenarios compared with moto
def sc_object_tagging(t: Transcript) -> None:
    t("create bucket", "create_bucket")
    t("put with x-amz-tagging", "put_object", Key="a", Body=b"aaa", Tagging="team=vision&split=train&empty=")
    t("get tagging", "get_object_tagging", Key="a", shape=_tagset)
    t("GET shows the tag count", "get_object", Key="a", keep=("TagCount",))
    r = t.s3.head_object(Bucket=t.bucket, Key="a")
    t.note("HEAD x-amz-tagging-count", r["ResponseMetadata"]["HTTPHeaders"].get("x-amz-tagging-count"))
    t("replace the tags", "put_object_tagging", Key="a", Tagging={"TagSet": [{"Key": "x", "Value": "1"}]})
    t("get the new tags", "get_object_tagging", Key="a", shape=_tagset)
    t("ten tags", "put_object_tagging", Key="a", Tagging=_tags(10))
    t("eleven tags", "put_object_tagging", Key="a", Tagging=_tags(11), s3=(400, "InvalidTag"))
    t("a key of 129 characters", "put_object_tagging", Key="a",
      Tagging={"TagSet": [{"Key": "k" * 129, "Value": "v"}]}, s3=(400, "InvalidTag"))
    t("a value of 257 characters", "put_object_tagging", Key="a",
      Tagging={"TagSet": [{"Key": "k", "Value": "v" * 257}]}, s3=(400, "InvalidTag"))
    # moto takes a repeated key (the last value wins); S3 refuses the set
    t("a key twice", "put_object_tagging", Key="a", moto_skip=True,
      Tagging={"TagSet": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}, s3=(400, "InvalidTag"))
    t("the refused sets changed nothing", "get_object_tagging", Key="a", shape=_tagset)
    t("delete the tags", "delete_object_tagging", Key="a")
    t("no tags left", "get_object_tagging", Key="a", shape=_tagset)
    t("tagging of a missing key", "get_object_tagging", Key="nope")
    t("put tagging on a missing key", "put_object_tagging", Key="nope", Tagging=_tags(1))
    # copies: COPY (the default) keeps the source's tags, REPLACE takes the request's
    t("tag the source", "put_object_tagging", Key="a", Tagging=_tags(2))
    t("copy keeps them", "copy_object", Key="copy1", CopySource={"Bucket": t.bucket, "Key": "a"})
    t("copy's tags", "get_object_tagging", Key="copy1", shape=_tagset)
    t("copy replaces them", "copy_object", Key="copy2", CopySource={"Bucket": t.bucket, "Key": "a"},
      TaggingDirective="REPLACE", Tagging="only=this")
    t("replaced tags", "get_object_tagging", Key="copy2", shape=_tagset)
    # multipart: the tags given at CreateMultipartUpload are the object's
    up = t("create upload with tags", "create_multipart_upload", Key="mpu", Tagging="stage=ckpt")
    if up is not None:
        p = t.s3.upload_part(Bucket=t.bucket, Key="mpu", UploadId=up["UploadId"], PartNumber=1, Body=b"x" * 100)
        t("complete", "complete_multipart_upload", Key="mpu", UploadId=up["UploadId"],
          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]})
        t("multipart object's tags", "get_object_tagging", Key="mpu", shape=_tagset)
    for k in ("a", "copy1", "copy2", "mpu"):
        t(f"delete {k}", "delete_object", Key=k)
    t("delete bucket", "delete_bucket")


def sc_versioned_tagging(t: Transcript) -> None:
    t("create bucket", "create_bucket")
    t("enable versioning", "put_bucket_versioning", VersioningConfiguration={"Status": "Enabled"})
    v1 = t.s3.put_object(Bucket=t.bucket, Key="k", Body=b"1", Tagging="v=1")["VersionId"]
    v2 = t.s3.put_object(Bucket=t.bucket, Key="k", Body=b"2", Tagging="v=2")["VersionId"]
    t("tags of the current version", "get_object_tagging", Key="k", shape=_tagset)
    t("tags of the old one", "get_object_tagging", Key="k", VersionId=v1, shape=_tagset)
    r = t("tag the old version", "put_object_tagging", Key="k", VersionId=v1, Tagging=_tags(1))
    t.s3_only("the answer names its version", r.get("VersionId"), v1)  # moto leaves x-amz-version-id out
    t("old version's new tags", "get_object_tagging", Key="k", VersionId=v1, shape=_tagset)
    t("current unchanged", "get_object_tagging", Key="k", shape=_tagset)
    r = t("delete the current's tags", "delete_object_tagging", Key="k")
    t.s3_only("delete answer names the current version", r.get("VersionId"), v2)
    t("unknown version", "get_object_tagging", Key="k", VersionId="0" * 32)
    for v in (v1, v2):
        t.s3.delete_object(Bucket=t.bucket, Key="k", VersionId=v)
    t("delete bucket", "delete_bucket")


def sc_bucket_tagging(t: Transcript) -> None:
    t("create bucket", "create_bucket")
    t("no tag set yet", "get_bucket_tagging")
    t("put bucket tags", "put_bucket_tagging", Tagging={"TagSet": [{"Key": "team", "Value": "vision"},
                                                                    {"Key": "cost-center", "Value": "42"}]})
    t("get bucket tags", "get_bucket_tagging", shape=_tagset)
    t("fifty tags", "put_bucket_tagging", Tagging=_tags(50))
    t("fifty-one tags", "put_bucket_tagging", Tagging=_tags(51), s3=(400, "InvalidTag"), moto_skip=True)  # moto
    # takes any number
    t("a key twice", "put_bucket_tagging", moto_skip=True,
      Tagging={"TagSet": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}, s3=(400, "InvalidTag"))
    t("an aws: key", "put_bucket_tagging", Tagging={"TagSet": [{"Key": "aws:x", "Value": "1"}]},
      s3=(400, "InvalidTag"))
    t("still fifty", "get_bucket_tagging", shape=lambda r: {"n": len(r["TagSet"])})
    t("delete bucket tags", "delete_bucket_tagging")
    t("gone", "get_bucket_tagging")
    t("delete bucket", "delete_bucket")


LC_RULES = [
    {"ID": "old-ckpt", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled", "Expiration": {"Days": 7}},
    {"ID": "tmp-tag", "Filter": {"Tag": {"Key": "tmp", "Value": "yes"}}, "Status": "Enabled",
     "Expiration": {"Days": 1}},
    {"ID": "big-logs", "Filter": {"And": {"Prefix": "logs/", "Tags": [{"Key": "a", "Value": "b"}],
                                          "ObjectSizeGreaterThan": 1000, "ObjectSizeLessThan": 100000}},
     "Status": "Disabled", "Expiration": {"Date": dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)}},
    {"ID": "noncurrent", "Filter": {}, "Status": "Enabled",
     "NoncurrentVersionExpiration": {"NoncurrentDays": 30, "NewerNoncurrentVersions": 3}},
    {"ID": "uploads", "Filter": {"Prefix": ""}, "Status": "Enabled",
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 2}},
    {"ID": "markers", "Filter": {"Prefix": "m/"}, "Status": "Enabled",
     "Expiration": {"ExpiredObjectDeleteMarker": True}},
]


def sc_lifecycle_config(t: Transcript) -> None:
    def rules(r):
        return {"Rules": sorted(r["Rules"], key=lambda x: x["ID"])}

    def rules_moto_keeps(r):  # moto drops ObjectSizeGreaterThan/LessThan and NewerNoncurrentVersions
        out = copy.deepcopy(rules(r))
        for x in out["Rules"]:
            for k in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
                x.get("Filter", {}).get("And", {}).pop(k, None)
            x.get("NoncurrentVersionExpiration", {}).pop("NewerNoncurrentVersions", None)
        return out

    t("create bucket", "create_bucket")
    t("none yet", "get_bucket_lifecycle_configuration")
    t("put rules", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": LC_RULES})
    r = t("get them back", "get_bucket_lifecycle_configuration", shape=rules_moto_keeps)
    t.s3_only("every field back", rules(r), rules({"Rules": LC_RULES}))
    t("Days 0", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": [
        {"ID": "r", "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 0}}]},
      s3=(400, "InvalidArgument"), moto_skip=True)  # moto checks none of these refusals: it stores them
    t("same ID twice", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": [
        {"ID": "r", "Filter": {"Prefix": "a"}, "Status": "Enabled", "Expiration": {"Days": 1}},
        {"ID": "r", "Filter": {"Prefix": "b"}, "Status": "Enabled", "Expiration": {"Days": 2}}]},
      s3=(400, "InvalidArgument"), moto_skip=True)  # moto takes it
    t("an ID of 256 characters", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": [
        {"ID": "r" * 256, "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 1}}]},
      s3=(400, "InvalidArgument"), moto_skip=True)  # moto takes it
    t("status in lower case", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": [
        {"ID": "r", "Filter": {"Prefix": ""}, "Status": "enabled", "Expiration": {"Days": 1}}]},
      s3=(400, "MalformedXML"), moto_skip=True)  # moto takes it
    t("no action", "put_bucket_lifecycle_configuration", LifecycleConfiguration={"Rules": [
        {"ID": "r", "Filter": {"Prefix": ""}, "Status": "Enabled"}]}, s3=(400, "InvalidRequest"),
      moto_skip=True)  # moto takes it
    t("delete marker cleanup with a tag filter", "put_bucket_lifecycle_configuration",
      LifecycleConfiguration={"Rules": [{"ID": "r", "Filter": {"Tag": {"Key": "a", "Value": "b"}},
                                         "Status": "Enabled", "Expiration": {"ExpiredObjectDeleteMarker": True}}]},
      s3=(400, "InvalidRequest"), moto_skip=True)  # moto takes it
    t("the refused ones changed nothing", "get_bucket_lifecycle_configuration", shape=rules_moto_keeps)
    t("delete", "delete_bucket_lifecycle")
    t("gone", "get_bucket_lifecycle_configuration")
    t("delete again", "delete_bucket_lifecycle")
    t("delete bucket", "delete_bucket")


def sc_versioning_details(t: Transcript) -> None:
    t("create bucket", "create_bucket")
    t("unversioned PUT", "put_object", Key="u", Body=b"u", keep=("VersionId",))
    t("suspend versioning", "put_bucket_versioning", VersioningConfiguration={"Status": "Suspended"})
    t("PUT in a suspended bucket: no VersionId", "put_object", Key="s", Body=b"s", keep=("VersionId",))
    up = t.s3.create_multipart_upload(Bucket=t.bucket, Key="mp")
    p = t.s3.upload_part(Bucket=t.bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"p")
    # moto answers VersionId "null" here (and none for the PUT above, as S3 does for both)
    t("CompleteMultipartUpload in a suspended bucket: no VersionId", "complete_multipart_upload", Key="mp",
      UploadId=up["UploadId"], MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"]}]},
      keep=("VersionId",), s3={"status": 200, "VersionId": None})
    t("enable versioning", "put_bucket_versioning", VersioningConfiguration={"Status": "Enabled"})
    r = t.s3.put_object(Bucket=t.bucket, Key="v", Body=b"v")
    r2 = t("GetObjectAttributes names the version", "get_object_attributes", Key="v",
           ObjectAttributes=["ObjectSize"], keep=("ObjectSize",))
    t.note("its x-amz-version-id", r2["VersionId"] == r["VersionId"])
    r3 = t("DeleteObjects makes a delete marker", "delete_objects", Delete={"Objects": [{"Key": "v"}]},
           shape=lambda r: {"dm": [d.get("DeleteMarker") for d in r["Deleted"]]})
    marker = r3["Deleted"][0]["DeleteMarkerVersionId"]
    # S3: DeleteMarker true and DeleteMarkerVersionId the marker's id when a marker is removed by its version id
    # (moto leaves both out)
    t("DeleteObjects removes the marker", "delete_objects",
      Delete={"Objects": [{"Key": "v", "VersionId": marker}]},
      shape=lambda r: {"dm": [(d.get("DeleteMarker"), d.get("DeleteMarkerVersionId") == marker,
                               d.get("VersionId") == marker) for d in r["Deleted"]]},
      s3={"status": 200, "dm": [(True, True, True)]})
    # in a versioned bucket S3 makes a delete marker even for a key that has no version (moto makes none)
    t("deleting a key that never was makes a marker", "delete_objects", Delete={"Objects": [{"Key": "never"}]},
      shape=lambda r: {"dm": [(d["Key"], d.get("DeleteMarker"), bool(d.get("DeleteMarkerVersionId")))
                              for d in r["Deleted"]]}, s3={"status": 200, "dm": [("never", True, True)]})
    t("so does DeleteObject", "delete_object", Key="never2", keep=("DeleteMarker",),
      s3={"status": 204, "DeleteMarker": True})
    t("both markers listed", "list_object_versions", Prefix="never",
      shape=lambda r: {"markers": [(m["Key"], m["IsLatest"]) for m in r.get("DeleteMarkers", [])]},
      s3={"status": 200, "markers": [("never", True), ("never2", True)]})
    r = t.s3.list_object_versions(Bucket=t.bucket)
    for v in r.get("Versions", []) + r.get("DeleteMarkers", []):
        t.s3.delete_object(Bucket=t.bucket, Key=v["Key"], VersionId=v["VersionId"])
    t("delete bucket", "delete_bucket")


SCENARIOS = [sc_object_tagging, sc_versioned_tagging, sc_bucket_tagging, sc_lifecycle_config, sc_versioning_details]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__[3:] for s in SCENARIOS])
def test_against_moto(targets, scenario):  # noqa: F811
    run_both(targets, scenario)


# ---------------------------------------------------------------- epochfs only
def _code(fn, **kw) -> tuple[int, str]:
    with pytest.raises(ClientError) as e:
        fn(**kw)
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


def test_post_upload_with_tags(cluster, s3, bucket):
    tagging = "<Tagging><TagSet><Tag><Key>src</Key><Value>form</Value></Tag></TagSet></Tagging>"
    p = s3.generate_presigned_post(bucket, "form.txt", Fields={"tagging": tagging},
                                   Conditions=[{"tagging": tagging}])
    r = httpx.post(p["url"], data=p["fields"], files={"file": ("form.txt", b"hello")})
    assert r.status_code == 204, r.text
    assert s3.get_object_tagging(Bucket=bucket, Key="form.txt")["TagSet"] == [{"Key": "src", "Value": "form"}]
    bad = "<Tagging><TagSet>" + "".join(f"<Tag><Key>k{i}</Key><Value>v</Value></Tag>" for i in range(11)) + \
        "</TagSet></Tagging>"
    p = s3.generate_presigned_post(bucket, "bad.txt", Fields={"tagging": bad}, Conditions=[{"tagging": bad}])
    r = httpx.post(p["url"], data=p["fields"], files={"file": ("bad.txt", b"nope")})
    assert r.status_code == 400 and b"<Code>InvalidTag</Code>" in r.content
    assert _code(s3.head_object, Bucket=bucket, Key="bad.txt")[0] == 404  # refused whole


def test_bad_tagging_input(cluster, s3, bucket):
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", Tagging="a=1")
    # a malformed document, a header with a bad character, a copy with an unknown directive: nothing changes
    r = httpx.put(f"{cluster.endpoint}/{bucket}/k?tagging", content=b"<Tagging><TagSet><Tag>")
    assert r.status_code in (400, 403)
    assert _code(s3.put_object, Bucket=bucket, Key="k2", Body=b"y", Tagging="a<b=1") == (400, "InvalidTag")
    assert _code(s3.head_object, Bucket=bucket, Key="k2")[0] == 404
    assert _code(s3.copy_object, Bucket=bucket, Key="k3", CopySource=f"{bucket}/k",
                 TaggingDirective="MERGE")[0] == 400
    assert s3.get_object_tagging(Bucket=bucket, Key="k")["TagSet"] == [{"Key": "a", "Value": "1"}]
    assert _code(s3.put_bucket_lifecycle_configuration, Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "t", "Filter": {"Prefix": ""}, "Status": "Enabled",
         "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]}) == (501, "NotImplemented")


def test_expiration_header(cluster, s3, bucket):
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
        {"ID": "week", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 7}}]})
    put = s3.put_object(Bucket=bucket, Key="tmp/a", Body=b"x")
    head = s3.head_object(Bucket=bucket, Key="tmp/a")
    for r in (put, head):
        assert r["Expiration"].endswith('rule-id="week"')
    # 7 days after creation, rounded up to the next midnight UTC
    when = dt.datetime.strptime(head["Expiration"].split('"')[1], "%a, %d %b %Y %H:%M:%S GMT")
    created = head["LastModified"].replace(tzinfo=None)
    assert when.hour == when.minute == 0 and dt.timedelta(days=7) < when - created <= dt.timedelta(days=8)
    s3.put_object(Bucket=bucket, Key="keep/b", Body=b"y")
    assert "Expiration" not in s3.head_object(Bucket=bucket, Key="keep/b")


# ---------------------------------------------------------------- the lifecycle worker, with 1-second days
@pytest.fixture(scope="module")
def lc_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("lc"), nn_env={"NN_LIFECYCLE_DAY_S": "1",
                                                       "NN_LIFECYCLE_ACTIONS_PER_S": "1000"}).start()
    yield c
    c.close()


def _keys(s3, bucket) -> list[str]:
    return [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]


def _versions(s3, bucket) -> tuple[list, list]:
    r = s3.list_object_versions(Bucket=bucket)
    return ([(v["Key"], v["IsLatest"]) for v in r.get("Versions", [])],
            [(m["Key"], m["IsLatest"]) for m in r.get("DeleteMarkers", [])])


def test_lifecycle_expires_by_prefix_tag_and_size(lc_cluster):
    s3 = lc_cluster.s3()
    b = f"lc-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=b)
    for k in ("ckpt/1", "ckpt/2", "keep/1"):
        s3.put_object(Bucket=b, Key=k, Body=b"x")
    s3.put_object(Bucket=b, Key="data/tmp", Body=b"x", Tagging="tmp=yes")
    s3.put_object(Bucket=b, Key="data/kept", Body=b"x", Tagging="tmp=no")
    s3.put_object(Bucket=b, Key="big/large", Body=b"x" * 3000)
    s3.put_object(Bucket=b, Key="big/small", Body=b"x" * 10)
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
        {"ID": "ckpt", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled", "Expiration": {"Days": 2}},
        {"ID": "tmp", "Filter": {"Tag": {"Key": "tmp", "Value": "yes"}}, "Status": "Enabled",
         "Expiration": {"Days": 2}},
        {"ID": "big", "Filter": {"And": {"Prefix": "big/", "ObjectSizeGreaterThan": 2000}}, "Status": "Enabled",
         "Expiration": {"Days": 2}},
        {"ID": "off", "Filter": {"Prefix": "keep/"}, "Status": "Disabled", "Expiration": {"Days": 1}}]})
    t0 = time.monotonic()
    wait_until(lambda: _keys(s3, b) == ["big/small", "data/kept", "keep/1"], 30, "expirations")
    assert time.monotonic() - t0 > 0.5  # not before the objects are 2 "days" old (2 s from their PUT)
    jobs = httpx.get(f"{lc_cluster.endpoint}/admin/v1/jobs", auth=MAIN[:2]).json()
    jobs = jobs["jobs"] if isinstance(jobs, dict) else jobs
    lc = [j for j in jobs if j["kind"] == "lifecycle"]
    assert lc and sum(j.get("detail", j).get("expired", 0) for j in lc) >= 3


def test_lifecycle_versions_markers_and_uploads(lc_cluster):
    s3 = lc_cluster.s3()
    b = f"lc-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    for i in range(6):
        s3.put_object(Bucket=b, Key="model", Body=f"v{i}".encode())
    s3.put_object(Bucket=b, Key="m/gone", Body=b"x")
    s3.delete_object(Bucket=b, Key="m/gone")  # a marker over one version
    up = s3.create_multipart_upload(Bucket=b, Key="ckpt/big")["UploadId"]
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
        {"ID": "nc", "Filter": {"Prefix": "model"}, "Status": "Enabled",
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": 2}},
        {"ID": "dm", "Filter": {"Prefix": "m/"}, "Status": "Enabled",
         "Expiration": {"ExpiredObjectDeleteMarker": True}, "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
        {"ID": "mpu", "Filter": {"Prefix": "ckpt/"}, "Status": "Enabled",
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}}]})
    # model: the current version and the 2 newest noncurrent ones stay; m/gone: its only version goes (noncurrent
    # for over a day), then its marker, now alone, goes too; the upload is aborted
    wait_until(lambda: _versions(s3, b) == ([("model", True), ("model", False), ("model", False)], []), 30,
               "noncurrent versions and the lone delete marker to go")
    wait_until(lambda: not s3.list_multipart_uploads(Bucket=b).get("Uploads"), 30, "the upload to be aborted")
    assert _code(s3.list_parts, Bucket=b, Key="ckpt/big", UploadId=up) == (404, "NoSuchUpload")
    assert s3.get_object(Bucket=b, Key="model")["Body"].read() == b"v5"


def test_lifecycle_current_expiration_in_versioned_bucket(lc_cluster):
    s3 = lc_cluster.s3()
    b = f"lc-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=b)
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=b, Key="x/a", Body=b"a")
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration={"Rules": [
        {"ID": "exp", "Filter": {"Prefix": "x/"}, "Status": "Enabled", "Expiration": {"Days": 1}}]})
    # the current version expires into a delete marker (the data stays as a noncurrent version) ...
    wait_until(lambda: _versions(s3, b) == ([("x/a", False)], [("x/a", True)]), 30, "a delete marker")
    time.sleep(3)
    # ... and a marker over a version is left alone (it is not an expired object delete marker)
    assert _versions(s3, b) == ([("x/a", False)], [("x/a", True)])


def test_admin_buckets_tagging_and_lifecycle(lc_cluster):
    s3 = lc_cluster.s3()
    b = f"lc-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=b)
    api = f"{lc_cluster.endpoint}/admin/v1/buckets/{b}"
    r = httpx.patch(api, auth=MAIN[:2], json={"tags": {"team": "vision"}, "lifecycle": [
        {"id": "tmp", "prefix": "tmp/", "expiration_days": 3}]})
    assert r.status_code == 200, r.text
    assert s3.get_bucket_tagging(Bucket=b)["TagSet"] == [{"Key": "team", "Value": "vision"}]
    rules = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert rules == [{"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled", "Expiration": {"Days": 3}}]
    got = httpx.get(api, auth=MAIN[:2]).json()
    assert got["tags"] == {"team": "vision"} and got["lifecycle"][0]["expiration_days"] == 3
    bad = httpx.patch(api, auth=MAIN[:2], json={"tags": {f"k{i}": "v" for i in range(51)}})
    assert bad.status_code == 409 and "50" in bad.json()["detail"]
    bad = httpx.patch(api, auth=MAIN[:2], json={"lifecycle": [{"id": "x", "expiration_days": 0}]})
    assert bad.status_code == 422  # refused by the API's schema
    bad = httpx.patch(api, auth=MAIN[:2], json={"lifecycle": [{"id": "x", "prefix": "a/"}]})
    assert bad.status_code == 409 and "action" in bad.json()["detail"]  # a rule that does nothing
    assert s3.get_bucket_tagging(Bucket=b)["TagSet"] == [{"Key": "team", "Value": "vision"}]
    r = httpx.patch(api, auth=MAIN[:2], json={"tags": None, "lifecycle": None})
    assert r.status_code == 200, r.text
    assert _code(s3.get_bucket_tagging, Bucket=b) == (404, "NoSuchTagSet")
    assert _code(s3.get_bucket_lifecycle_configuration, Bucket=b) == (404, "NoSuchLifecycleConfiguration")


def test_cli_buckets_show_and_set(lc_cluster, tmp_path):
    b = f"lc-{uuid.uuid4().hex[:10]}"
    lc_cluster.s3().create_bucket(Bucket=b)
    env = {**os.environ, "AWS_ENDPOINT_URL": lc_cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "400"}

    def cli(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", *args], env=env,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0) == ok, r.stderr
        return r.stdout + r.stderr

    rules = tmp_path / "rules.json"
    rules.write_text('[{"id": "tmp", "prefix": "tmp/", "expiration_days": 7}, '
                     '{"id": "mpu", "abort_upload_days": 2}]')
    out = cli("buckets", "set", b, "--tag", "team=vision", "--tag", "stage=train", "--lifecycle", str(rules))
    assert "stage=train, team=vision" in out and "rule tmp" in out and "expire after days: 7" in out
    assert "abort uploads after days: 2" in cli("buckets", "show", b)
    row = next(line for line in cli("buckets").splitlines() if b in line)
    assert [c.strip() for c in row.split("│")][-2] == "2 tags, 2 lifecycle rules"  # the settings column
    rules.write_text('[{"id": "bad", "prefix": "x/"}]')
    assert "HTTP 409" in cli("buckets", "set", b, "--lifecycle", str(rules), ok=False)
    assert "bad --tag" in cli("buckets", "set", b, "--tag", "novalue", ok=False)
    out = cli("buckets", "set", b, "--clear-tags", "--clear-lifecycle")
    assert "tags" in out and "none" in out and "rule tmp" not in out


def test_aws_cli_tagging_and_lifecycle(cluster, bucket, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=cluster.endpoint, AWS_ACCESS_KEY_ID=MAIN[0], AWS_SECRET_ACCESS_KEY=MAIN[1],
               AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=str(tmp_path / "no-config"),
               AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"), AWS_MAX_ATTEMPTS="1")

    def aws(*args, ok=True):
        p = subprocess.run([sys.executable, "-m", "awscli", "s3api", *args, "--bucket", bucket], env=env,
                           capture_output=True, text=True, timeout=120)
        assert (p.returncode == 0) == ok, p.stderr
        return json.loads(p.stdout) if p.stdout.strip() else p.stderr

    (tmp_path / "f").write_bytes(b"data")
    aws("put-object", "--key", "k", "--body", str(tmp_path / "f"), "--tagging", "team=vision&tmp=yes")
    assert aws("get-object-tagging", "--key", "k")["TagSet"] == [{"Key": "team", "Value": "vision"},
                                                                 {"Key": "tmp", "Value": "yes"}]
    aws("put-object-tagging", "--key", "k", "--tagging", '{"TagSet": [{"Key": "a", "Value": "1"}]}')
    assert aws("get-object-tagging", "--key", "k")["TagSet"] == [{"Key": "a", "Value": "1"}]
    aws("put-bucket-tagging", "--tagging", '{"TagSet": [{"Key": "owner", "Value": "ml"}]}')
    assert aws("get-bucket-tagging")["TagSet"] == [{"Key": "owner", "Value": "ml"}]
    rules = {"Rules": [{"ID": "tmp", "Filter": {"Prefix": "tmp/"}, "Status": "Enabled",
                        "Expiration": {"Days": 30}}]}
    aws("put-bucket-lifecycle-configuration", "--lifecycle-configuration", json.dumps(rules))
    assert aws("get-bucket-lifecycle-configuration") == rules
    err = aws("put-bucket-lifecycle-configuration", "--lifecycle-configuration", json.dumps(
        {"Rules": [{"ID": "x", "Filter": {"Prefix": ""}, "Status": "Enabled", "Expiration": {"Days": 0}}]}),
        ok=False)
    assert "InvalidArgument" in err
    aws("delete-bucket-lifecycle")
    assert "NoSuchLifecycleConfiguration" in aws("get-bucket-lifecycle-configuration", ok=False)
    aws("delete-object", "--key", "k")
