"""DataNode membership: registration, heartbeats, liveness, and the cluster snapshot placement works on."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from epochfs.common import errors

from .metastore import MetaStore
from .placement import ClusterView, NodeView


DECOMMISSIONING, DECOMMISSIONED = "decommissioning", "decommissioned"
READ_ONLY = "read-only"  # alive, serving reads, but its store refuses writes: no new copies go there


@dataclass
class NodeState:
    id: int
    uuid: str
    host: str
    rpc_port: int
    http_port: int
    capacity: int = 0
    used: int = 0
    blocks: int = 0
    disk: str = ""  # the file system whose free space `capacity` is, shared with the nodes that name it too
    last_seen: float = 0.0  # monotonic; 0 = not heard from since the NameNode started
    extra: dict = field(default_factory=dict)
    admin: str = ""  # "" (in service), DECOMMISSIONING or DECOMMISSIONED; kept in the node's record
    write_error: str = ""  # from the heartbeat: why the node's store refuses writes ("": it takes them)

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.rpc_port}"


STORED_ADDRS_S = 10.0


class Membership:
    def __init__(self, meta: MetaStore, timeout_s: float) -> None:
        self.meta = meta
        self.timeout_s = timeout_s
        self._stored: dict[int, str] = {}  # addresses of registered DataNodes not in `nodes` (see addrs)
        self._stored_at = float("-inf")
        self.reload()

    def reload(self) -> None:
        """The DataNodes as the store knows them, none heard from yet (at start, and when a standby NameNode
        becomes the active one: its store has every registration, its memory none of their heartbeats)."""
        self.nodes: dict[int, NodeState] = {}
        self.started = time.monotonic()
        for nid, rec in self.meta.load_nodes().items():
            self.nodes[nid] = NodeState(id=nid, **{k: rec[k] for k in ("uuid", "host", "rpc_port", "http_port")},
                                        capacity=rec.get("capacity", 0), used=rec.get("used", 0),
                                        admin=rec.get("admin", ""))

    def register(self, uuid: str, host: str, rpc_port: int, http_port: int, capacity: int, used: int) -> NodeState:
        nid = self.meta.node_id_for(uuid)
        old = self.nodes.get(nid)
        st = NodeState(id=nid, uuid=uuid, host=host, rpc_port=rpc_port, http_port=http_port, capacity=capacity,
                       used=used, last_seen=time.monotonic(), admin=old.admin if old else "")
        self.nodes[nid] = st
        self._save(st)
        return st

    def _save(self, st: NodeState) -> None:
        self.meta.save_node(st.id, {"uuid": st.uuid, "host": st.host, "rpc_port": st.rpc_port,
                                    "http_port": st.http_port, "capacity": st.capacity, "used": st.used,
                                    **({"admin": st.admin} if st.admin else {})})

    def set_admin(self, node_id: int, admin: str) -> NodeState:
        """Start (DECOMMISSIONING) or finish (DECOMMISSIONED) a decommission; survives NameNode restarts."""
        st = self.nodes.get(node_id)
        if st is None:
            raise errors.NotFound(f"no DataNode {node_id}")
        st.admin = admin
        self._save(st)
        return st

    def draining(self) -> set[int]:
        """Nodes being decommissioned or decommissioned: they get no new blocks and their copies are moved away."""
        return {n.id for n in self.nodes.values() if n.admin}

    def state(self, st: NodeState, now: float | None = None) -> str:
        """alive | dead | decommissioning | decommissioned | read-only."""
        if st.admin == DECOMMISSIONED:
            return DECOMMISSIONED
        if not self.alive(st, now):
            return "dead"
        return st.admin or (READ_ONLY if st.write_error else "alive")

    def heartbeat(self, node_id: int, used: int, capacity: int, blocks: int, extra: dict,
                  write_error: str = "", disk: str = "") -> bool:
        st = self.nodes.get(node_id)
        if st is None:
            return False  # unknown: the DataNode must register again
        st.used, st.capacity, st.blocks, st.extra, st.disk = used, capacity, blocks, extra, disk
        st.write_error = write_error
        st.last_seen = time.monotonic()
        return True

    def alive(self, st: NodeState, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return st.last_seen > 0 and now - st.last_seen <= self.timeout_s

    def settled(self, now: float | None = None) -> bool:
        """True once the NameNode has been up for longer than the timeout: every live DataNode has heartbeated by
        then, so a node not alive is really dead (before that, right after a restart, every node looks silent)."""
        now = time.monotonic() if now is None else now
        return now - self.started > self.timeout_s

    def dead(self) -> set[int]:
        """Known nodes silent for longer than the timeout (empty until settled)."""
        now = time.monotonic()
        if not self.settled(now):
            return set()
        return {n.id for n in self.nodes.values() if not self.alive(n, now) and n.admin != DECOMMISSIONED}

    def view(self, reserve_bytes: int = 0, ordered: dict[int, int] | None = None) -> ClusterView:
        """The snapshot placement works on; nodes with `reserve_bytes` or less free space count as full. `ordered`:
        bytes already on their way to a node (copies ordered, not yet confirmed), taken off its free space."""
        now = time.monotonic()
        ordered = ordered or {}
        return ClusterView(nodes=tuple(
            NodeView(id=n.id, alive=self.alive(n, now), free_bytes=max(n.capacity - n.used - ordered.get(n.id, 0), 0),
                     draining=bool(n.admin), read_only=bool(n.write_error))
            for n in self.nodes.values()), reserve_bytes=reserve_bytes)

    def addrs(self, ids) -> dict[str, str]:
        out = {str(i): self.nodes[i].addr for i in ids if i in self.nodes}
        if len(out) < len(ids):  # a standby NameNode answering a stale read knows only the DataNodes registered
            # before it started (heartbeats go to the active one); the store has every registration, read again
            # when a node is missing or the copy is older than STORED_ADDRS_S (a node re-registered elsewhere)
            now = time.monotonic()
            if now - self._stored_at > STORED_ADDRS_S or any(i not in self.nodes and i not in self._stored
                                                             for i in ids):
                self._stored = {nid: f"{r['host']}:{r['rpc_port']}" for nid, r in self.meta.load_nodes().items()}
                self._stored_at = now
            out |= {str(i): self._stored[i] for i in ids if i in self._stored and str(i) not in out}
        return out
