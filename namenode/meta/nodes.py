"""DataNode records and S3 access keys: the persistent part of membership and of the key store."""
from __future__ import annotations

from epochfs.common.kv import prefix_end

from .. import access_keys, commands as cmds, keys
from .base import StoreBase


class Nodes(StoreBase):
    """Node ids by DataNode uuid (X), node records (D) and access keys (K, see access_keys.py)."""

    def node_id_for(self, uuid: str) -> int:
        raw = self.kv.get(keys.node_uuid(uuid))
        if raw is not None:
            return int.from_bytes(raw, "big")
        return self.execute(cmds.AssignNodeId(uuid=uuid))

    def _apply_assign_node_id(self, b, c: cmds.AssignNodeId) -> int:
        raw = self.kv.get(keys.node_uuid(c.uuid))
        if raw is not None:
            return int.from_bytes(raw, "big")
        nid = self._next(b, b"node") - 1  # node ids start at 1
        b.put(keys.node_uuid(c.uuid), keys.u32(nid))
        return nid

    def save_node(self, node_id: int, rec: dict) -> None:
        self.execute(cmds.SaveNode(node_id=int(node_id), rec=rec))

    def _apply_save_node(self, b, c: cmds.SaveNode) -> None:
        b.put(keys.node(c.node_id), self._enc(c.rec))

    # ---------------------------------------------------------------- S3 access keys (access_keys.py)
    def _apply_create_access_key(self, b, c: cmds.CreateAccessKey) -> dict:
        return access_keys.apply_create(self.kv, b, c)

    def _apply_update_access_key(self, b, c: cmds.UpdateAccessKey) -> dict:
        return access_keys.apply_update(self.kv, b, c)

    def _apply_delete_access_key(self, b, c: cmds.DeleteAccessKey) -> None:
        access_keys.apply_delete(self.kv, b, c)

    def _apply_create_kms_key(self, b, c: cmds.CreateKmsKey) -> dict:
        return access_keys.apply_create_kms_key(self.kv, b, c)

    def load_nodes(self) -> dict[int, dict]:
        return {int.from_bytes(k[1:], "big"): self._dec(v) for k, v in self.kv.scan(keys.NODES, prefix_end(keys.NODES))}
