"""POSIX operations on the namespace, addressed by inode, for the mount (through the gateway's /_epochfs/fs).

S3 names a file by its full key, which stops at 1,024 bytes; the mount names it by (parent inode, name), so paths
through the mount may be PATH_MAX long. The records are the MetaStore's own: a directory inode with its entries, a
file inode whose entries carry the listing summary. What POSIX adds:

  file inode   "ln": [[parent, name], ...]   every entry that names it (hard links; nlink is its length), so a
                                            commit by inode can refresh each entry's listing summary
               "at": atime (ns)
  symlink      {"t": "l", "tg": target}     target bytes kept as latin-1 text (lossless)
  special file {"t": "s", "rdev": n}        FIFOs, sockets, device nodes
  directory    "mk": marker                 mkdir makes a directory marker, so S3 lists it as "dir/"
               "pa": parent directory inode  its one parent (directories have no hard links), written by every
                                            command that creates or moves one (mkdir, CreateBucket, the implicit
                                            directories of an S3 PUT, rename), so a rename can refuse to move a
                                            directory below itself (see _check_not_below)
  any inode    "b": bucket directory inode  which bucket it lies in (see in_bucket)
               "xa": {name: value}          extended attributes S3 can't show (see setxattr), latin-1 text

Symlinks and special files have entries whose summary says "delete marker", so ListObjects skips them and GetObject
answers NoSuchKey: S3 sees regular files and directories only. Each change is a command (commands.py) that
MetaStore.execute applies through this class's `_apply_<op>` method, in one RocksDB write batch.

Every operation is scoped to one bucket (the gateway checked the caller's permission on it): each inode it is given
must lie in that bucket (in_bucket), so a key allowed into one bucket can't reach another's inodes by number.
"""
from __future__ import annotations

import hashlib
import stat as st

from epochfs.common import errors
from epochfs.common.blocks import block_id, block_size
from epochfs.common.kv import prefix_end

from . import commands as cmds, keys
from .keys import ROOT_INO
from .meta.records import dec_record
from .metastore import S_IFDIR, S_IFLNK, S_IFREG, MetaStore, enc_record, now_ns

NAME_MAX = 255
ORPHAN_GRACE_S = 60.0
DIR_NLINK_SCAN = 64
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
ANCESTRY_MAX = 4096  # directories a rename's ancestry walk climbs (PATH_MAX allows 2,048) before it searches down
EMPTY_ETAG = f'"{hashlib.md5(b"").hexdigest()}"'
XATTR_CREATE, XATTR_REPLACE = 1, 2
XATTR_NAME_MAX = 255
XATTR_SIZE_MAX = 64 << 10
XATTR_TOTAL_MAX = 256 << 10       # names and values of one inode (ENOSPC beyond, as a full ext4 block gives)
XATTR_NAMESPACES = ("user.", "trusted.")
S3_META_MAX = 2048                # the x-amz-meta-* bytes S3 takes in one request (gateway/s3/objects.py)
_S3_META_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~")  # lowercase HTTP token


def _latin1(text: str) -> bytes:
    """The bytes an attribute name or value sent as latin-1 text stands for."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        raise errors.InvalidInput("attribute names and values travel as latin-1 text") from None


class Posix:
    def __init__(self, meta: MetaStore) -> None:
        self.meta = meta
        self.kv = meta.kv
        self.bi: int | None = None  # the bucket of the operation under way (set by the RPC handler, see scope)

    def applier(self, name: str):
        """The `_apply_<op>` method of a mount command, run in the command's bucket scope (for MetaStore.execute)."""
        method = getattr(self, name)

        def apply(b, c):
            self.bi = c.bi
            return method(b, c)
        return apply

    # ---------------------------------------------------------------- bucket scope
    def scope(self, bi: int | None, op: str, args: dict) -> None:
        """Check that the operation `op` touches inodes of bucket `bi` only (None: the tree of buckets, where only
        the root itself may be read) and make `bi` the bucket inodes written from now on are stamped with."""
        self.bi = bi
        if bi is None and op not in ("getattr", "readdir"):  # the gateway filters the root's listing itself
            raise errors.OutsideBucket(f"{op} needs a bucket")
        if op == "lookup" and args.get("parent") == ROOT_INO and bi is not None:
            found = self._child(ROOT_INO, str(args.get("name", "")))
            if found is None or found[0] != bi:
                raise errors.OutsideBucket("lookup outside the request's bucket")
            return
        for k in ("ino", "parent", "newparent"):
            if k in args:
                self.in_bucket(int(args[k]))

    def in_bucket(self, ino: int) -> None:
        """EACCES unless `ino` lies in the scope's bucket. Inodes the mount made or wrote carry their bucket ("b"),
        directories made through S3 get it from their first lookup or listing through the mount (the kernel learns
        every inode that way), and a file made through S3 lies where its names are ("ln")."""
        if ino == self.bi or (self.bi is None and ino == ROOT_INO):
            return
        rec = self.meta.get_inode(ino)
        if rec is None:  # gone (an S3 DELETE, say): a handle the mount holds open still knows it, see its getattr
            raise errors.NotFound(f"no inode {ino}")
        if self.bi is not None and self._rec_in_bucket(rec):
            return
        raise errors.OutsideBucket(f"inode {ino} is not in the request's bucket")

    def _rec_in_bucket(self, rec: dict) -> bool:
        if "b" in rec:
            return rec["b"] == self.bi
        for parent, _ in rec.get("ln", []) if rec.get("t") != "d" else []:
            prec = self.meta.get_inode(parent) if parent != self.bi else {"b": self.bi}
            if prec is not None and prec.get("b") == self.bi:
                return True
        return False

    def _stamp(self, b, ino: int, rec: dict) -> None:
        """A directory found below a directory of the scope's bucket lies in that bucket: record it (once)."""
        if rec.get("t") == "d" and "b" not in rec and self.bi is not None and ino != self.bi:
            rec["b"] = self.bi
            b.put(keys.inode(ino), enc_record(rec))

    # ---------------------------------------------------------------- reading
    def _inode(self, ino: int) -> dict:
        rec = self.meta.get_inode(ino)
        if rec is None:
            raise errors.NotFound(f"no inode {ino}")
        return rec

    def _dir(self, ino: int) -> dict:
        rec = self._inode(ino)
        if rec.get("t") != "d":
            raise errors.NotADirectory(f"inode {ino} is not a directory")
        return rec

    @staticmethod
    def _check_name(name: str) -> None:
        if len(name.encode()) > NAME_MAX:
            raise errors.NameTooLong("name longer than 255 bytes")
        if not name or "/" in name or "\0" in name or name in (".", ".."):
            raise errors.InvalidName(f"invalid name {name!r}")

    def _child(self, parent: int, name: str) -> tuple[int, bool] | None:
        """(ino, is a directory) of the entry `name` in `parent`; a directory wins over a file of the same name
        (S3 allows both "a" and "a/b")."""
        raw = self.kv.get(keys.entry(parent, name, True))
        if raw is not None:
            return int.from_bytes(raw[:8], "big"), True
        raw = self.kv.get(keys.entry(parent, name, False))
        if raw is not None:
            return int.from_bytes(raw[:8], "big"), False
        return None

    def _dir_nlink(self, ino: int) -> int:
        """2 + subdirectories (their ".." links), counted from the entries; 1 ("not counted", as find and fts
        read it) for a directory too large to count on every getattr."""
        p = keys.entries(ino)
        n = 2
        for i, k in enumerate(self.kv.scan_keys(p, prefix_end(p))):
            if i >= DIR_NLINK_SCAN:
                return 1
            n += k.endswith(b"/")
        return n

    def attr(self, ino: int, rec: dict, nlink: int | None = None) -> dict:
        """Its attributes; `nlink`: a directory's, if counted already."""
        t = rec.get("t")
        if t == "d":
            mode, size, nlink = rec.get("mode", S_IFDIR | 0o755), 0, nlink or self._dir_nlink(ino)
        elif t == "l":
            mode, size, nlink = rec.get("mode", S_IFLNK | 0o777), len(rec.get("tg", "")), len(rec.get("ln", [1]))
        else:
            mode, size, nlink = rec.get("mode", S_IFREG | 0o644), rec.get("size", 0), len(rec.get("ln", [1]))
        mt = rec.get("mt", 0)
        return {"ino": ino, "mode": mode, "nlink": nlink, "uid": rec.get("uid", 0), "gid": rec.get("gid", 0),
                "size": size, "rdev": rec.get("rdev", 0), "at": rec.get("at", mt), "mt": mt, "ct": rec.get("ct", mt),
                "etag": rec.get("etag", "")}

    def getattr(self, ino: int) -> dict:
        return self.attr(ino, self._inode(ino))

    def lookup(self, parent: int, name: str) -> dict:
        self._check_name(name)
        self._dir(parent)
        found = self._child(parent, name)
        if found is None:
            raise errors.NotFound(f"no entry {name!r} in {parent}")
        rec = self.meta.get_inode(found[0])
        if rec is None:  # a name whose inode went (S3 deletes of one hard link once took the inode with them)
            raise errors.NotFound(f"no entry {name!r} in {parent}")
        if found[1] and rec.get("t") == "d" and "b" not in rec and parent != ROOT_INO and self.bi is not None \
                and found[0] != self.bi:
            self.meta.execute(cmds.StampDirs(bi=self.bi, inos=[found[0]]))
        return self.attr(found[0], rec)

    def readdir(self, ino: int, after: str = "", limit: int = 1000) -> dict:
        """Entries with their attributes, in key order after the entry key suffix `after`: {"entries": [[name,
        attr], ...], "next": the `after` of the next page or None}."""
        self._dir(ino)
        p = keys.entries(ino)
        start = p + after.encode() + b"\0" if after else p
        out, last, nxt, stamp = [], None, None, []
        for k, v in self.kv.scan(start, prefix_end(p)):
            if len(out) >= limit:
                nxt = last
                break
            name = k[9:].decode()
            last = name
            child = int.from_bytes(v[:8], "big")
            rec = self.meta.get_inode(child)
            if rec is not None:
                if ino != ROOT_INO and rec.get("t") == "d" and "b" not in rec and self.bi is not None \
                        and child != self.bi:
                    stamp.append(child)
                out.append([name.rstrip("/") if name.endswith("/") else name, self.attr(child, rec)])
        if stamp:
            self.meta.execute(cmds.StampDirs(bi=self.bi, inos=stamp))
        return {"entries": out, "next": nxt}

    def dirs(self, inos: list[int], max_names: int) -> list[tuple[int, dict | None, list | None, list | None]]:
        """(ino, attributes, names, their inodes) of each directory of `inos` in the scope's bucket: the names in key
        order, a subdirectory's ending in "/", read from the entries alone (no child's inode). attr None: not a
        directory of the bucket (gone, say); names None: more than `max_names`."""
        out = []
        for ino in inos:
            try:
                self.in_bucket(ino)
                rec = self._dir(ino)
            except errors.DomainError:
                out.append((ino, None, None, None))
                continue
            p = keys.entries(ino)
            names, kids, subdirs = [], [], 0
            for k, v in self.kv.scan(p, prefix_end(p)):
                if len(names) >= max_names:
                    names = kids = None
                    break
                names.append(k[9:].decode())
                kids.append(int.from_bytes(v[:8], "big"))
                subdirs += k.endswith(b"/")
            a = self.attr(ino, rec, nlink=None if names is None else 2 + subdirs if len(names) <= DIR_NLINK_SCAN else 1)
            out.append((ino, a, names, kids))
        return out

    def _apply_stamp_dirs(self, b, c: cmds.StampDirs) -> None:
        for ino in c.inos:
            rec = self.meta.get_inode(ino)
            if rec is not None:
                self._stamp(b, ino, rec)

    def readlink(self, ino: int) -> str:
        rec = self._inode(ino)
        if rec.get("t") != "l":
            raise errors.NotASymlink(f"inode {ino} is not a symlink")
        return rec["tg"]

    def blocks(self, ino: int) -> dict:
        rec = self._inode(ino)
        if rec.get("t") == "d":
            raise errors.IsADirectory(f"inode {ino} is a directory")
        return {"blk": rec.get("blk", []), "size": rec.get("size", 0), "etag": rec.get("etag", ""),
                "acl": rec.get("acl"), "owner": rec.get("owner", ""), "sse": rec.get("sse")}

    # ---------------------------------------------------------------- writing helpers
    def _writable_dir(self, parent: int) -> dict:
        if parent == ROOT_INO:
            raise errors.MethodNotAllowed("buckets are made through S3, not mkdir")
        return self._dir(parent)

    def _touch_dir(self, b, ino: int, rec: dict, t: int) -> None:
        rec["mt"] = rec["ct"] = t
        self._put_inode(b, ino, rec)

    def _put_entry(self, b, parent: int, name: str, ino: int, rec: dict) -> None:
        """The entry (parent, name) -> ino with the listing summary of `rec` (symlinks and special files are hidden
        from S3 by the delete-marker flag)."""
        if rec["t"] == "d":
            b.put(keys.entry(parent, name, True), keys.u64(ino))
            return
        hidden = rec["t"] != "f" or bool(rec.get("dm"))
        summary = [rec.get("size", 0), rec.get("etag", ""), rec.get("mt", 0), rec.get("owner", ""),
                   rec.get("sc", "STANDARD"), hidden]
        b.put(keys.entry(parent, name, False), keys.u64(ino) + enc_record(summary))

    def _put_inode(self, b, ino: int, rec: dict) -> None:
        """Write an inode record, stamped with the scope's bucket (records rewritten through S3 may have lost it)."""
        if self.bi is not None and ino != self.bi:
            rec["b"] = self.bi
        b.put(keys.inode(ino), enc_record(rec))

    def _put_links(self, b, ino: int, rec: dict) -> None:
        """Write an inode and, for a non-directory, the summary in each of its entries."""
        self._put_inode(b, ino, rec)
        for parent, name in rec.get("ln", []) if rec.get("t") != "d" else []:
            self._put_entry(b, parent, name, ino, rec)

    @staticmethod
    def _visible(rec: dict) -> tuple[int, int]:
        """(bytes, objects) one name of this inode adds to its bucket's usage: S3 sees regular files only."""
        return (int(rec.get("size", 0)), 1) if rec.get("t") == "f" and not rec.get("dm") else (0, 0)

    def _charge(self, bucket: str | None, dbytes: int, dobjects: int):
        """Check a change of the bucket's usage against its quota (before the batch: EDQUOT commits nothing);
        returns what applies it inside the batch. Without a bucket name (an old client) usage is left alone."""
        if bucket is None or (dbytes == 0 and dobjects == 0):
            return lambda b: None
        info = self.meta.bucket_info(bucket)
        used = self.meta.usage(info["ino"])
        for i, (field, d) in enumerate((("qb", dbytes), ("qo", dobjects))):
            limit = info.get(field)
            if limit is not None and d > 0 and used[i] + d > int(limit):
                raise errors.QuotaExceeded(f"bucket {bucket} would exceed its quota")
        return lambda b: self.meta.add_usage(b, info["ino"], dbytes, dobjects)

    def _drop_link(self, b, parent: int, name: str, ino: int, rec: dict, t: int) -> None:
        """Remove one name of a non-directory. Without names left the inode becomes an orphan, still readable by inode
        for a grace period (as an unlinked file stays readable through open descriptors), then freed."""
        b.delete(keys.entry(parent, name, False))
        rec["ln"] = [ln for ln in rec.get("ln", [[parent, name]]) if ln != [parent, name]]
        rec["ct"] = t
        if not rec["ln"]:  # kept for ORPHAN_GRACE_S: the kernel may hold it open, or be opening it right now
            k = keys.orphan(t, ino)
            b.put(k, b"")
            self.meta.orphans_from = min(self.meta.orphans_from, k)  # (a clock that went back)
        self._put_links(b, ino, rec)
        self._reap(b, t)

    def _reap(self, b, t: int) -> None:
        """Free the orphans whose grace period is over. The scan starts where the last one ended: the orphans freed
        before are deleted keys, and RocksDB steps over each deleted key on every scan until a compaction drops it,
        so scanning from the first orphan key made every unlink slower than the one before (`rm -rf` of a folder of
        20,000 files: 18 ms per file by its end)."""
        cutoff = keys.orphan(t - int(ORPHAN_GRACE_S * 1e9), 0)
        for k in self.kv.scan_keys(self.meta.orphans_from, cutoff):
            ino = int.from_bytes(k[9:], "big")
            rec = self.meta.get_inode(ino)
            if rec is not None and not rec.get("ln"):
                self.meta.free_blocks(b, rec.get("blk", []), t)
                b.delete(keys.inode(ino))
            b.delete(k)
        self.meta.orphans_from = max(self.meta.orphans_from, cutoff)  # (a failed command forgets it: MetaStore)

    def _new(self, b, parent: int, name: str, rec: dict, t: int, charge=None, ino: int | None = None,
             prec: dict | None = None) -> dict:
        """Create `name` in `parent` as a new inode `rec` (numbered `ino`, reserved before; else the next one);
        EEXIST if the name is taken. `prec`: the parent's record, already read and checked by the caller."""
        if prec is None:
            prec = self._check_new(parent, name)
        if prec.get("mode", 0) & st.S_ISGID:  # BSD group semantics in a set-group-ID directory, as Linux does
            rec["gid"] = prec.get("gid", 0)
            if rec["t"] == "d":
                rec["mode"] |= st.S_ISGID
        rec.update(mt=rec.get("mt", t), ct=t, at=rec.get("at", t))
        if "mk" in rec:
            rec["mk"]["mt"] = t
        if ino is None:
            ino = self.meta.next_id(b, b"ino")
        if rec["t"] != "d":
            rec["ln"] = [[parent, name]]
        else:
            rec["pa"] = parent
        self._put_inode(b, ino, rec)
        self._put_entry(b, parent, name, ino, rec)
        self._touch_dir(b, parent, prec, t)
        if charge is not None:
            charge(b)
        return self.attr(ino, rec)

    def _check_new(self, parent: int, name: str) -> dict:
        """The record of directory `parent`, where `name` is to be created: a valid name, not taken."""
        self._check_name(name)
        prec = self._writable_dir(parent)
        if self._child(parent, name) is not None:
            raise errors.AlreadyExists(f"{name!r} exists")
        return prec

    # ---------------------------------------------------------------- namespace operations
    def reserve_inodes(self, n: int, owner: str = "") -> int:
        """Reserve `n` inode numbers for `owner`'s own creates (create_files); returns the first."""
        return self.meta.execute(cmds.ReserveInodes(bi=self.bi, n=int(n), owner=owner))

    def _apply_reserve_inodes(self, b, c: cmds.ReserveInodes) -> int:
        first = self.meta.next_id(b, b"ino", c.n)
        b.put(keys.reserved(first + c.n), enc_record({"first": first, "owner": c.owner, "used": 0}))
        return first

    def _reservation(self, ino: int, owner: str, held: dict) -> dict:
        """The range reserved by `owner` that holds `ino` (held: the ranges this command met, as it changed them);
        InvalidInput if there is none (never reserved, another owner's, or all of it used)."""
        for end, r in held.items():
            if r["first"] <= ino < end:
                break
        else:
            found = next(self.meta.kv.scan(keys.reserved(ino + 1), prefix_end(keys.RESERVED), limit=1), None)
            r = None
            if found is not None:
                end, r = int.from_bytes(found[0][1:], "big"), dec_record(found[1])
            if r is None or not r["first"] <= ino:
                raise errors.InvalidInput(f"inode {ino} was not reserved, or is taken")
            held[end] = r
        if r["owner"] != owner:
            raise errors.InvalidInput(f"inode {ino} was reserved by another access key")
        return r

    def create_files(self, items: list[dict], bucket: str | None = None,
                     owner: str = "") -> list[dict | errors.DomainError]:
        """Many regular files with their content (blocks durable on DataNodes, admitted), in one command: each
        `{"f": NewFile, "blk": stored blocks, "etag"}` becomes inode f.ino (reserved with reserve_inodes, not used
        yet) named f.name in f.parent with f's mode, owner, times and content, as a mknod and a commit would; an
        item refused (a name taken, a number not reserved, the quota) is its error, and the others are made."""
        return self.meta.execute(cmds.CreateFiles(bi=self.bi, items=items, bucket=bucket, t=now_ns(), owner=owner))

    def _made_by(self, item: dict, parent: int, name: str, ino: int) -> dict | None:
        """The record of file `ino` if the create `item` made it already, as it made it (number, name, content,
        mode, owner and mtime all equal): the same create sent again after its answer was lost. (Inode numbers are
        reserved for one access key, so only its own creates can have made `ino`.)"""
        rec = self.meta.get_inode(ino)
        f = item["f"]
        if rec is None or rec.get("t") != "f" or [parent, name] not in rec.get("ln", ()) or \
                self._child(parent, name) != (ino, False):
            return None
        same = (rec.get("etag") == item["etag"] and rec.get("size") == int(f["size"]) and
                rec.get("mt") == int(f["mt"]) and rec.get("mode", 0) & 0o7777 == int(f["mode"]) & 0o7777 and
                rec.get("uid") == int(f["uid"]))
        return rec if same else None

    def _apply_create_files(self, b, c: cmds.CreateFiles) -> list[dict | errors.DomainError]:
        out: list = []
        names: set[tuple[int, str]] = set()
        inos: set[int] = set()
        taken: set[int] = set()  # blocks an earlier file of the batch took
        held: dict[int, dict] = {}  # the reserved ranges this command uses: their records, written back at the end
        for item in c.items:
            f, blk = item["f"], item["blk"]
            try:
                parent, name, ino = int(f["parent"]), f["name"], int(f["ino"])
                if (parent, name) in names:
                    raise errors.AlreadyExists(f"{name!r} exists")
                if ino not in inos and (made := self._made_by(item, parent, name, ino)) is not None:
                    # this very create sent again (its answer was lost): answered as the first time, and the
                    # blocks it brought again (if new: a mount's resend) are given back
                    self.meta.give_back(b, [block_id(x) for x in blk])
                    taken.update(block_id(x) for x in blk)
                    names.add((parent, name))
                    inos.add(ino)
                    out.append({**self.attr(ino, made), "layout": [[block_id(x), block_size(x)] for x in made["blk"]]})
                    continue
                if ino in inos or self.meta.get_inode(ino) is not None:
                    raise errors.InvalidInput(f"inode {ino} was not reserved, or is taken")
                if (bad := self.meta.not_fresh(blk, taken)) is not None:
                    raise errors.InvalidInput(f"block {bad} of {name!r} was not allocated for it, or is committed")
                reservation = self._reservation(ino, c.owner, held)
                self.in_bucket(parent)
                prec = self._check_new(parent, name)
                size = int(f["size"])
                if sum(block_size(x) for x in blk) != size:
                    raise errors.InvalidInput(f"the blocks of {name!r} don't add up to {size} bytes")
                charge = self._charge(c.bucket, size, 1)
            except errors.DomainError as e:
                out.append(e)
                continue
            rec = {"t": "f", "size": size, "etag": item["etag"], "blk": blk,
                   "mode": S_IFREG | (int(f["mode"]) & 0o7777), "uid": int(f["uid"]), "gid": int(f["gid"]),
                   "mt": int(f["mt"]), "at": int(f["at"])}
            for x in blk:
                b.delete(keys.pending(block_id(x)))
                taken.add(block_id(x))
            names.add((parent, name))
            inos.add(ino)
            reservation["used"] += 1
            t = max(int(f.get("dt") or c.t), prec.get("mt", 0))  # the mount's time of the create, never backwards
            res = self._new(b, parent, name, rec, t, charge, ino=ino, prec=prec)
            if f.get("ct") and int(f["ct"]) != rec["ct"]:  # a chmod/chown in the mount since: its ctime
                rec["ct"] = res["ct"] = int(f["ct"])
                self._put_links(b, ino, rec)
            out.append({**res,
                        "layout": [[block_id(x), block_size(x)] for x in blk]})
        for end, r in held.items():
            if r["used"] >= end - r["first"]:
                b.delete(keys.reserved(end))
            else:
                b.put(keys.reserved(end), enc_record(r))
        return out

    def mkdir(self, parent: int, name: str, mode: int, uid: int, gid: int) -> dict:
        return self.meta.execute(cmds.Mkdir(bi=self.bi, parent=int(parent), name=name, mode=int(mode), uid=int(uid),
                                            gid=int(gid), t=now_ns()))

    def _apply_mkdir(self, b, c: cmds.Mkdir) -> dict:
        mk = {"size": 0, "etag": EMPTY_ETAG, "ctype": "application/x-directory"}
        return self._new(b, c.parent, c.name, {"t": "d", "mode": S_IFDIR | (c.mode & 0o7777), "uid": c.uid,
                                               "gid": c.gid, "mk": mk}, c.t)

    def mknod(self, parent: int, name: str, mode: int, uid: int, gid: int, rdev: int = 0,
              bucket: str | None = None) -> dict:
        return self.meta.execute(cmds.Mknod(bi=self.bi, parent=int(parent), name=name, mode=int(mode), uid=int(uid),
                                            gid=int(gid), rdev=int(rdev), bucket=bucket, t=now_ns()))

    def _apply_mknod(self, b, c: cmds.Mknod) -> dict:
        mode = c.mode
        fmt = st.S_IFMT(mode) or S_IFREG
        if fmt == S_IFREG:
            rec = {"t": "f", "size": 0, "etag": EMPTY_ETAG, "blk": []}
        elif fmt in (st.S_IFIFO, st.S_IFSOCK, st.S_IFCHR, st.S_IFBLK):
            rec = {"t": "s", "rdev": c.rdev}
        else:
            raise errors.InvalidInput(f"cannot mknod type {fmt:o}")
        return self._new(b, c.parent, c.name, {**rec, "mode": fmt | (mode & 0o7777), "uid": c.uid, "gid": c.gid},
                         c.t, self._charge(c.bucket, 0, 1) if fmt == S_IFREG else None)

    def symlink(self, parent: int, name: str, target: str, uid: int, gid: int) -> dict:
        return self.meta.execute(cmds.Symlink(bi=self.bi, parent=int(parent), name=name, target=target,
                                              uid=int(uid), gid=int(gid), t=now_ns()))

    def _apply_symlink(self, b, c: cmds.Symlink) -> dict:
        return self._new(b, c.parent, c.name, {"t": "l", "mode": S_IFLNK | 0o777, "uid": c.uid, "gid": c.gid,
                                               "tg": c.target}, c.t)

    def link(self, ino: int, parent: int, name: str, bucket: str | None = None) -> dict:
        return self.meta.execute(cmds.Link(bi=self.bi, ino=int(ino), parent=int(parent), name=name, bucket=bucket,
                                           t=now_ns()))

    def _apply_link(self, b, c: cmds.Link) -> dict:
        ino, parent, name, bucket, t = c.ino, c.parent, c.name, c.bucket, c.t
        self._check_name(name)
        prec = self._writable_dir(parent)
        rec = self._inode(ino)
        if rec.get("t") == "d":
            raise errors.MethodNotAllowed("hard links to directories are not allowed")
        if self._child(parent, name) is not None:
            raise errors.AlreadyExists(f"{name!r} exists")
        charge = self._charge(bucket, *self._visible(rec))
        rec["ln"] = rec.get("ln", []) + [[parent, name]]
        rec["ct"] = t
        self._put_links(b, ino, rec)
        self._touch_dir(b, parent, prec, t)
        charge(b)
        return self.attr(ino, rec)

    def unlink(self, parent: int, name: str, bucket: str | None = None) -> int:
        """Returns the command's time: the parent's new mtime and ctime."""
        t = now_ns()
        self.meta.execute(cmds.Unlink(bi=self.bi, parent=int(parent), name=name, bucket=bucket, t=t))
        return t

    def _apply_unlink(self, b, c: cmds.Unlink) -> None:
        parent, name, bucket, t = c.parent, c.name, c.bucket, c.t
        prec = self._writable_dir(parent)
        found = self._child(parent, name)
        if found is None:
            raise errors.NotFound(f"no entry {name!r}")
        if found[1]:
            raise errors.IsADirectory(f"{name!r} is a directory")
        rec = self.meta.get_inode(found[0]) or {}
        self.meta.check_inode_unlocked(found[0], rec, t)  # object lock: EPERM
        size, n = self._visible(rec)
        charge = self._charge(bucket, -size, -n)
        self._drop_link(b, parent, name, found[0], rec, t)
        self._touch_dir(b, parent, prec, t)
        charge(b)

    def rmdir(self, parent: int, name: str) -> None:
        self.meta.execute(cmds.Rmdir(bi=self.bi, parent=int(parent), name=name, t=now_ns()))

    def _apply_rmdir(self, b, c: cmds.Rmdir) -> None:
        parent, name = c.parent, c.name
        prec = self._writable_dir(parent)
        found = self._child(parent, name)
        if found is None:
            raise errors.NotFound(f"no entry {name!r}")
        if not found[1]:
            raise errors.NotADirectory(f"{name!r} is not a directory")
        if not self.meta.is_empty(found[0]):
            raise errors.DirectoryNotEmpty(f"{name!r} is not empty")
        b.delete(keys.entry(parent, name, True))
        b.delete(keys.inode(found[0]))
        self._touch_dir(b, parent, prec, c.t)

    def rename(self, parent: int, name: str, newparent: int, newname: str, flags: int = 0,
               bucket: str | None = None) -> None:
        """Move one entry (a file, or a directory with everything below it) in one batch. RENAME_NOREPLACE fails
        with EEXIST if the target exists; RENAME_EXCHANGE swaps two existing entries. Other flags (RENAME_WHITEOUT,
        which overlayfs asks of its upper layer) fail with EINVAL: a rename that ignored them would claim to have
        left what it did not."""
        self.meta.execute(cmds.Rename(bi=self.bi, parent=int(parent), name=name, newparent=int(newparent),
                                      newname=newname, flags=int(flags), bucket=bucket, t=now_ns()))

    def _apply_rename(self, b, c: cmds.Rename) -> None:
        parent, name, newparent, newname, flags, bucket, t = \
            c.parent, c.name, c.newparent, c.newname, c.flags, c.bucket, c.t
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE) or flags == RENAME_NOREPLACE | RENAME_EXCHANGE:
            raise errors.InvalidInput(f"rename flags {flags:#x} not supported")
        self._check_name(newname)
        src_dir = self._writable_dir(parent)
        dst_dir = src_dir if newparent == parent else self._writable_dir(newparent)
        src = self._child(parent, name)
        if src is None:
            raise errors.NotFound(f"no entry {name!r}")
        dst = self._child(newparent, newname)
        if dst is not None and flags & RENAME_NOREPLACE:
            raise errors.AlreadyExists(f"{newname!r} exists")
        if flags & RENAME_EXCHANGE:
            if dst is None:
                raise errors.NotFound(f"no entry {newname!r}")
            if newparent != parent:  # each directory goes where the other was: neither may go below itself
                if src[1]:
                    self._check_not_below(src[0], newparent)
                if dst[1]:
                    self._check_not_below(dst[0], parent)
            for entry in (src, dst):  # object lock: a locked object does not leave its key
                self._check_moves_unlocked(entry, t)
            return self._exchange(b, t, parent, name, src, newparent, newname, dst, src_dir, dst_dir)
        if dst is not None:
            if dst[0] == src[0]:
                return None  # two names of one file: POSIX says do nothing
            if src[1] and not dst[1]:
                raise errors.NotADirectory(f"{newname!r} is not a directory")
            if dst[1] and not src[1]:
                raise errors.IsADirectory(f"{newname!r} is a directory")
            if dst[1] and not self.meta.is_empty(dst[0]):
                raise errors.DirectoryNotEmpty(f"{newname!r} is not empty")
        if src[1] and newparent != parent:
            self._check_not_below(src[0], newparent)
        rec = self._inode(src[0])
        drec = (self.meta.get_inode(dst[0]) or {}) if dst is not None else {}
        self._check_moves_unlocked(src, t)  # object lock: a locked object neither leaves its key nor is replaced
        if dst is not None and not dst[1]:
            self.meta.check_inode_unlocked(dst[0], drec, t)
        size, n = self._visible(drec)
        charge = self._charge(bucket, -size, -n)  # the replaced file's name goes; the moved one stays counted
        charge(b)
        if dst is not None:
            if dst[1]:
                b.delete(keys.entry(newparent, newname, True))
                b.delete(keys.inode(dst[0]))
            else:
                self._drop_link(b, newparent, newname, dst[0], drec, t)
        b.delete(keys.entry(parent, name, src[1]))
        self._relink(rec, parent, name, newparent, newname)
        rec["ct"] = t
        self._put_inode(b, src[0], rec)
        self._put_entry(b, newparent, newname, src[0], rec)
        self._touch_dir(b, parent, src_dir, t)
        if newparent != parent:
            self._touch_dir(b, newparent, dst_dir, t)

    def _check_moves_unlocked(self, entry: tuple[int, bool], t: int) -> None:
        """Object lock (EPERM): a file that a rename moves, or every file below a directory it moves when the
        bucket has object lock, must not be locked: its S3 key would change, which removes the locked version."""
        ino, is_dir = entry
        if not is_dir:
            self.meta.check_inode_unlocked(ino, self._inode(ino), t)
            return
        if self.bi is None or not (self.meta.get_inode(self.bi) or {}).get("bkt", {}).get("olk"):
            return
        todo = [ino]
        while todo:
            p = keys.entries(todo.pop())
            for k, v in self.kv.scan(p, prefix_end(p)):
                child = int.from_bytes(v[:8], "big")
                if k.endswith(b"/"):
                    todo.append(child)
                else:
                    rec = self.meta.get_inode(child)
                    if rec is not None:
                        self.meta.check_inode_unlocked(child, rec, t)

    def _check_not_below(self, ino: int, newparent: int) -> None:
        """EINVAL (InvalidMove) if directory `ino` is `newparent` or one of its ancestors: moving it there would
        cut it and everything below it off the tree, a loop no path reaches (the kernel checks this for the mount;
        the NameNode checks it for every client of /_epochfs/fs).

        The walk climbs the parents ("pa") from `newparent` towards the root: at most ANCESTRY_MAX steps, one inode
        read each. A directory written before parents were recorded has no "pa" (it gets one when it is moved or
        made anew): where the walk meets one, or climbs too far, or comes round to a directory it saw (a corrupt
        store), it searches the moved directory's subtree for `newparent` instead: exact, and finite on any store."""
        d, seen = newparent, set()
        for _ in range(ANCESTRY_MAX):
            if d == ino:
                raise errors.InvalidMove(f"inode {ino} can't move into a directory below itself")
            rec = self.meta.get_inode(d) if d != ROOT_INO else {"bkt": {}}
            if rec is None:
                break
            if "bkt" in rec:  # the top: the root, or a bucket (whose parent is the root)
                return
            seen.add(d)
            d = rec.get("pa")
            if d is None or d in seen:
                break
        if self._in_subtree(ino, newparent):
            raise errors.InvalidMove(f"inode {ino} can't move into a directory below itself")

    def _in_subtree(self, top: int, ino: int) -> bool:
        """Whether directory `ino` lies below directory `top` (a search of the directory entries below `top`)."""
        todo, seen = [top], {top}
        while todo:
            p = keys.entries(todo.pop())
            for k, v in self.kv.scan(p, prefix_end(p)):
                if not k.endswith(b"/"):
                    continue
                child = int.from_bytes(v[:8], "big")
                if child == ino:
                    return True
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
        return False

    @staticmethod
    def _relink(rec: dict, parent: int, name: str, newparent: int, newname: str) -> None:
        if rec.get("t") != "d":
            rec["ln"] = [ln for ln in rec.get("ln", [[parent, name]]) if ln != [parent, name]] + \
                [[newparent, newname]]
        else:
            rec["pa"] = newparent

    def _exchange(self, b, t, parent, name, src, newparent, newname, dst, src_dir, dst_dir) -> None:
        a, z = self._inode(src[0]), self._inode(dst[0])
        b.delete(keys.entry(parent, name, src[1]))
        b.delete(keys.entry(newparent, newname, dst[1]))
        self._relink(a, parent, name, newparent, newname)
        self._relink(z, newparent, newname, parent, name)
        a["ct"] = z["ct"] = t
        self._put_inode(b, src[0], a)
        self._put_inode(b, dst[0], z)
        self._put_entry(b, newparent, newname, src[0], a)
        self._put_entry(b, parent, name, dst[0], z)
        self._touch_dir(b, parent, src_dir, t)
        if newparent != parent:
            self._touch_dir(b, newparent, dst_dir, t)

    def setattr(self, ino: int, fields: dict, bucket: str | None = None) -> dict:
        """chmod, chown, utimens (fields mode, uid, gid, at, mt in ns) and truncate to zero (size 0); ctime becomes
        now. Other sizes are written by the client (commit) since they need the data."""
        return self.meta.execute(cmds.SetAttr(bi=self.bi, ino=int(ino), fields=fields, bucket=bucket, t=now_ns()))

    def _apply_set_attr(self, b, c: cmds.SetAttr) -> dict:
        ino, fields, bucket, t = c.ino, c.fields, c.bucket, c.t
        rec = self._inode(ino)
        self._set_attrs(rec, fields)
        if "size" in fields:
            if rec.get("t") != "f":
                raise errors.NotARegularFile("only regular files have a size to set")
            if int(fields["size"]) != 0:
                raise errors.InvalidInput("only truncation to zero is done in place")
            if rec.get("size", 0) != 0 or rec.get("blk"):
                self.meta.check_inode_unlocked(ino, rec, t)  # object lock: a locked version is not rewritten
                charge = self._charge(bucket, -self._visible(rec)[0] * len(rec.get("ln", [1])), 0)
                charge(b)
                self.meta.free_blocks(b, rec.get("blk", []), t)
                rec.update(size=0, blk=[], etag=EMPTY_ETAG)
                rec.pop("cs", None)
                if "mt" not in fields:
                    rec["mt"] = t
                rec["ct"] = t
                self._put_links(b, ino, rec)
                return self.attr(ino, rec)
        rec["ct"] = t
        self._put_links(b, ino, rec)
        return self.attr(ino, rec)

    @staticmethod
    def _set_attrs(rec: dict, fields: dict) -> None:
        """chmod, chown, utimens of inode record `rec` (fields mode, uid, gid, at, mt; the file type kept)."""
        if "mode" in fields:
            rec["mode"] = st.S_IFMT(rec.get("mode", 0)) | (int(fields["mode"]) & 0o7777)
        for k in ("uid", "gid", "at", "mt"):
            if k in fields:
                rec[k] = int(fields[k])

    def layout(self, ino: int) -> dict:
        """What a writer needs to change part of a file: its blocks' ids and sizes, in order, and its version."""
        rec = self._inode(ino)
        if rec.get("t") != "f":
            raise errors.NotARegularFile(f"inode {ino} is not a regular file")
        return {"blk": [[block_id(x), block_size(x)] for x in rec.get("blk", [])], "size": rec.get("size", 0),
                "etag": rec.get("etag", "")}

    def commit(self, ino: int, blk: list, size: int, etag: str, bucket: str | None = None,
               base: str | None = None, mt: int | None = None, fresh: bool = False,
               held: dict | None = None) -> dict:
        """New content of file `ino` (new blocks already durable on DataNodes): replaces the block list at once,
        frees the blocks no longer used, and refreshes every name's listing summary.

        An entry of `blk` that is a bare block id keeps that block of the file's current version, so a write into
        a large file stores only the blocks it changed. Such a commit must name the version it was made from
        (`base`, its ETag): if the file was replaced meanwhile (an S3 PUT), ESTALE, and nothing changes.

        The mtime becomes now, or `mt`: a time set explicitly (utimens) after the last write of these changes, as
        `tar x` and `cp -p` do before they close the file. `fresh`: every new block must be pending (allocated,
        never committed), as blocks a client stored directly with a write token must. `held`: a chmod, chown or
        atime (mode, uid, gid, at) set with the new content, as setattr would."""
        if held and set(held) - {"mode", "uid", "gid", "at"}:
            raise errors.InvalidInput(f"a commit sets only mode, uid, gid and at, not {sorted(set(held))}")
        return self.meta.execute(cmds.Commit(bi=self.bi, ino=int(ino), blk=blk, size=int(size), etag=etag,
                                             bucket=bucket, base=base, mt=None if mt is None else int(mt),
                                             t=now_ns(), fresh=fresh,
                                             held={k: int(v) for k, v in held.items()} if held else None))

    def _apply_commit(self, b, c: cmds.Commit) -> dict:
        ino, blk, size, etag, bucket, base, mt, t = c.ino, c.blk, c.size, c.etag, c.bucket, c.base, c.mt, c.t
        rec = self._inode(ino)
        if rec.get("t") != "f":
            raise errors.NotARegularFile(f"inode {ino} is not a regular file")
        if rec.get("sse") is not None:  # its blocks are ciphertext: a writer without the key would mix in plaintext
            raise errors.EncryptedObject(f"inode {ino} is encrypted server-side: write it through S3")
        old = rec.get("blk", [])
        if base is not None and base != rec.get("etag", ""):
            raise errors.FileChanged(f"inode {ino} changed since it was opened")
        self.meta.check_inode_unlocked(ino, rec, t)  # object lock: a locked version is not rewritten in place
        have = {block_id(x): x for x in old} if base is not None else {}
        try:
            blk = [have[x] if isinstance(x, int) else x for x in blk]
        except KeyError as e:
            raise errors.InvalidInput(f"block {e} is not one of inode {ino}'s") from None
        if sum(block_size(x) for x in blk) != size:
            raise errors.InvalidInput(f"the blocks of inode {ino} don't add up to {size} bytes")
        if c.fresh and self.meta.not_fresh([x for x in c.blk if not isinstance(x, int)]) is not None:
            raise errors.InvalidInput(f"a block of inode {ino} was not allocated for this write, or is committed")
        kept = {block_id(x) for x in blk}
        if len(kept) != len(blk):
            raise errors.InvalidInput(f"a block is named twice in the new content of {ino}")
        charge = self._charge(bucket, (size - int(rec.get("size", 0))) * len(rec.get("ln", [1])), 0)
        charge(b)
        self.meta.free_blocks(b, [x for x in old if block_id(x) not in kept], t)
        rec.pop("cs", None)
        rec.pop("mpu", None)
        rec.pop("ps", None)
        rec.update(blk=blk, size=size, etag=etag, mt=t if mt is None else int(mt), ct=t)
        if c.held:
            self._set_attrs(rec, c.held)  # (mode, uid, gid, at: commit checked)
        for x in blk:
            b.delete(keys.pending(block_id(x)))
        self._put_links(b, ino, rec)
        return {**self.attr(ino, rec), "layout": [[block_id(x), block_size(x)] for x in blk]}

    # ---------------------------------------------------------------- extended attributes
    # One store for a file's user metadata: the `user.` attributes of an object are its S3 user metadata
    # (x-amz-meta-NAME is user.NAME), so what boto3 wrote shows in getfattr and what setfattr wrote shows in a
    # HEAD, and an S3 PUT or CopyObject (REPLACE) of the key replaces them as it replaces the content. S3 metadata is
    # header text within 2 KiB: an attribute it can't carry (a binary or padded value, a name with capitals, no room
    # left, a directory without marker, trusted.*) is kept in the inode's "xa" instead, visible through the mount
    # only. Each name lives in one of the two places, so nothing is stored twice. Either way they belong to the
    # inode: they follow renames and hard links and go with it.
    @staticmethod
    def _s3_meta(rec: dict) -> dict | None:
        """The S3 user metadata of the object this inode is (a file, or a directory with a marker), else None."""
        if rec.get("t") == "f":
            return rec.setdefault("meta", {})
        return rec["mk"].setdefault("meta", {}) if "mk" in rec else None

    def _xattrs(self, rec: dict) -> dict[str, str]:
        out = {"user." + k: v for k, v in (self._s3_meta(rec) or {}).items()}
        out.update(rec.get("xa", {}))
        return out

    @staticmethod
    def _xattr_name(rec: dict, name: str, write: bool) -> None:
        """Linux's rules for a name: ERANGE for an empty or too long one, EOPNOTSUPP outside the namespaces kept
        here (security.*, system.* ACLs), EINVAL for a bare prefix; user.* only on files and directories (EPERM
        to set on a symlink or device, ENODATA to read)."""
        if not name or len(_latin1(name)) > XATTR_NAME_MAX:
            raise errors.InvalidAttributeName("attribute name empty or longer than 255 bytes")
        ns = next((p for p in XATTR_NAMESPACES if name.startswith(p)), None)
        if ns is None:
            raise errors.UnsupportedAttributeNamespace(f"attribute namespace of {name!r} not supported")
        if name == ns:
            raise errors.InvalidInput(f"attribute name {name!r} is only a namespace")
        if ns == "user." and rec.get("t") not in ("f", "d"):
            if write:
                raise errors.MethodNotAllowed("user attributes are for files and directories")
            raise errors.NoSuchAttribute(f"no attribute {name!r}")

    def getxattr(self, ino: int, name: str) -> str:
        rec = self._inode(ino)
        self._xattr_name(rec, name, write=False)
        value = self._xattrs(rec).get(name)
        if value is None:
            raise errors.NoSuchAttribute(f"no attribute {name!r}")
        return value

    def listxattr(self, ino: int) -> list[str]:
        return list(self._xattrs(self._inode(ino)))

    def setxattr(self, ino: int, name: str, value: str, flags: int = 0) -> None:
        """Set one attribute (`value` is its bytes as latin-1 text); XATTR_CREATE fails with EEXIST if it is
        there, XATTR_REPLACE with ENODATA if it is not."""
        self.meta.execute(cmds.SetXattr(bi=self.bi, ino=int(ino), name=name, value=value, flags=int(flags),
                                        t=now_ns()))

    def _apply_set_xattr(self, b, c: cmds.SetXattr) -> None:
        ino, name, value, flags = c.ino, c.name, c.value, c.flags
        rec = self._inode(ino)
        self._xattr_name(rec, name, write=True)
        raw = _latin1(value)
        if len(raw) > XATTR_SIZE_MAX:
            raise errors.AttributeTooLarge("attribute value larger than 64 KiB")
        have = self._xattrs(rec)
        if flags & XATTR_CREATE and name in have:
            raise errors.AlreadyExists(f"attribute {name!r} exists")
        if flags & XATTR_REPLACE and name not in have:
            raise errors.NoSuchAttribute(f"no attribute {name!r}")
        have.pop(name, None)
        if sum(len(n) + len(v) for n, v in have.items()) + len(name) + len(value) > XATTR_TOTAL_MAX:
            raise errors.NoRoomForAttributes(f"no room for more attributes on inode {ino}")
        self._drop_xattr(rec, name)
        meta = self._s3_meta(rec)
        key = name[5:]
        if meta is not None and name.startswith("user.") and set(key) <= _S3_META_NAME and \
                all(0x20 <= c < 0x7f for c in raw) and raw == raw.strip() and \
                sum(len(k) + len(v) for k, v in meta.items()) + len(key) + len(value) <= S3_META_MAX:
            meta[key] = value
        else:
            rec.setdefault("xa", {})[name] = value
        self._save_xattrs(b, ino, rec, c.t)

    def removexattr(self, ino: int, name: str) -> None:
        self.meta.execute(cmds.RemoveXattr(bi=self.bi, ino=int(ino), name=name, t=now_ns()))

    def _apply_remove_xattr(self, b, c: cmds.RemoveXattr) -> None:
        ino, name = c.ino, c.name
        rec = self._inode(ino)
        self._xattr_name(rec, name, write=True)
        if not self._drop_xattr(rec, name):
            raise errors.NoSuchAttribute(f"no attribute {name!r}")
        self._save_xattrs(b, ino, rec, c.t)

    def _drop_xattr(self, rec: dict, name: str) -> bool:
        meta = self._s3_meta(rec) or {}
        found = name.startswith("user.") and meta.pop(name[5:], None) is not None
        found = rec.get("xa", {}).pop(name, None) is not None or found
        if "xa" in rec and not rec["xa"]:
            del rec["xa"]
        return found

    def _save_xattrs(self, b, ino: int, rec: dict, t: int) -> None:
        rec["ct"] = t
        self._put_inode(b, ino, rec)

