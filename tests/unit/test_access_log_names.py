"""The S3 operation names of the gateway's handlers (metrics labels) and the operation field of server access log
records, as S3's own logs name them."""
from __future__ import annotations

import pytest

from epochfs.gateway.metrics import operation
from epochfs.gateway.s3 import bucket, bucket_logging, lifecycle, multipart, objects, post, sse, tagging
from epochfs.gateway.s3.bucket_logging import log_operation


@pytest.mark.parametrize("handler, method, name, logged", [
    (objects.put_object, "PUT", "PutObject", "REST.PUT.OBJECT"),
    (tagging.put_object_tagging, "PUT", "PutObjectTagging", "REST.PUT.OBJECT_TAGGING"),
    (tagging.get_bucket_tagging, "GET", "GetBucketTagging", "REST.GET.TAGGING"),
    (sse.get_encryption, "GET", "GetBucketEncryption", "REST.GET.ENCRYPTION"),
    (lifecycle.get_lifecycle, "GET", "GetBucketLifecycleConfiguration", "REST.GET.LIFECYCLE"),
    (post.post_object, "POST", "PostObject", "REST.POST.OBJECT"),
    (bucket.get_versioning, "GET", "GetBucketVersioning", "REST.GET.VERSIONING"),
    (bucket.get_policy, "GET", "GetBucketPolicy", "REST.GET.BUCKETPOLICY"),
    (bucket.get_acl, "GET", "GetBucketAcl", "REST.GET.ACL"),
    (bucket_logging.get_logging, "GET", "GetBucketLogging", "REST.GET.LOGGING_STATUS"),
    (multipart.list_uploads, "GET", "ListMultipartUploads", "REST.GET.UPLOADS"),
])
def test_names(handler, method, name, logged):
    assert operation(handler) == name  # no "Epochfs" prefix: that marks the /_epochfs extensions only
    assert log_operation(method, name) == logged
