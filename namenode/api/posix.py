"""Handlers for the POSIX namespace by inode (namenode/posix.py), which the mount reaches through the gateway's
/_epochfs/fs: one typed request per operation, each checked against the bucket the gateway scoped it to, plus the
data path's calls (a file's blocks with their holders' addresses, a commit of new content) and statfs."""
from __future__ import annotations

import msgspec

from epochfs.common import errors
from epochfs.common import messages as m
from epochfs.common.blocks import block_nodes
from epochfs.common.messages import op_name
from epochfs.common.space import pooled

from .. import keys
from ..membership import Membership
from ..metastore import MetaStore
from ..posix import Posix


def handlers(meta: MetaStore, members: Membership, admit) -> dict:
    """`admit(bucket, blocks)` checks a commit's new blocks against the bucket's write policy (see make_handlers)."""
    posix = Posix(meta)

    def scope(req: m.FsRequest, op: str | None = None) -> None:
        """Check every inode `req` names lies in its bucket (Posix.scope reads the operation's name and inodes)."""
        fields = {f: getattr(req, f) for f in ("ino", "parent", "newparent", "name") if hasattr(req, f)}
        posix.scope(req.bi, op or op_name(type(req))[3:], fields)

    def attr(d: dict) -> m.InodeAttr:
        return m.InodeAttr(**d)

    async def lookup(req: m.FsLookup, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.lookup(req.parent, req.name))

    async def getattr_(req: m.FsGetattr, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.getattr(req.ino))

    async def readdir(req: m.FsReaddir, _) -> m.DirPage:
        scope(req)
        page = posix.readdir(req.ino, req.after, req.limit)
        return m.DirPage(entries=[m.DirEntry(name, attr(a)) for name, a in page["entries"]], next=page["next"])

    async def dirs(req: m.FsDirs, _) -> m.DirsNames:
        scope(req)
        return m.DirsNames(dirs=[m.DirNames(ino, a and attr(a), names, inos)
                                 for ino, a, names, inos in posix.dirs(req.inos, req.MAX_NAMES)])

    async def readlink(req: m.FsReadlink, _) -> m.LinkTarget:
        scope(req)
        return m.LinkTarget(target=posix.readlink(req.ino))

    async def layout(req: m.FsLayout, _) -> m.FileLayout:
        scope(req)
        return msgspec.convert(posix.layout(req.ino), m.FileLayout)

    async def mkdir(req: m.FsMkdir, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.mkdir(req.parent, req.name, req.mode, req.uid, req.gid))

    async def mknod(req: m.FsMknod, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.mknod(req.parent, req.name, req.mode, req.uid, req.gid, req.rdev, req.bucket))

    async def symlink(req: m.FsSymlink, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.symlink(req.parent, req.name, req.target, req.uid, req.gid))

    async def link(req: m.FsLink, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.link(req.ino, req.parent, req.name, req.bucket))

    async def unlink(req: m.FsUnlink, _) -> m.Changed:
        scope(req)
        return m.Changed(t=posix.unlink(req.parent, req.name, req.bucket))

    async def rmdir(req: m.FsRmdir, _) -> m.Done:
        scope(req)
        posix.rmdir(req.parent, req.name)
        return m.Done()

    async def rename(req: m.FsRename, _) -> m.Done:
        scope(req)
        posix.rename(req.parent, req.name, req.newparent, req.newname, req.flags, req.bucket)
        return m.Done()

    async def setattr_(req: m.FsSetattr, _) -> m.InodeAttr:
        scope(req)
        return attr(posix.setattr(req.ino, msgspec.to_builtins(req.fields), req.bucket))

    async def getxattr(req: m.FsGetxattr, _) -> m.XattrValue:
        scope(req)
        return m.XattrValue(value=posix.getxattr(req.ino, req.name))

    async def listxattr(req: m.FsListxattr, _) -> m.XattrNames:
        scope(req)
        return m.XattrNames(names=posix.listxattr(req.ino))

    async def setxattr(req: m.FsSetxattr, _) -> m.Done:
        scope(req)
        posix.setxattr(req.ino, req.name, req.value, req.flags)
        return m.Done()

    async def removexattr(req: m.FsRemovexattr, _) -> m.Done:
        scope(req)
        posix.removexattr(req.ino, req.name)
        return m.Done()

    async def blocks(req: m.FsBlocks, _) -> m.FileBlocks:
        scope(req, "read")
        res = posix.blocks(req.ino)
        res["addrs"] = members.addrs({n for blk in res["blk"] for n in block_nodes(blk)})
        return msgspec.convert(res, m.FileBlocks)

    async def commit(req: m.FsCommit, _) -> m.FsCommitted:
        scope(req, "commit")
        new = admit(req.bucket, req.blk)
        held = {k: v for k, v in msgspec.to_builtins(req.held).items() if v is not None} if req.held else None
        return msgspec.convert(posix.commit(req.ino, new, req.size, req.etag, req.bucket, req.base, req.mt,
                                            req.fresh, held), m.FsCommitted)

    async def reserve_inodes(req: m.FsReserveInodes, _) -> m.InodeRange:
        scope(req)
        return m.InodeRange(first=posix.reserve_inodes(req.n, req.owner), n=req.n)

    async def create_files(req: m.FsCreateFiles, _) -> m.FilesCreated:
        scope(req, "create")
        out: list[m.FileCreated | None] = [None] * len(req.items)
        todo, where = [], []
        for i, item in enumerate(req.items):
            try:
                blk = admit(req.bucket, item.blk)
            except errors.DomainError as e:
                out[i] = m.FileCreated(err=type(e).__name__, msg=e.message)
                continue
            todo.append({"f": msgspec.to_builtins(item.f), "blk": blk, "etag": item.etag})
            where.append(i)
        for i, res in zip(where, posix.create_files(todo, req.bucket, req.owner) if todo else ()):
            out[i] = m.FileCreated(err=type(res).__name__, msg=res.message) if isinstance(res, errors.DomainError) \
                else m.FileCreated(layout=msgspec.convert(res.pop("layout"), list[m.BlockSpan]), a=attr(res))
        return m.FilesCreated(items=out)

    async def statfs(req: m.FsStatfs, _) -> m.FsUsage:
        capacity, used = pooled([n for n in members.nodes.values() if members.alive(n)])
        return m.FsUsage(capacity=capacity, used=used,
                         files=int.from_bytes(meta.kv.get(keys.counter(b"ino")) or b"", "big"))  # inodes ever made

    return {m.FsLookup: lookup, m.FsGetattr: getattr_, m.FsReaddir: readdir, m.FsDirs: dirs, m.FsReadlink: readlink,
            m.FsLayout: layout, m.FsMkdir: mkdir, m.FsMknod: mknod, m.FsSymlink: symlink, m.FsLink: link,
            m.FsUnlink: unlink, m.FsRmdir: rmdir, m.FsRename: rename, m.FsSetattr: setattr_,
            m.FsGetxattr: getxattr, m.FsListxattr: listxattr, m.FsSetxattr: setxattr, m.FsRemovexattr: removexattr,
            m.FsBlocks: blocks, m.FsCommit: commit, m.FsStatfs: statfs,
            m.FsReserveInodes: reserve_inodes, m.FsCreateFiles: create_files}
