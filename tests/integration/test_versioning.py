"""Bucket versioning: every overwrite keeps the old version, deletes make delete markers, versions read back."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.integration


def code(e):
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


def test_versions_delete_markers_and_restore(cluster, s3, bucket):
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"v0 (before versioning)")
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=bucket)["Status"] == "Enabled"
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"v2")["VersionId"]
    assert v1 != v2
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=v1)["Body"].read() == b"v1"
    assert s3.get_object(Bucket=bucket, Key="k", VersionId="null")["Body"].read() == b"v0 (before versioning)"

    dm = s3.delete_object(Bucket=bucket, Key="k")
    assert dm["DeleteMarker"] is True
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=bucket, Key="k")
    assert code(e) == (404, "NoSuchKey")
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-delete-marker"] == "true"
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0

    listing = s3.list_object_versions(Bucket=bucket)
    assert [m["VersionId"] for m in listing["DeleteMarkers"]] == [dm["VersionId"]]
    assert [v["VersionId"] for v in listing["Versions"]] == [v2, v1, "null"]
    assert [v["IsLatest"] for v in listing["Versions"]] == [False, False, False]

    # removing the delete marker brings v2 back; removing versions frees them
    s3.delete_object(Bucket=bucket, Key="k", VersionId=dm["VersionId"])
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    with pytest.raises(ClientError) as e:
        s3.delete_bucket(Bucket=bucket)
    assert code(e) == (409, "BucketNotEmpty")
    for v in (v2, v1, "null"):
        s3.delete_object(Bucket=bucket, Key="k", VersionId=v)
    assert s3.list_object_versions(Bucket=bucket).get("Versions") is None
    cluster.collect_garbage()
    referenced = set(cluster.rpc("nn", "referenced")["blocks"])
    obj_blocks = set().union(*cluster.datanode_blocks().values())
    assert obj_blocks <= referenced  # nothing of the deleted versions is left on the DataNodes
    s3.delete_bucket(Bucket=bucket)


def test_suspended_versioning_overwrites_the_null_version(s3, bucket):
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["VersionId"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"n1")
    s3.put_object(Bucket=bucket, Key="k", Body=b"n2")
    ids = [v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]]
    assert ids == ["null", v1]
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"n2"
