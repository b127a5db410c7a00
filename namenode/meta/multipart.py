"""Multipart uploads: their parts, and their completion into one object."""
from __future__ import annotations

import hashlib
import os
import uuid as uuidlib
from typing import Iterator

from epochfs.common import checksums, errors
from epochfs.common.blocks import block_id
from epochfs.common.kv import prefix_end
from epochfs.common.paths import split_key

from .. import commands as cmds, keys
from .base import StoreBase
from .records import norm_etag, now_ns


class Multipart(StoreBase):
    """Uploads (U) and their parts (Q); a completion concatenates the parts' block lists."""

    def _uploads(self) -> Iterator[tuple[str, dict]]:
        for k, v in self.kv.scan(keys.UPLOADS, prefix_end(keys.UPLOADS)):
            yield k[1:].decode(), self._dec(v)

    def _upload(self, upload_id: str) -> dict:
        raw = self.kv.get(keys.upload(upload_id))
        if raw is None:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.", upload_id=upload_id)
        return self._dec(raw)

    def create_upload(self, bucket: str, key: str, attrs: dict) -> str:
        return self.execute(cmds.CreateUpload(bucket=bucket, key=key, attrs=attrs, t=now_ns(),
                                              upload_id=uuidlib.uuid4().hex + os.urandom(8).hex()))

    def _apply_create_upload(self, b, c: cmds.CreateUpload) -> str:
        self.bucket_ino(c.bucket)
        split_key(c.key)
        b.put(keys.upload(c.upload_id), self._enc({"b": c.bucket, "k": c.key, "a": c.attrs, "t": c.t}))
        return c.upload_id

    def get_upload(self, bucket: str, key: str, upload_id: str) -> dict:
        up = self._upload(upload_id)
        if up["b"] != bucket or up["k"] != key:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.")
        return up

    def put_part(self, bucket: str, key: str, upload_id: str, number: int, part: dict, *,
                 fresh: bool = False) -> None:
        """Store part `number` (replacing one stored before). `fresh` as put_object's: only pending blocks, and the
        same part sent again after its answer was lost writes nothing (stored again, it would free its own blocks)."""
        self.execute(cmds.PutPart(bucket=bucket, key=key, upload_id=upload_id, number=int(number), part=part,
                                  t=now_ns(), fresh=fresh))

    def _apply_put_part(self, b, c: cmds.PutPart) -> None:
        self.get_upload(c.bucket, c.key, c.upload_id)
        old = self.kv.get(keys.part(c.upload_id, c.number))
        old = None if old is None else self._dec(old)
        new = c.part.get("blk", [])
        if c.fresh and (bad := self.not_fresh(new)) is not None:
            if self.same_blocks(old, new):
                return
            raise errors.InvalidInput(f"block {bad} was not allocated for this write, or is committed already")
        if old is not None:
            self.free_blocks(b, old.get("blk", []), c.t)
        for blk in c.part.get("blk", []):
            b.delete(keys.pending(block_id(blk)))
        b.put(keys.part(c.upload_id, c.number), self._enc({**c.part, "mt": c.t}))

    def list_parts(self, bucket: str, key: str, upload_id: str) -> tuple[dict, list[dict]]:
        up = self.get_upload(bucket, key, upload_id)
        p = keys.parts(upload_id)
        out = []
        for k, v in self.kv.scan(p, prefix_end(p)):
            rec = self._dec(v)
            rec.pop("blk", None)
            rec["n"] = int.from_bytes(k[-4:], "big")
            out.append(rec)
        return up, out

    def _drop_upload(self, b, upload_id: str, t: int, keep: set[int] = frozenset()) -> None:
        p = keys.parts(upload_id)
        for k, v in self.kv.scan(p, prefix_end(p)):
            if int.from_bytes(k[-4:], "big") not in keep:
                self.free_blocks(b, self._dec(v).get("blk", []), t)
            b.delete(k)
        b.delete(keys.upload(upload_id))

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        self.execute(cmds.AbortUpload(bucket=bucket, key=key, upload_id=upload_id, t=now_ns()))

    def _apply_abort_upload(self, b, c: cmds.AbortUpload) -> None:
        self.get_upload(c.bucket, c.key, c.upload_id)
        self._drop_upload(b, c.upload_id, c.t)

    def complete_upload(self, bucket: str, key: str, upload_id: str, wanted: list[dict], *, min_part_size: int,
                        checksum: dict | None = None, if_match: str | None = None,
                        if_none_match: str | None = None) -> dict:
        """Concatenate the named parts' block lists (no data moves) and commit them as the object, atomically.

        `checksum` is what the client expects of the whole object, {alg: value} and optionally "type"; a mismatch
        commits nothing. Completing an upload again after it became the object answers as the first completion did.
        """
        return self.execute(cmds.CompleteUpload(
            bucket=bucket, key=key, upload_id=upload_id, parts=wanted, min_part_size=int(min_part_size), t=now_ns(),
            vid=self._new_vid(), checksum=checksum, if_match=if_match, if_none_match=if_none_match))

    def _apply_complete_upload(self, b, c: cmds.CompleteUpload) -> dict:
        bucket, key, upload_id, wanted, min_part_size = c.bucket, c.key, c.upload_id, c.parts, c.min_part_size
        checksum = c.checksum
        try:
            up = self.get_upload(bucket, key, upload_id)
        except errors.NoSuchUpload:
            return self._completed_before(bucket, key, upload_id, wanted)
        if not wanted:
            raise errors.EmptyPartList("You must specify at least one part")
        stored = {}
        p = keys.parts(upload_id)
        for k, v in self.kv.scan(p, prefix_end(p)):
            stored[int.from_bytes(k[-4:], "big")] = self._dec(v)
        numbers = [int(w["n"]) for w in wanted]
        if any(b <= a for a, b in zip(numbers, numbers[1:])):  # the order is judged first, as S3 does
            raise errors.InvalidPartOrder("The list of parts was not in ascending order.")
        parts = []
        for i, (n, w) in enumerate(zip(numbers, wanted)):
            part = stored.get(n)
            if part is None or norm_etag(w.get("etag", "")) != norm_etag(part["etag"]):
                raise errors.InvalidPart("One or more of the specified parts could not be found.", part=n)
            for alg, val in (w.get("cs") or {}).items():
                if part.get("cs", {}).get(alg) not in (None, val):
                    raise errors.InvalidPart(f"The {alg} checksum of part {n} did not match.", part=n)
            if i < len(wanted) - 1 and part["size"] < min_part_size:
                raise errors.EntityTooSmall("Your proposed upload is smaller than the minimum allowed size",
                                            part=n, size=part["size"], min=min_part_size)
            parts.append(part)
        alg = up["a"].get("csa")
        cs = _multipart_checksum(parts, alg, up["a"].get("cst"))
        _check_expected_checksum(cs, checksum or {})
        size = sum(part["size"] for part in parts)
        obj = {k: v for k, v in up["a"].items() if k not in ("csa", "cst")}
        obj.update(size=size, etag=_multipart_etag([part["etag"] for part in parts]), mpu=upload_id,
                   blk=[blk for part in parts for blk in part.get("blk", [])], ps=[part["size"] for part in parts])
        if cs:
            obj["cs"] = cs
            obj["pcs"] = [part["cs"][alg] for part in parts]
        used = set(numbers)
        res = self._put(b, bucket, key, obj, obj.get("mt") or c.t, c.vid, c.if_match, c.if_none_match)
        self._drop_upload(b, upload_id, c.t, keep=used)
        return {**res, "size": size, "cs": cs}

    def _completed_before(self, bucket: str, key: str, upload_id: str, wanted: list[dict]) -> dict:
        """A retried completion: the object this upload became, if it is still there and the part list is the same."""
        cur = self._stat_or_none(bucket, key)
        try:
            same = cur is not None and cur.get("mpu") == upload_id and \
                cur.get("etag") == _multipart_etag([w.get("etag", "") for w in wanted])
        except ValueError:
            same = False
        if not same:
            raise errors.NoSuchUpload("The specified multipart upload does not exist.", upload_id=upload_id)
        return {"ino": cur["ino"], "etag": cur["etag"], "mt": cur["mt"], "vid": cur.get("vid"), "size": cur["size"],
                "cs": cur.get("cs", {})}

    def list_uploads(self, bucket: str) -> list[dict]:
        self.bucket_ino(bucket)
        out = [{"id": uid, **up} for uid, up in self._uploads() if up["b"] == bucket]
        out.sort(key=lambda u: (u["k"], u["t"]))
        return out


def _multipart_etag(part_etags: list[str]) -> str:
    md5s = b"".join(bytes.fromhex(norm_etag(e)) for e in part_etags)
    return f'"{hashlib.md5(md5s).hexdigest()}-{len(part_etags)}"'


def _multipart_checksum(parts: list[dict], alg: str | None, ctype: str | None) -> dict:
    """The object's checksum from its parts': {alg: value, "type": COMPOSITE or FULL_OBJECT}; {} if it has none."""
    vals = [p.get("cs", {}).get(alg) for p in parts] if alg else [None]
    if None in vals:
        return {}
    ctype = ctype or checksums.multipart_types(alg)[0]
    if ctype == checksums.FULL_OBJECT:
        return {alg: checksums.combine(alg, [(v, p["size"]) for v, p in zip(vals, parts)]), "type": ctype}
    return {alg: checksums.composite(alg, vals), "type": ctype}


def _check_expected_checksum(cs: dict, expected: dict) -> None:
    """The whole-object checksum (and type) a client sent with its completion must be the one the parts give."""
    want_type = expected.get("type")
    if want_type is not None and cs and want_type != cs["type"]:
        raise errors.ChecksumModeMismatch(f"The upload was created using the {cs['type']} checksum mode. The "
                                          "complete request must use the same checksum mode.")
    for alg, val in expected.items():
        if alg == "type":
            continue
        have = cs.get(alg)
        if have is None:
            raise errors.ChecksumModeMismatch(f"The upload was not created with the {alg.upper()} checksum "
                                              "algorithm.")
        if val not in (have, have.split("-")[0]):
            raise errors.ChecksumMismatch(f"The {alg.upper()} you specified did not match the calculated checksum.")
