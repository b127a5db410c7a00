"""Fuzz the admin API with schemathesis against its own OpenAPI schema (bounded number of examples).

With an admin key: no request may answer 500. With a non-admin key: every request is refused (401/403) and the
cluster's state (keys, buckets and their settings, nodes' states, jobs) is exactly what it was.
The run uses a cluster of its own, since an admin fuzzer may legitimately drain nodes or change buckets.
"""
from __future__ import annotations

import base64
import collections

import pytest

from cluster import ALT, MAIN, Cluster

pytestmark = pytest.mark.integration
EXAMPLES = 25  # per operation and key


@pytest.fixture(scope="module")
def fuzz_cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("fuzz")).start()
    s3 = c.s3()
    s3.create_bucket(Bucket="fuzz-bucket")
    s3.put_object(Bucket="fuzz-bucket", Key="k", Body=b"x" * 100)
    yield c
    c.close()


def _basic(user) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()}


def _run(endpoint: str, user) -> collections.Counter:
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_url(f"{endpoint}/admin/openapi.json")
    statuses: collections.Counter = collections.Counter()
    failures = []
    for result in schema.get_all_operations():
        op = result.ok()

        @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck),
                  derandomize=True)
        @given(case=op.as_strategy())
        def one(case):
            resp = case.call(base_url=endpoint, headers=_basic(user))
            statuses[resp.status_code] += 1
            if resp.status_code >= 500 and resp.status_code != 501:
                failures.append(f"{case.method} {case.formatted_path} -> {resp.status_code}: {resp.text[:200]}")
        one()
    assert not failures, failures[:5]
    return statuses


def _state(c: Cluster) -> dict:
    from epochfs.frontends.cli.admin import AdminClient
    a = AdminClient(c.endpoint, MAIN[0], MAIN[1])
    return {"keys": a.call("GET", "/keys"), "buckets": a.call("GET", "/buckets"),
            "nodes": [(n["id"], n["state"]) for n in a.call("GET", "/nodes")],
            "jobs": [(j["id"], j["kind"]) for j in a.call("GET", "/jobs")]}


def test_fuzz_non_admin_changes_nothing(fuzz_cluster):
    before = _state(fuzz_cluster)
    statuses = _run(fuzz_cluster.endpoint, ALT)
    print("non-admin fuzz statuses:", dict(statuses))
    assert set(statuses) <= {400, 401, 403} and sum(statuses.values()) >= EXAMPLES  # 400: unparsable JSON
    assert _state(fuzz_cluster) == before


def test_fuzz_admin_no_server_errors(fuzz_cluster):
    statuses = _run(fuzz_cluster.endpoint, MAIN)
    print("admin fuzz statuses:", dict(statuses))
    assert sum(statuses.values()) >= 5 * EXAMPLES
    assert fuzz_cluster.s3().get_object(Bucket="fuzz-bucket", Key="k")["Body"].read() == b"x" * 100
