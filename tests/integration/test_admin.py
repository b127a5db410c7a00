"""The admin API, per-key bucket permissions, quotas, metrics and request ids, against a real cluster."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cluster import ALT, MAIN
from epochfs.frontends.cli.admin import AdminClient, AdminError, SigV4Auth

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def admin(cluster):
    return AdminClient(cluster.endpoint, MAIN[0], MAIN[1])


def _name() -> str:
    return f"adm-{uuid.uuid4().hex[:10]}"


def _code(exc: ClientError) -> str:
    return exc.response["Error"]["Code"]


def key_client(cluster, key: dict, **cfg):
    return boto3.client("s3", endpoint_url=cluster.endpoint, aws_access_key_id=key["access_key"],
                        aws_secret_access_key=key["secret_key"], region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}, **cfg))


def test_admin_api_needs_admin_credentials(cluster):
    url = f"{cluster.endpoint}/admin/v1/summary"
    r = httpx.get(url)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Basic")
    assert httpx.get(url, auth=(MAIN[0], "wrong-secret")).status_code == 401
    assert httpx.get(url, auth=("NOSUCHKEY", "whatever1")).status_code == 401
    assert httpx.get(url, auth=(ALT[0], ALT[1])).status_code == 403            # a valid key, not an admin
    assert httpx.get(url, auth=SigV4Auth(ALT[0], ALT[1])).status_code == 403
    assert httpx.get(url, auth=SigV4Auth(MAIN[0], "bad-secret")).status_code == 401
    assert httpx.get(url, auth=(MAIN[0], MAIN[1])).status_code == 200           # HTTP Basic
    assert httpx.get(url, auth=SigV4Auth(MAIN[0], MAIN[1])).status_code == 200  # SigV4
    assert httpx.get(f"{cluster.endpoint}/admin/ui").status_code == 401
    assert httpx.get(f"{cluster.endpoint}/admin/openapi.json").status_code == 200
    assert httpx.get(f"{cluster.endpoint}/admin/docs").status_code == 200


def test_summary_and_nodes(cluster, admin):
    nodes = admin.call("GET", "/nodes")
    assert len(nodes) == 3
    for n in nodes:
        assert n["state"] == "alive" and n["capacity"] > 0 and n["last_heartbeat_s"] < 5
        assert re.match(r"^127\.0\.0\.1:\d+$", n["address"])
        # capacity is the disk's free space plus what the node holds: other writers on the disk move it
        assert admin.call("GET", f"/nodes/{n['id']}") == {**n, "last_heartbeat_s": pytest.approx(
            n["last_heartbeat_s"], abs=5), "capacity": pytest.approx(n["capacity"], rel=0.01),
            "free": pytest.approx(n["free"], rel=0.01)}
    with pytest.raises(AdminError, match="404"):
        admin.call("GET", "/nodes/999")
    s = admin.call("GET", "/summary")
    assert s["health"] == "ok" and s["nodes"] == {"alive": 3}
    assert s["lost"] == 0
    # the three DataNodes share this machine's disk: its free space counts once (common/space.py), as `df` shows it
    assert s["free"] == pytest.approx(shutil.disk_usage(cluster.root).free, rel=0.02)
    assert s["capacity"] == pytest.approx(s["free"] + sum(n["used"] for n in nodes), rel=0.01)


def test_buckets_usage_patch_and_quota(cluster, admin):
    s3, b = cluster.s3(), _name()
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="a", Body=b"x" * 600)
    s3.put_object(Bucket=b, Key="dir/b", Body=b"y" * 100)
    s3.put_object(Bucket=b, Key="a", Body=b"x" * 500)  # an overwrite replaces the old size
    got = admin.call("GET", f"/buckets/{b}")
    assert (got["bytes"], got["objects"], got["replication"], got["write_policy"]) == (600, 2, 3, "async")
    assert any(x["name"] == b and x["objects"] == 2 for x in admin.call("GET", "/buckets"))
    got = admin.call("PATCH", f"/buckets/{b}", {"quota_bytes": 1000, "replication": 2, "write_policy": "sync:2"})
    assert (got["quota_bytes"], got["replication"], got["write_policy"]) == (1000, 2, "sync:2")

    with pytest.raises(ClientError) as e:  # 600 + 500 > 1000: refused before the body is stored
        s3.put_object(Bucket=b, Key="c", Body=b"z" * 500)
    assert _code(e.value) == "QuotaExceeded" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert "quota of 1000 bytes" in e.value.response["Error"]["Message"]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]] == ["a", "dir/b"]
    s3.put_object(Bucket=b, Key="a", Body=b"x" * 900)  # overwriting within the quota is fine
    s3.delete_object(Bucket=b, Key="dir/b")
    assert admin.call("GET", f"/buckets/{b}")["bytes"] == 900

    # a multipart upload is checked when it completes (parts of unknown total size)
    admin.call("PATCH", f"/buckets/{b}", {"quota_bytes": None, "quota_objects": 1})
    up = s3.create_multipart_upload(Bucket=b, Key="mp")["UploadId"]
    etag = s3.upload_part(Bucket=b, Key="mp", UploadId=up, PartNumber=1, Body=b"p" * 10)["ETag"]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up,
                                     MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert _code(e.value) == "QuotaExceeded" and "quota of 1 objects" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError):
        s3.head_object(Bucket=b, Key="mp")
    got = admin.call("PATCH", f"/buckets/{b}", {"quota_objects": None})
    assert got["quota_objects"] is None and got["quota_bytes"] is None and got["objects"] == 1
    with pytest.raises(AdminError, match="404"):
        admin.call("PATCH", "/buckets/no-such-bucket-here", {"replication": 2})
    with pytest.raises(AdminError, match="422"):
        admin.call("PATCH", f"/buckets/{b}", {"write_policy": "sometimes"})


def test_keys_and_bucket_permissions(cluster, admin):
    s3 = cluster.s3()
    readable, writable, other = _name(), _name(), _name()
    for b in (readable, writable, other):
        s3.create_bucket(Bucket=b)
        s3.put_object(Bucket=b, Key="obj", Body=b"data of " + b.encode())
    key = admin.call("POST", "/keys", {"name": "trainer", "buckets": {readable: "read", writable: "write"}})
    assert key["secret_key"] and key["source"] == "admin" and not key["disabled"]
    listed = {k["access_key"]: k for k in admin.call("GET", "/keys")}
    assert "secret_key" not in listed[key["access_key"]] and listed[MAIN[0]]["source"] == "bootstrap"
    assert admin.call("GET", f"/keys/{key['access_key']}")["buckets"] == {readable: "read", writable: "write"}

    k3 = key_client(cluster, key)
    assert sorted(b["Name"] for b in k3.list_buckets()["Buckets"]) == sorted([readable, writable])
    assert k3.get_object(Bucket=readable, Key="obj")["Body"].read() == b"data of " + readable.encode()
    assert k3.list_objects_v2(Bucket=readable)["KeyCount"] == 1
    with pytest.raises(ClientError) as e:
        k3.put_object(Bucket=readable, Key="new", Body=b"no")
    assert _code(e.value) == "AccessDenied"
    k3.put_object(Bucket=writable, Key="new", Body=b"yes")
    k3.delete_object(Bucket=writable, Key="obj")
    for call in (lambda: k3.get_object(Bucket=other, Key="obj"), lambda: k3.list_objects_v2(Bucket=other),
                 lambda: k3.put_object(Bucket=other, Key="x", Body=b"x"), lambda: k3.head_bucket(Bucket=other),
                 lambda: k3.delete_bucket(Bucket=writable), lambda: k3.get_bucket_acl(Bucket=writable)):
        with pytest.raises(ClientError) as e:
            call()
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    # presigned URLs carry the signer's rights
    ok = k3.generate_presigned_url("get_object", Params={"Bucket": readable, "Key": "obj"})
    assert httpx.get(ok).content == b"data of " + readable.encode()
    assert httpx.get(k3.generate_presigned_url("get_object", Params={"Bucket": other, "Key": "obj"})).status_code == 403
    put = k3.generate_presigned_url("put_object", Params={"Bucket": readable, "Key": "p"})
    assert httpx.put(put, content=b"x").status_code == 403

    # grant replaces the permissions; owner allows bucket settings
    admin.call("PATCH", f"/keys/{key['access_key']}", {"buckets": {other: "owner"}})
    time.sleep(2.1)  # other gateways pick the change up within the cache TTL; this one forgot at once
    assert k3.get_bucket_acl(Bucket=other)["Owner"]
    with pytest.raises(ClientError):
        k3.get_object(Bucket=readable, Key="obj")

    admin.call("PATCH", f"/keys/{key['access_key']}", {"disabled": True})
    with pytest.raises(ClientError) as e:
        k3.list_buckets()
    assert _code(e.value) == "InvalidAccessKeyId"
    admin.call("PATCH", f"/keys/{key['access_key']}", {"disabled": False})
    assert k3.list_buckets()["Buckets"][0]["Name"] == other
    admin.call("DELETE", f"/keys/{key['access_key']}")
    with pytest.raises(AdminError, match="404"):
        admin.call("GET", f"/keys/{key['access_key']}")
    with pytest.raises(ClientError) as e:
        k3.list_buckets()
    assert _code(e.value) == "InvalidAccessKeyId"
    with pytest.raises(AdminError, match="409"):
        admin.call("DELETE", f"/keys/{MAIN[0]}")


def test_admin_created_admin_key_and_fixed_key(cluster, admin):
    ak = "FIXED" + uuid.uuid4().hex[:8].upper()
    k = admin.call("POST", "/keys", {"access_key": ak, "secret_key": "s3cr3t-value", "admin": True})
    assert (k["access_key"], k["secret_key"], k["admin"]) == (ak, "s3cr3t-value", True)
    assert AdminClient(cluster.endpoint, ak, "s3cr3t-value").call("GET", "/summary")["health"]
    with pytest.raises(AdminError, match="409"):
        admin.call("POST", "/keys", {"access_key": ak})
    admin.call("DELETE", f"/keys/{ak}")


def test_anonymous_denied_unless_public(cluster):
    s3, b = cluster.s3(), _name()
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="private", Body=b"p")
    s3.put_object(Bucket=b, Key="public", Body=b"q", ACL="public-read")
    assert httpx.get(f"{cluster.endpoint}/{b}/private").status_code == 403
    assert httpx.get(f"{cluster.endpoint}/{b}?list-type=2").status_code == 403
    assert httpx.put(f"{cluster.endpoint}/{b}/new", content=b"x").status_code == 403
    assert httpx.get(f"{cluster.endpoint}/{b}/public").content == b"q"


def test_jobs(cluster, admin):
    job = admin.call("POST", "/jobs", {"kind": "gc"})
    assert job["kind"] == "gc" and job["state"] == "done" and job["progress"] == 1.0
    assert any(j["id"] == job["id"] for j in admin.call("GET", "/jobs"))
    for kind in ("scrub", "rebalance"):  # test_jobs.py follows them to the end
        started = admin.call("POST", "/jobs", {"kind": kind})
        assert started["kind"] == kind and started["state"] in ("running", "done")
        assert any(j["id"] == started["id"] for j in admin.call("GET", "/jobs"))
    with pytest.raises(AdminError, match="404"):
        admin.call("POST", "/nodes/999/decommission")
    with pytest.raises(AdminError, match="404"):
        admin.call("POST", "/jobs", {"kind": "scrub", "node": 999})
    with pytest.raises(AdminError, match="422"):
        admin.call("POST", "/jobs", {"kind": "rebalance", "node": 1})
    with pytest.raises(AdminError, match="422"):
        admin.call("POST", "/jobs", {"kind": "defrag"})


def test_metrics_after_traffic(cluster):
    s3, b = cluster.s3(), _name()
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="m", Body=b"m" * 3000)
    assert s3.get_object(Bucket=b, Key="m")["Body"].read() == b"m" * 3000
    with pytest.raises(ClientError):
        s3.get_object(Bucket=b, Key="missing")
    text = httpx.get(f"{cluster.endpoint}/metrics").text

    def value(pattern: str) -> float:
        m = re.search("^" + pattern + r" ([0-9.e+]+)$", text, re.M)
        assert m, pattern
        return float(m.group(1))
    assert value(r'epochfs_s3_requests_total\{operation="PutObject",status="200"\}') >= 1
    assert value(r'epochfs_s3_requests_total\{operation="GetObject",status="404"\}') >= 1
    assert value(r'epochfs_s3_request_seconds_count\{operation="GetObject"\}') >= 2
    assert value(r'epochfs_s3_received_bytes_total\{operation="PutObject"\}') >= 3000
    assert value(r'epochfs_s3_sent_bytes_total\{operation="GetObject"\}') >= 3000
    assert value(r'epochfs_cache_requests_total\{cache="buckets",result="hit"\}') >= 1
    nn = httpx.get(f"http://127.0.0.1:{cluster.ports['nn'][0]}/metrics").text
    assert re.search(r'^epochfs_datanodes\{state="alive"\} 3\.0$', nn, re.M)
    assert re.search(r"^epochfs_under_replicated_blocks 0\.0$", nn, re.M)
    assert re.search(r'^epochfs_replication_lag\{node="\d+"\} ', nn, re.M)
    assert float(re.search(r"^epochfs_blocks ([0-9.]+)$", nn, re.M).group(1)) >= 1
    assert re.search(rf'^epochfs_bucket_bytes\{{bucket="{b}"\}} 3000\.0$', nn, re.M)
    dn = httpx.get(f"http://127.0.0.1:{cluster.ports['dn1'][0]}/metrics").text
    assert re.search(r"^epochfs_datanode_stored_blocks [0-9.]+$", dn, re.M)
    assert re.search(r"^epochfs_datanode_replication_queue [0-9.]+$", dn, re.M)


def test_error_request_id_is_logged(cluster):
    r = httpx.get(f"{cluster.endpoint}/no-such-bucket-{uuid.uuid4().hex[:8]}/k")
    rid = re.search(r"<RequestId>(\w+)</RequestId>", r.text).group(1)
    assert r.headers["x-amz-request-id"] == rid
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [ln for ln in (cluster.root / "logs" / "gw.log").read_text().splitlines() if f"rid={rid}" in ln]
        if lines:
            break
        time.sleep(0.1)
    assert lines and "level=info" in lines[0] and "code=" in lines[0] and "status=" in lines[0]


def _row(table: str, name: str) -> list[str]:
    """The cells of the row named `name` in a table as rich draws it, a cell folded over several lines joined."""
    lines = table.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith(f"│ {name} "))
    cells = [c.strip() for c in lines[i].split("│")[1:-1]]
    for ln in lines[i + 1:]:
        more = [c.strip() for c in ln.split("│")[1:-1]]
        if not more or more[0]:  # a border, or the next row
            break
        cells = [f"{a} {b}".strip() for a, b in zip(cells, more)]
    return cells


def test_cli_admin_tables(cluster):
    env = {**os.environ, "AWS_ENDPOINT_URL": cluster.endpoint, "AWS_ACCESS_KEY_ID": MAIN[0],
           "AWS_SECRET_ACCESS_KEY": MAIN[1], "COLUMNS": "200"}

    def cli(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "epochfs.frontends.cli.main", "admin", *args], env=env,
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0) == ok, r.stderr
        return r.stdout + r.stderr
    status = cli("status")
    assert "health" in status and "ok" in status
    # one NameNode: its address and role, no log columns (an HA cluster's table: test_ha_edges)
    assert "embedded (this gateway's)" in status and "lag" not in status and "applied" not in status
    nodes = cli("nodes")
    assert nodes.count("alive") == 3 and "127.0.0.1:" in nodes
    b = _name()
    cluster.s3().create_bucket(Bucket=b)
    assert b in cli("buckets")
    # in a terminal of 80 columns every table still shows what names its rows whole: the bucket list a line per
    # bucket (a table of 16 columns was all ellipses there), the DataNodes' addresses, `buckets show` each setting
    cluster.s3().put_bucket_tagging(Bucket=b, Tagging={"TagSet": [{"Key": "team", "Value": "vision"}]})
    env["COLUMNS"] = "80"
    listed = cli("buckets")
    assert max(map(len, listed.splitlines())) <= 80
    cells = _row(listed, b)  # (a cell of the last two columns may fold onto the row's next lines)
    assert cells[:4] == [b, MAIN[2][:12], "0 B", "0"] and re.fullmatch(r"[\d.]+ MiB x3 async", cells[4]) \
        and cells[5] == "1 tag", listed
    addrs = re.findall(r"127\.0\.0\.1:(\d+)", cli("nodes"))
    assert {cluster.ports[f"dn{i}"][1] for i in (1, 2, 3)} <= set(map(int, addrs))
    shown = cli("buckets", "show", b)
    for field in ("owner", "size", "objects", "block size", "replicas", "write policy", "quota", "object lock",
                  "encryption", "policy", "public access block", "team=vision", "lifecycle"):
        assert field in shown, (field, shown)
    env["COLUMNS"] = "200"
    created = cli("keys", "create", "--name", "cli-key", "--bucket", f"{b}:read")
    ak = re.search(r"access key (\S+)", created).group(1)
    assert re.search(r"secret key \S+", created)
    assert ak in cli("keys") and f"{b}:read" in cli("keys")
    assert "disabled" in cli("keys", "disable", ak)
    cli("keys", "delete", ak)
    assert ak not in cli("keys")
    assert re.search(r"rebalance job rebalance-\w+: (running|done)", cli("jobs", "rebalance"))
    assert "rebalance" in cli("jobs")
    assert "HTTP 404" in cli("decommission", "999", ok=False)
    assert "HTTP 403" in cli("--access-key", ALT[0], "--secret-key", ALT[1], "status", ok=False)
    env.pop("AWS_ENDPOINT_URL")
    assert "need an endpoint" in cli("status", ok=False)
