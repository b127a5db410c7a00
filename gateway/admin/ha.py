"""NameNode high availability: who is active, each NameNode's role and position in the metadata log, etcd's health.
Every NameNode the gateway was given answers `ha_status` (a standby too); the active one's answer (else the highest
epoch's) names the members, and a NameNode that did not answer is shown unreachable."""
from __future__ import annotations

import asyncio

from fastapi import APIRouter

from epochfs.common import errors
from epochfs.common import messages as m

from .auth import AdminDep
from .common import CtxDep
from .models import EtcdMember, HaNameNode, HaStatus

router = APIRouter(tags=["cluster"])
ASK_TIMEOUT_S = 3.0


async def _ask(nn, addr: str) -> m.HaState | errors.DomainError:
    try:
        return await asyncio.wait_for(nn.ha_status(addr), ASK_TIMEOUT_S)
    except errors.DomainError as e:
        return e
    except asyncio.TimeoutError:
        return errors.Unavailable(f"no answer from {addr} in {ASK_TIMEOUT_S:g} s")


def ha_view(answers: dict[str, m.HaState | errors.DomainError], current: str) -> HaStatus:
    """The HA status from each configured address's answer (`current`: where the gateway's calls go now)."""
    states = [s for s in answers.values() if isinstance(s, m.HaState)]
    best = max(states, key=lambda s: (s.role == "active", s.mode == "etcd", s.epoch), default=None)
    out: dict[str, HaNameNode] = {}
    log_end = best.log_end if best else 0
    if best is not None and best.mode == "etcd":
        for mem in best.members:
            out[mem.addr] = HaNameNode(name=mem.name, address=mem.addr, http=mem.http, role=mem.role or "standby",
                                       applied=mem.applied, lag=mem.lag or max(log_end - mem.applied, 0),
                                       reachable=None, current=mem.addr == current)
    for addr, ans in answers.items():
        if isinstance(ans, errors.DomainError):
            prev = out.get(addr)
            out[addr] = HaNameNode(name=prev.name if prev else addr, address=addr, http=prev.http if prev else "",
                                   role="unreachable", applied=prev.applied if prev else 0,
                                   lag=prev.lag if prev else 0, reachable=False, error=ans.message[:300],
                                   current=addr == current)
            continue
        stale = {"stale_served": ans.stale_served, "stale_refused": ans.stale_refused}
        if addr in out:  # listed by the leader; it answered us too
            out[addr] = out[addr].model_copy(update={"reachable": True, **stale})
            continue
        me = next((x for x in ans.members if x.addr == addr or x.name == ans.name), None)
        applied = me.applied if me else 0
        out[addr] = HaNameNode(name=ans.name or addr, address=addr, http=me.http if me else "", role=ans.role,
                               applied=applied, lag=(me.lag if me and me.lag else max(ans.log_end - applied, 0))
                               if ans.mode == "etcd" else 0, reachable=True, current=addr == current, **stale)
    etcd = [EtcdMember(endpoint=str(e.get("endpoint", "")), healthy=bool(e.get("healthy")), leader=e.get("leader"),
                       db_size=e.get("db_size"), revision=e.get("revision"), error=e.get("error") or None)
            for e in (best.etcd if best else [])]
    return HaStatus(mode=best.mode if best else "unknown", epoch=best.epoch if best else 0,
                    leader=best.leader if best else "", log_first=best.log_first if best else 0, log_end=log_end,
                    namenodes=sorted(out.values(), key=lambda n: n.name), etcd=etcd, gateway_moves=0,
                    gateway_redirects=0)


@router.get("/ha", response_model=HaStatus)
async def ha_status(_: AdminDep, ctx: CtxDep) -> HaStatus:
    """Each NameNode's role (active, standby, rebuilding; embedded without HA; unreachable), the position of the
    metadata log it applied and its lag, the fencing epoch and the leader, and the health of each etcd member."""
    nn = ctx.cluster.namenode
    addrs = nn.addresses
    answers = dict(zip(addrs, await asyncio.gather(*(_ask(nn, a) for a in addrs))))
    view = ha_view(answers, nn.address)
    return view.model_copy(update={"gateway_moves": nn.leader_changes, "gateway_redirects": nn.redirects})
