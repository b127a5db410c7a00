"""The lifecycle worker: applies the buckets' lifecycle rules (S3's expiration actions) at a bounded rate.

One sweep visits every bucket that has enabled rules: each key's versions (read again from the store right before
acting, so a write that came in meanwhile is never undone by a stale decision) and the bucket's multipart uploads.
  - Expiration Days/Date: the current version of a matching object expires, as a DELETE without a version id would
    do it (removed in an unversioned bucket, a delete marker on top in a versioned one);
  - a current delete marker with no older versions is removed when ExpiredObjectDeleteMarker is set, or when it is
    older than the rule's Expiration Days (as S3 does);
  - NoncurrentVersionExpiration: a noncurrent version older than NoncurrentDays (counted from when a newer version
    replaced it) is removed, except the NewerNoncurrentVersions newest noncurrent ones;
  - AbortIncompleteMultipartUpload: uploads started DaysAfterInitiation ago are aborted.
Each action is one namespace command issued through the MetaStore (times and ids chosen before it is applied); at
most `actions_per_s` actions run per second, and the sweep yields to the NameNode's other work after every
`scan_batch` listed versions. Each sweep that finds rules is a job (kind "lifecycle") in `epochfs admin jobs`.

A "day" is `day_s` seconds (NN_LIFECYCLE_DAY_S, 86,400; shorter only for tests, as Ceph RGW's rgw_lc_debug_interval).
"""
from __future__ import annotations

import collections
import logging
import time
import uuid

import anyio
import msgspec

from epochfs.common import errors, lifecycle
from epochfs.common.lifecycle import due_ns, matches
from epochfs.common.messages import LifecycleRule
from epochfs.common.worker import PassStats, Worker

from .meta.lock import lock_reason
from .metastore import MetaStore

log = logging.getLogger("epochfs.namenode.lifecycle")

KEEP_SWEEPS = 10  # finished sweeps listed as jobs, at most


class LifecycleWorker(Worker):
    def __init__(self, meta: MetaStore, *, day_s: float = lifecycle.DAY_S, interval_s: float | None = None,
                 actions_per_s: float = 200.0, scan_batch: int = 1000, clock=time.time_ns) -> None:
        self.meta, self.day_s = meta, day_s
        self.interval_s = interval_s if interval_s is not None else max(min(600.0, day_s / 10), 0.05)
        self.actions_per_s, self.scan_batch, self.clock = actions_per_s, scan_batch, clock
        self.sweeps: collections.deque[dict] = collections.deque(maxlen=KEEP_SWEEPS)

    def jobs_list(self) -> list[dict]:
        return [{**j, "progress": 1.0 if j["state"] == "done" else None} for j in self.sweeps]

    # ---------------------------------------------------------------- one sweep
    async def run_once(self) -> PassStats:
        buckets = []
        for b in self.meta.list_buckets():
            rules = [r for r in msgspec.convert(b.get("lc") or [], list[LifecycleRule]) if r.enabled]
            if rules:
                buckets.append((b["name"], rules))
        if not buckets:
            return PassStats()
        job = {"id": f"lifecycle-{uuid.uuid4().hex[:8]}", "kind": "lifecycle", "state": "running", "done": 0,
               "total": len(buckets), "started": time.time(), "scanned": 0, "expired": 0,
               "noncurrent_expired": 0, "delete_markers_removed": 0, "uploads_aborted": 0, "locked": 0,
               "failed": 0}
        self.sweeps.append(job)
        for name, rules in buckets:
            try:
                await self._sweep_bucket(job, name, rules)
            except errors.NoSuchBucket:
                pass  # deleted meanwhile
            job["done"] += 1
        job.update(state="done", finished=time.time())
        acted = sum(job[k] for k in ("expired", "noncurrent_expired", "delete_markers_removed", "uploads_aborted"))
        if acted:
            log.info("lifecycle sweep %s: %s", job["id"], {k: job[k] for k in (
                "scanned", "expired", "noncurrent_expired", "delete_markers_removed", "uploads_aborted")})
        elif len(self.sweeps) > 1 and not self._acted(self.sweeps[-2]):
            self.sweeps.remove(self.sweeps[-2])  # idle sweeps: only the latest is listed
        return PassStats(ok=0, extra={"acted": acted})

    @staticmethod
    def _acted(job: dict) -> bool:
        return job["state"] == "running" or any(job[k] for k in (
            "expired", "noncurrent_expired", "delete_markers_removed", "uploads_aborted"))

    async def _sweep_bucket(self, job: dict, bucket: str, rules: list[LifecycleRule]) -> None:
        key_marker, vid_marker, last_key = "", "", None
        while True:
            page = self.meta.list_versions(bucket, key_marker=key_marker, vid_marker=vid_marker,
                                           max_keys=self.scan_batch)
            items = [it for it in page["items"] if it[0] == "v"]
            job["scanned"] += len(items)
            for it in items:
                if it[1] != last_key:
                    last_key = it[1]
                    await self._apply_key(job, bucket, it[1], rules)
            if not page["truncated"] or not items:
                break
            key_marker, vid_marker = items[-1][1], items[-1][2]
            await anyio.sleep(0)
        if any(r.abort_upload_days is not None for r in rules):
            for up in self.meta.list_uploads(bucket):
                now = self.clock()
                if any(r.abort_upload_days is not None and up["k"].startswith(lifecycle.prefix_of(r))
                       and now >= due_ns(up["t"], r.abort_upload_days, self.day_s) for r in rules):
                    await self._act(job, "uploads_aborted", bucket, up["k"], None, up["id"])

    async def _apply_key(self, job: dict, bucket: str, key: str, rules: list[LifecycleRule]) -> None:
        """Act on one key until no rule is due for it: each decision is made on the versions read right before it
        (no await between the read and the command)."""
        for _ in range(10_000):
            step = self._decide(bucket, key, rules, self.clock())
            if step is None or not await self._act(job, *step):
                return

    def _decide(self, bucket: str, key: str, rules: list[LifecycleRule], now: int) -> tuple | None:
        """The next action due on the key: (counter, version id or None for the current version), or None."""
        vs = self.meta.key_versions(bucket, key)
        if not vs:
            return None
        cur = vs[0]
        mt = cur.get("mt", 0)
        if not cur.get("dm"):
            for r in rules:
                if matches(r, key, cur.get("size", 0), cur.get("tg") or {}) and (
                        (r.expiration_days is not None and now >= due_ns(mt, r.expiration_days, self.day_s))
                        or (r.expiration_date is not None and now >= r.expiration_date)):
                    return ("expired", bucket, key, None)
        elif len(vs) == 1:
            for r in rules:
                if matches(r, key, 0, None) and (r.expired_object_delete_marker or (
                        r.expiration_days is not None and now >= due_ns(mt, r.expiration_days, self.day_s))):
                    return ("delete_markers_removed", bucket, key, cur.get("vid", "null"))
        for i, v in enumerate(vs[1:]):
            since = vs[i].get("mt", 0)  # it became noncurrent when the next newer version was made
            for r in rules:
                if r.noncurrent_days is None or (r.newer_noncurrent is not None and i < r.newer_noncurrent):
                    continue
                if matches(r, key, v.get("size", 0), v.get("tg") or {}) and \
                        now >= due_ns(since, r.noncurrent_days, self.day_s):
                    if lock_reason(v, now) is not None:  # object lock: kept until its retention runs out
                        break
                    return ("noncurrent_expired", bucket, key, v.get("vid", "null"))
        return None

    async def _act(self, job: dict, counter: str, bucket: str, key: str, version_id: str | None,
                   upload_id: str | None = None) -> bool:
        """Run one action (one namespace command through the MetaStore, which chooses its time and ids), then
        pause so that at most actions_per_s run a second. False if the state changed meanwhile."""
        try:
            if upload_id is not None:
                self.meta.abort_upload(bucket, key, upload_id)
            else:
                self.meta.delete_object(bucket, key, version_id=version_id)
            job[counter] += 1
            ok = True
        except errors.ObjectLocked as e:  # locked since it was read: kept, as S3 keeps it; not a failure
            log.info("lifecycle: %s of %s/%s skipped: %s", counter, bucket, key, e)
            job["locked"] += 1
            ok = False
        except errors.DomainError as e:
            log.info("lifecycle: %s of %s/%s skipped: %s", counter, bucket, key, e)
            job["failed"] += 1
            ok = False
        if self.actions_per_s > 0:
            await anyio.sleep(1.0 / self.actions_per_s)
        return ok
