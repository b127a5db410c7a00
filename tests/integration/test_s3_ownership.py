"""Object ownership across users: who owns what another user writes into a bucket, and ACLs that stop counting once
the bucket owner enforces ownership (the single-user steps are compared with moto in test_s3_contract.py)."""
from __future__ import annotations

import httpx
import pytest
from botocore.exceptions import ClientError
from cluster import ALT, MAIN

pytestmark = pytest.mark.integration


def _code(fn, **kw) -> tuple[int, str]:
    with pytest.raises(ClientError) as e:
        fn(**kw)
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"], e.value.response["Error"]["Code"]


def _owner(s3, bucket: str, key: str) -> str:
    return s3.get_object_acl(Bucket=bucket, Key=key)["Owner"]["ID"]


def test_bucket_owner_preferred_then_enforced(cluster, s3, bucket):
    alt = cluster.s3(ALT)
    s3.put_bucket_acl(Bucket=bucket, GrantWrite=f"id={ALT[2]}", GrantFullControl=f"id={MAIN[2]}")
    s3.put_bucket_ownership_controls(Bucket=bucket,
                                     OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
    # the writer owns what it writes, unless it hands the object to the bucket owner
    alt.put_object(Bucket=bucket, Key="alt-keeps", Body=b"a", ACL="public-read")
    alt.put_object(Bucket=bucket, Key="handed-over", Body=b"b", ACL="bucket-owner-full-control")
    up = alt.create_multipart_upload(Bucket=bucket, Key="mpu", ACL="bucket-owner-full-control")
    assert _owner(s3, bucket, "alt-keeps") == ALT[2]
    assert _owner(s3, bucket, "handed-over") == MAIN[2]
    assert s3.list_parts(Bucket=bucket, Key="mpu", UploadId=up["UploadId"])["Owner"]["ID"] == MAIN[2]
    url = f"{cluster.endpoint}/{bucket}/alt-keeps"
    assert httpx.get(url).status_code == 200  # its public-read ACL counts

    # ACLs off: not while the bucket's own ACL grants anything
    enforced = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert _code(s3.put_bucket_ownership_controls, Bucket=bucket, OwnershipControls=enforced) == \
        (400, "InvalidBucketAclWithObjectOwnership")
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_bucket_ownership_controls(Bucket=bucket, OwnershipControls=enforced)
    # the bucket owner owns every object; grants made before count no more: no public read, no writes by alt
    assert _owner(s3, bucket, "alt-keeps") == MAIN[2]
    assert httpx.get(url).status_code == 403
    assert _code(alt.put_object, Bucket=bucket, Key="late", Body=b"c")[0] == 403
    assert _code(s3.put_object, Bucket=bucket, Key="acl", Body=b"d", GrantRead=f"id={ALT[2]}") == \
        (400, "AccessControlListNotSupported")
    assert _code(s3.head_object, Bucket=bucket, Key="acl")[0] == 404  # refused whole: nothing was stored

    # ACLs on again: the old grants count again
    s3.delete_bucket_ownership_controls(Bucket=bucket)
    assert httpx.get(url).status_code == 200
    assert _code(s3.get_bucket_ownership_controls, Bucket=bucket) == (404, "OwnershipControlsNotFoundError")
    s3.abort_multipart_upload(Bucket=bucket, Key="mpu", UploadId=up["UploadId"])


def test_create_bucket_with_object_ownership(cluster, s3):
    name = "own-" + MAIN[2][:4]
    assert _code(s3.create_bucket, Bucket=name, ACL="public-read", ObjectOwnership="BucketOwnerEnforced") == \
        (400, "InvalidBucketAclWithObjectOwnership")
    assert _code(s3.head_bucket, Bucket=name)[0] == 404  # not made
    s3.create_bucket(Bucket=name, ObjectOwnership="BucketOwnerEnforced")
    try:
        rules = s3.get_bucket_ownership_controls(Bucket=name)["OwnershipControls"]["Rules"]
        assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
        assert _code(s3.put_bucket_acl, Bucket=name, ACL="public-read") == (400, "AccessControlListNotSupported")
    finally:
        s3.delete_bucket(Bucket=name)
