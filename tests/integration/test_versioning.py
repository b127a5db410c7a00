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
    referenced = set(cluster.nn.referenced())
    pending = set(cluster.nn.pending())  # other tests' allocations left to the expiry (a killed direct writer's)
    obj_blocks = set().union(*cluster.datanode_blocks().values())
    assert obj_blocks <= referenced | pending  # nothing of the deleted versions is left on the DataNodes
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


def test_conditional_delete_of_a_key_whose_current_version_is_a_delete_marker(s3, bucket):
    """A delete's conditions are checked against the current version even when it is a delete marker: the marker
    has no ETag (only If-Match: * holds), size 0 and its own time. A key that never existed takes any condition."""
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    assert s3.delete_object(Bucket=bucket, Key="never", IfMatch="badetag")["ResponseMetadata"]["HTTPStatusCode"] == 204
    r = s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    with pytest.raises(ClientError) as e:
        s3.delete_object(Bucket=bucket, Key="k", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert code(e) == (412, "PreconditionFailed")
    assert s3.delete_object(Bucket=bucket, Key="k", IfMatch=r["ETag"])["DeleteMarker"] is True
    markers = lambda: s3.list_object_versions(Bucket=bucket, Prefix="k").get("DeleteMarkers", [])  # noqa: E731
    assert len(markers()) == 1
    for cond, entry in (({"IfMatch": r["ETag"]}, {"ETag": r["ETag"]}), ({"IfMatchSize": 4}, {"Size": 4})):
        with pytest.raises(ClientError) as e:
            s3.delete_object(Bucket=bucket, Key="k", **cond)
        assert code(e) == (412, "PreconditionFailed")
        res = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k", **entry}]})
        assert [x["Code"] for x in res["Errors"]] == ["PreconditionFailed"]
    assert len(markers()) == 1  # none of the refused deletes stacked another marker
    assert s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")["DeleteMarker"] is True
    assert s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k", "Size": 0}]})["Deleted"][0]["DeleteMarker"]
    assert s3.get_object(Bucket=bucket, Key="k", VersionId=r["VersionId"])["Body"].read() == b"data"


def test_acl_of_one_version(cluster, s3, bucket):
    """PutObjectAcl/GetObjectAcl with versionId work on that version only (as S3): a noncurrent version made
    public-read is readable by anyone, the current one stays private, and a later version starts private."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["VersionId"]
    v2 = s3.put_object(Bucket=bucket, Key="k", Body=b"v2")["VersionId"]
    r = s3.put_object_acl(Bucket=bucket, Key="k", VersionId=v1, ACL="public-read")
    assert r["ResponseMetadata"]["HTTPHeaders"]["x-amz-version-id"] == v1

    def grants(**kw):
        return sorted((g["Grantee"].get("URI") or g["Grantee"]["ID"], g["Permission"])
                      for g in s3.get_object_acl(Bucket=bucket, Key="k", **kw)["Grants"])
    owner = s3.get_object_acl(Bucket=bucket, Key="k")["Owner"]["ID"]
    assert grants(VersionId=v1) == sorted([("http://acs.amazonaws.com/groups/global/AllUsers", "READ"),
                                           (owner, "FULL_CONTROL")])
    assert grants() == grants(VersionId=v2) == [(owner, "FULL_CONTROL")]
    anon = boto3.client("s3", endpoint_url=cluster.endpoint, region_name="us-east-1",
                        config=Config(signature_version=UNSIGNED))
    assert anon.get_object(Bucket=bucket, Key="k", VersionId=v1)["Body"].read() == b"v1"
    with pytest.raises(ClientError) as e:
        anon.get_object(Bucket=bucket, Key="k", VersionId=v2)
    assert code(e) == (403, "AccessDenied")
    s3.put_object(Bucket=bucket, Key="k", Body=b"v3")
    assert grants() == [(owner, "FULL_CONTROL")]
    with pytest.raises(ClientError) as e:
        s3.put_object_acl(Bucket=bucket, Key="k", VersionId="no-such-version", ACL="public-read")
    assert code(e)[0] in (400, 404)
