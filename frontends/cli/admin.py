"""`epochfs admin ...`: the cluster's state and its access keys as tables, from the gateway's admin API.

Endpoint and credentials come from --endpoint/--access-key/--secret-key or from AWS_ENDPOINT_URL,
AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (what `epochfs up` prints). Requests are signed with SigV4, so the
secret never crosses the wire.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
from urllib.parse import urlsplit

import httpx
from rich.console import Console
from rich.table import Table

from epochfs.common import sigv4


class SigV4Auth(httpx.Auth):
    """Signs each request (headers, query and a hashed body) the way the gateway's verifier checks it."""

    requires_request_body = True

    def __init__(self, access_key: str, secret_key: str, region: str = "us-east-1") -> None:
        self.access_key, self.secret_key, self.region = access_key, secret_key, region

    def auth_flow(self, request: httpx.Request):
        amz_date = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        payload = hashlib.sha256(request.content).hexdigest()
        request.headers["x-amz-date"] = amz_date
        request.headers["x-amz-content-sha256"] = payload
        signed = sorted([("host", request.url.netloc.decode()), ("x-amz-content-sha256", payload),
                         ("x-amz-date", amz_date)])
        query = httpx.QueryParams(request.url.query).multi_items()
        creq, names = sigv4.canonical_request(request.method, sigv4.canonical_path(request.url.path),
                                              sigv4.canonical_query(query), signed, payload)
        scope = sigv4.scope(amz_date[:8], self.region, "s3")
        sig = sigv4.sign(sigv4.signing_key(self.secret_key, amz_date[:8], self.region, "s3"),
                         sigv4.string_to_sign(amz_date, scope, creq))
        request.headers["authorization"] = (f"{sigv4.ALGORITHM} Credential={self.access_key}/{scope}, "
                                            f"SignedHeaders={names}, Signature={sig}")
        yield request


class AdminError(Exception):
    pass


class AdminClient:
    def __init__(self, endpoint: str, access_key: str, secret_key: str, timeout: float = 30.0) -> None:
        self.http = httpx.Client(base_url=endpoint.rstrip("/") + "/admin/v1", timeout=timeout,
                                 auth=SigV4Auth(access_key, secret_key))

    def call(self, method: str, path: str, body: dict | None = None, content: bytes | None = None):
        r = self.http.request(method, path, json=body) if content is None else \
            self.http.request(method, path, content=content, headers={"content-type": "application/json"})
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text
            raise AdminError(f"{method} {path}: HTTP {r.status_code}: {detail}")
        return r.json() if r.content else None


def human_size(n) -> str:
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _table(title: str, columns: list[str], rows: list[list], keep: tuple[int, ...] = (), fold: bool = False) -> Table:
    """`keep`: columns besides the first never folded either (an address that scripts grep for)."""
    t = Table(title=title)
    for i, c in enumerate(columns):
        # the first column names the row (a bucket, a key): never folded; `fold`: a word too long for its column
        # (an owner id) goes on in the next line, not cut off with an ellipsis
        t.add_column(c, no_wrap=i == 0 or i in keep, overflow="fold" if fold else "ellipsis")
    for r in rows:
        t.add_row(*("-" if v is None else str(v) for v in r))
    return t


def show_status(c: AdminClient) -> Table:
    s = c.call("GET", "/summary")
    g = s["gateway"]
    rows = [["health", s["health"]], ["capacity", human_size(s["capacity"])], ["used", human_size(s["used"])],
            ["free", human_size(s["free"])], ["buckets", s["buckets"]], ["objects", s["objects"]],
            ["object bytes", human_size(s["bytes"])],
            ["DataNodes", ", ".join(f"{v} {k}" for k, v in s["nodes"].items()) or "none"],
            ["under-replicated blocks", s["under_replicated"]], ["lost blocks", s["lost"]],
            ["repairs in flight", s["repairs_in_flight"]],
            ["copies waiting", f"{s['waiting_for_copies']}" + (" (" + ", ".join(
                f"{k.replace('_', ' ')}: {v}" for k, v in sorted(s["waiting_reasons"].items())) + ")"
                if s["waiting_reasons"] else "")],
            ["replica pushes queued", s["replication_queued"]],
            ["gateway requests", f"{g['requests']:.0f} ({g['errors']:.0f} errors)"],
            ["gateway bytes in / out", f"{human_size(g['bytes_in'])} / {human_size(g['bytes_out'])}"]]
    return _table("epochfs cluster", ["", ""], rows)


def show_ha(c: AdminClient) -> Table:
    h = c.call("GET", "/ha")
    if h["mode"] != "etcd":  # one NameNode: no log, lag or standbys to show
        return _table("NameNode", ["address", "role", "error"], [
            [n["address"], n["role"] + (" (this gateway's)" if n["current"] else ""), n["error"] or ""]
            for n in h["namenodes"]], keep=(1,))
    rows = [[n["name"], n["address"], n["role"] + (" (this gateway's)" if n["current"] else ""), n["applied"], n["lag"],
             f"{n['stale_served']}/{n['stale_refused']}", n["error"] or ""] for n in h["namenodes"]]
    title = (f"NameNodes: {h['mode']}, epoch {h['epoch']}, leader {h['leader'] or 'none'}, log "
             f"{h['log_first']}..{h['log_end']}")
    # stale ok/no: the stale reads this NameNode served as a standby / refused as too stale
    t = _table(title, ["name", "address", "role", "applied", "lag", "stale ok/no", "error"], rows, keep=(1,))
    grid = Table.grid()
    grid.add_row(t)
    grid.add_row(_table("etcd", ["endpoint", "health", "leader", "db size", "revision", "error"], [
        [e["endpoint"], "healthy" if e["healthy"] else "UNHEALTHY", "yes" if e["leader"] else "",
         None if e["db_size"] is None else human_size(e["db_size"]), e["revision"], e["error"] or ""]
        for e in h["etcd"]]))
    return grid


def show_cluster(c: AdminClient):
    """`admin status`: the cluster summary (if the active NameNode answers) and the NameNodes' HA state."""
    grid = Table.grid()
    try:
        grid.add_row(show_status(c))
    except AdminError as e:
        grid.add_row(f"cluster summary unavailable: {e}")
    grid.add_row(show_ha(c))
    return grid


def show_nodes(c: AdminClient) -> Table:
    rows = [[n["id"], n["address"], n["state"] + (f": {n['write_error']}" if n.get("write_error") else ""),
             human_size(n["capacity"]), human_size(n["used"]), n["blocks"],
             "never" if n["last_heartbeat_s"] is None else f"{n['last_heartbeat_s']:.1f}s ago",
             n["replication_lag"]] for n in c.call("GET", "/nodes")]
    return _table("DataNodes", ["id", "address", "state", "capacity", "used", "blocks", "heartbeat",
                                "repl. lag"], rows, keep=(1, 3, 6))


def _lock(b: dict) -> str:
    lk = b.get("object_lock")
    if lk is None:
        return "-"
    r = lk.get("rule")
    return "on" if r is None else f"{r['mode']} {r['days']}d" if r.get("days") else f"{r['mode']} {r['years']}y"


def _logging(b: dict) -> str:
    lg = b.get("logging")
    return "-" if lg is None else f"{lg['target_bucket']}/{lg['target_prefix']}"


def _storage(b: dict) -> str:
    """Block size, replicas and write policy in one cell: "4.0 MiB x3 async"."""
    return f"{human_size(b['block_size'])} x{b['replication']} {b['write_policy']}"


def _policy(b: dict) -> str:
    return "public" if b.get("policy_public") else "yes" if b.get("policy") else "-"


def _public_block(b: dict) -> str:
    return ",".join(k for k, v in (b.get("public_access_block") or {}).items() if v) or "-"


def _quota(b: dict) -> str:
    q = [] if b["quota_bytes"] is None else [human_size(b["quota_bytes"])]
    q += [] if b["quota_objects"] is None else [f"{b['quota_objects']} objects"]
    return " / ".join(q) or "-"


def _settings(b: dict) -> str:
    """What a bucket has set beyond its storage, in a few words (the list's last column; `buckets show` has each)."""
    n_tags, n_rules = len(b.get("tags") or {}), len(b.get("lifecycle") or [])
    parts = [f"quota {_quota(b)}" if _quota(b) != "-" else "", f"policy {_policy(b)}" if b.get("policy") else "",
             f"public access block {_public_block(b)}" if _public_block(b) != "-" else "",
             f"object lock {_lock(b)}" if b.get("object_lock") else "",
             f"logging to {_logging(b)}" if b.get("logging") else "",
             f"encryption {_encryption(b)}" if b.get("encryption") else "",
             f"{n_tags} tag{'s' * (n_tags != 1)}" if n_tags else "",
             f"{n_rules} lifecycle rule{'s' * (n_rules != 1)}" if n_rules else ""]
    return ", ".join(p for p in parts if p) or "-"


def show_buckets(c: AdminClient) -> Table:
    """`admin buckets`: a line per bucket that fits a terminal of 80 columns (`buckets show NAME`: all of one)."""
    rows = [[b["name"], b["owner"][:12], human_size(b["bytes"]), b["objects"], _storage(b), _settings(b)]
            for b in c.call("GET", "/buckets")]
    return _table("Buckets", ["name", "owner", "size", "objects", "block, replicas, writes", "settings"], rows,
                  keep=(2, 3))


def _bucket_policy(c: AdminClient, args) -> str:
    """epochfs admin buckets policy NAME [--set FILE|- | --delete]: show, set or remove a bucket's policy."""
    if not args.name:
        raise AdminError("buckets policy needs the bucket name")
    if args.set is not None and args.delete:
        raise AdminError("--set and --delete exclude each other")
    if args.set is not None:
        text = sys.stdin.read() if args.set == "-" else open(args.set, encoding="utf-8").read()
        try:
            json.loads(text)
        except ValueError as e:
            raise AdminError(f"{args.set}: not JSON ({e})") from None
        c.call("PUT", f"/buckets/{args.name}/policy", content=text.encode())
        return f"{args.name}: policy set"
    if args.delete:
        c.call("DELETE", f"/buckets/{args.name}/policy")
        return f"{args.name}: policy removed"
    b = c.call("GET", f"/buckets/{args.name}")
    if not b.get("policy"):
        return f"{args.name}: no policy"
    return json.dumps(json.loads(b["policy"]), indent=2)


def _rule_text(r: dict) -> str:
    what = [f"prefix {r['prefix']!r}"] if r.get("prefix") else []
    what += [f"tag {k}={v}" for k, v in (r.get("tags") or {}).items()]
    what += [f"size > {r['size_gt']}"] if r.get("size_gt") is not None else []
    what += [f"size < {r['size_lt']}"] if r.get("size_lt") is not None else []
    acts = [f"{label} {r[k]}" for k, label in (
        ("expiration_days", "expire after days:"), ("expiration_date", "expire on"),
        ("noncurrent_days", "noncurrent versions after days:"), ("newer_noncurrent", "keeping newest:"),
        ("abort_upload_days", "abort uploads after days:")) if r.get(k) is not None]
    if r.get("expired_object_delete_marker"):
        acts.append("remove lone delete markers")
    return f"{', '.join(what) or 'every object'}: {'; '.join(acts)}"


def show_bucket(c: AdminClient, name: str) -> Table:
    """`buckets show NAME`: a bucket's size, storage, settings, tags and lifecycle rules."""
    b = c.call("GET", f"/buckets/{name}")
    rows = [["owner", b["owner"]], ["size", human_size(b["bytes"])], ["objects", b["objects"]],
            ["block size", human_size(b["block_size"])], ["replicas", b["replication"]], ["write policy", b["write_policy"]],
            ["quota", _quota(b)], ["object lock", _lock(b)], ["logging", _logging(b)], ["encryption", _encryption(b)],
            ["policy", _policy(b)], ["public access block", _public_block(b)],
            ["tags", ", ".join(f"{k}={v}" for k, v in (b.get("tags") or {}).items()) or "none"]]
    for r in b.get("lifecycle") or []:
        rows.append([f"rule {r['id']}" + ("" if r["enabled"] else " (disabled)"), _rule_text(r)])
    if not b.get("lifecycle"):
        rows.append(["lifecycle", "none"])
    return _table(f"Bucket {name}", ["", ""], rows, fold=True)


def _bucket_set(c: AdminClient, args) -> Table:
    """`buckets set NAME [--object-lock on|GOVERNANCE:30d|COMPLIANCE:1y] [--logging TARGET[/PREFIX]|off]
    [--tag K=V ... | --clear-tags] [--lifecycle FILE | --clear-lifecycle]`: one PATCH with all of them, then the
    bucket as `buckets show` shows it."""
    if not args.name:
        raise AdminError("buckets set needs the bucket name")
    patch: dict = {}
    if args.object_lock:
        spec = args.object_lock
        if spec == "on":
            patch["object_lock"] = {"rule": None}
        else:
            mode, _, period = spec.partition(":")
            unit = {"d": "days", "y": "years"}.get(period[-1:])
            if mode not in ("GOVERNANCE", "COMPLIANCE") or unit is None or not period[:-1].isdigit():
                raise AdminError(f"bad --object-lock {spec!r}: want on, or GOVERNANCE|COMPLIANCE:<N>d|<N>y")
            patch["object_lock"] = {"rule": {"mode": mode, unit: int(period[:-1])}}
    if args.logging:
        if args.logging == "off":
            patch["logging"] = None
        else:
            target, _, prefix = args.logging.partition("/")
            patch["logging"] = {"target_bucket": target, "target_prefix": prefix}
    if args.clear_tags and args.tag:
        raise AdminError("--tag and --clear-tags exclude each other")
    if args.clear_tags:
        patch["tags"] = None
    elif args.tag:
        tags = {}
        for spec in args.tag:
            k, sep, v = spec.partition("=")
            if not sep or not k:
                raise AdminError(f"bad --tag {spec!r}: want KEY=VALUE")
            tags[k] = v
        patch["tags"] = tags
    if args.clear_lifecycle and args.lifecycle:
        raise AdminError("--lifecycle and --clear-lifecycle exclude each other")
    if args.clear_lifecycle:
        patch["lifecycle"] = None
    elif args.lifecycle:
        try:
            with open(args.lifecycle, "rb") as f:
                patch["lifecycle"] = json.load(f)
        except (OSError, ValueError) as e:
            raise AdminError(f"can't read lifecycle rules from {args.lifecycle}: {e}") from None
    if not patch:
        raise AdminError("buckets set: nothing to set (--object-lock, --logging, --tag, --clear-tags, "
                         "--lifecycle FILE, --clear-lifecycle)")
    c.call("PATCH", f"/buckets/{args.name}", patch)
    return show_bucket(c, args.name)


def _encryption(b: dict) -> str:
    """A bucket's default encryption as the table shows it: "-", "AES256", "aws:kms (KEY)"."""
    enc = b.get("encryption")
    if not enc:
        return "-"
    return f"aws:kms ({enc.get('kms_key_id') or 'aws/s3'})" if enc["alg"] == "aws:kms" else enc["alg"]


def _bucket_encryption(c: AdminClient, args) -> str:
    """`buckets encryption NAME AES256|aws:kms|none [--kms-key ID]`: set or remove the default encryption."""
    if not args.name or not args.value:
        raise AdminError("buckets encryption needs a bucket and AES256, aws:kms or none")
    if args.value not in ("AES256", "aws:kms", "none"):
        raise AdminError(f"unknown encryption {args.value!r}: AES256, aws:kms or none")
    if args.kms_key and args.value != "aws:kms":
        raise AdminError("--kms-key goes with aws:kms")
    enc = None if args.value == "none" else {"alg": args.value}
    if args.kms_key:
        enc["kms_key_id"] = args.kms_key
    body = {"encryption": enc}
    b = c.call("PATCH", f"/buckets/{args.name}", body)
    return f"{b['name']}: default encryption {_encryption(b)}"


def _kms_action(c: AdminClient, args) -> str:
    """`kms create ID [--description TEXT]`."""
    if args.action != "create" or not args.key_id:
        raise AdminError("kms: list (no arguments) or `create KEY_ID [--description TEXT]`")
    k = c.call("POST", "/kms/keys", {"key_id": args.key_id, "description": args.description or ""})
    return f"KMS key {k['key_id']} created"


def show_kms(c: AdminClient) -> Table:
    r = c.call("GET", "/kms/keys")
    note = "" if r["master_key"] else " (no master key on this gateway: only SSE-C works)"
    return _table("KMS keys" + note, ["key id"], [[k] for k in r["keys"]])


def show_keys(c: AdminClient) -> Table:
    rows = [[k["access_key"], k["name"], "yes" if k["admin"] else "", "disabled" if k["disabled"] else "active",
             k["source"], "(owner and ACL rules)" if k["buckets"] is None else
             ", ".join(f"{b}:{p}" for b, p in sorted(k["buckets"].items())) or "none"]
            for k in c.call("GET", "/keys")]
    return _table("Access keys", ["access key", "name", "admin", "state", "source", "buckets"], rows)


def show_jobs(c: AdminClient) -> Table:
    rows = [[j["id"], j["kind"], j["state"], "-" if j["progress"] is None else f"{100 * j['progress']:.0f}%",
             j.get("node"), json.dumps(j["detail"])[:60]] for j in c.call("GET", "/jobs")]
    return _table("Jobs", ["id", "kind", "state", "progress", "node", "detail"], rows)


def _perms(specs: list[str] | None) -> dict:
    out = {}
    for spec in specs or []:
        bucket, sep, perm = spec.rpartition(":")
        if not sep or perm not in ("read", "write", "owner"):
            raise AdminError(f"bad --bucket {spec!r}: want BUCKET:read|write|owner")
        out[bucket] = perm
    return out


def run(args) -> int:
    if args.what is None:  # `epochfs admin` alone: what it can do
        args.parser.print_help(sys.stderr)
        return 2
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL")
    ak = args.access_key or os.environ.get("AWS_ACCESS_KEY_ID")
    sk = args.secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not (endpoint and ak and sk):
        print("epochfs admin: need an endpoint and admin credentials (--endpoint/--access-key/--secret-key or "
              "AWS_ENDPOINT_URL/AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, as `epochfs up` prints)", file=sys.stderr)
        return 2
    if urlsplit(endpoint).scheme not in ("http", "https"):
        print(f"epochfs admin: bad endpoint {endpoint!r}", file=sys.stderr)
        return 2
    c, out = AdminClient(endpoint, ak, sk), Console()
    try:
        if args.what == "buckets" and args.action == "policy":
            print(_bucket_policy(c, args))
        elif args.what == "buckets" and args.action == "encryption":
            out.print(_bucket_encryption(c, args))
        elif args.what == "kms" and args.action is not None:
            out.print(_kms_action(c, args))
        elif args.what == "keys" and args.action != "list":
            out.print(_key_action(c, args))
        elif args.what == "buckets" and args.action == "show":
            if not args.name:
                raise AdminError("buckets show needs the bucket name")
            out.print(show_bucket(c, args.name))
        elif args.what == "jobs" and args.action != "list":
            job = c.call("POST", "/jobs", {"kind": args.action, **({} if args.node is None else {"node": args.node})})
            out.print(f"{job['kind']} job {job['id']}: {job['state']}")
        elif args.what == "buckets" and args.action == "set":
            out.print(_bucket_set(c, args))
        elif args.what == "decommission":
            job = c.call("POST", f"/nodes/{args.node}/decommission")
            out.print(f"DataNode {args.node}: decommission {job['state']} (job {job['id']})")
        else:
            out.print({"status": show_cluster, "nodes": show_nodes, "buckets": show_buckets, "keys": show_keys,
                       "kms": show_kms,
                       "jobs": show_jobs}[args.what](c))
    except (AdminError, httpx.HTTPError) as e:
        print(f"epochfs admin: {e}", file=sys.stderr)
        return 1
    return 0


def _key_action(c: AdminClient, args):
    if args.action == "create":
        k = c.call("POST", "/keys", {"name": args.name, "buckets": _perms(args.bucket), "admin": args.admin})
        return (f"access key {k['access_key']}\nsecret key {k['secret_key']}\n"
                "(the secret is shown only now)")
    if not args.key:
        raise AdminError(f"keys {args.action} needs the access key")
    if args.action == "delete":
        c.call("DELETE", f"/keys/{args.key}")
        return f"deleted {args.key}"
    if args.action in ("disable", "enable"):
        c.call("PATCH", f"/keys/{args.key}", {"disabled": args.action == "disable"})
        return f"{args.action}d {args.key}"
    c.call("PATCH", f"/keys/{args.key}", {"buckets": _perms(args.bucket)})
    return f"{args.key}: bucket permissions set"


def add_parser(sub) -> None:
    ap = sub.add_parser("admin", help="cluster status, DataNodes, buckets, access keys and jobs (admin API)")
    ap.add_argument("--endpoint", help="gateway URL (default: $AWS_ENDPOINT_URL)")
    ap.add_argument("--access-key", help="admin access key (default: $AWS_ACCESS_KEY_ID)")
    ap.add_argument("--secret-key", help="admin secret key (default: $AWS_SECRET_ACCESS_KEY)")
    what = ap.add_subparsers(dest="what")  # none: `run` prints this parser's help
    for name, help_ in (("status", "cluster summary, NameNodes (role, log position, lag) and etcd"), ("nodes", "DataNodes")):
        what.add_parser(name, help=help_)
    kms = what.add_parser("kms", help="the KMS key ids SSE-KMS may name (GW_SSE_KMS_KEYS and created ones); "
                                      "`create KEY_ID` makes one")
    kms.add_argument("action", nargs="?", choices=["create"], help="create a key id")
    kms.add_argument("key_id", nargs="?", help="the new key id")
    kms.add_argument("--description", help="create: a note kept with the id")
    buckets = what.add_parser("buckets", help="buckets, quotas, policies, object lock, logging, default encryption, "
                                              "tags and lifecycle rules; `show` one bucket, `policy` shows or sets "
                                              "its policy, `set` changes object lock, logging, tags and lifecycle, "
                                              "`encryption` sets or removes the default encryption")
    buckets.add_argument("action", nargs="?", default="list", choices=("list", "show", "policy", "set", "encryption"))
    buckets.add_argument("name", nargs="?", help="the bucket (show, policy, set, encryption)")
    buckets.add_argument("value", nargs="?", metavar="AES256|aws:kms|none", help="the default encryption (encryption)")
    buckets.add_argument("--set", metavar="FILE", help="policy: set the policy from a JSON file (- reads stdin)")
    buckets.add_argument("--delete", action="store_true", help="policy: remove the policy")
    buckets.add_argument("--object-lock", metavar="on|MODE:<N>d|MODE:<N>y",
                         help="set: turn object lock on (the bucket needs versioning Enabled), with a default "
                              "retention (GOVERNANCE or COMPLIANCE, N days or years)")
    buckets.add_argument("--logging", metavar="TARGET[/PREFIX]|off", help="set: server access logs into bucket TARGET")
    buckets.add_argument("--tag", action="append", metavar="KEY=VALUE", help="set: the bucket's tags (repeatable; "
                         "replaces its tag set)")
    buckets.add_argument("--clear-tags", action="store_true", help="set: delete the bucket's tag set")
    buckets.add_argument("--lifecycle", metavar="FILE", help="set: the lifecycle rules, a JSON list as the admin API "
                         "takes them ([{\"id\": \"tmp\", \"prefix\": \"tmp/\", \"expiration_days\": 7}])")
    buckets.add_argument("--clear-lifecycle", action="store_true", help="set: delete the lifecycle rules")
    buckets.add_argument("--kms-key", help="encryption: the KMS key id of aws:kms (default: aws/s3)")
    jobs = what.add_parser("jobs", help="list scrub / rebalance / decommission / gc jobs, or start one")
    jobs.add_argument("action", nargs="?", default="list", choices=("list", "scrub", "rebalance", "gc"))
    jobs.add_argument("--node", type=int, help="scrub only this DataNode")
    keys = what.add_parser("keys", help="list, create, disable, enable, delete keys; set bucket permissions")
    keys.add_argument("action", nargs="?", default="list",
                      choices=("list", "create", "disable", "enable", "delete", "grant"))
    keys.add_argument("key", nargs="?", help="the access key (all actions but list and create)")
    keys.add_argument("--bucket", action="append", metavar="BUCKET:read|write|owner",
                      help="a bucket permission (create, grant; repeatable; grant replaces the key's list)")
    keys.add_argument("--name")
    keys.add_argument("--admin", action="store_true", help="create an admin key")
    dec = what.add_parser("decommission", help="drain a DataNode")
    dec.add_argument("node", type=int)
    ap.set_defaults(func=run, parser=ap)
