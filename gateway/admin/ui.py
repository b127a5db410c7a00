"""The dashboard at /admin/ui: one self-contained page (inline CSS, JS and SVG, nothing fetched from elsewhere)
that polls the admin API every REFRESH_MS. The page itself asks for admin credentials (HTTP Basic), and the
browser then sends them with the page's API calls."""
from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from .auth import AdminDep

router = APIRouter(tags=["dashboard"])
REFRESH_MS = 2000

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>epochfs</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#f4f5f7;color:#222}
header{background:#1f2937;color:#fff;padding:10px 20px;display:flex;gap:16px;align-items:center}
h1{font-size:18px;margin:0} h2{font-size:15px;margin:0 0 8px}
main{padding:16px 20px;display:grid;gap:16px;grid-template-columns:repeat(auto-fit,minmax(420px,1fr))}
section{background:#fff;border-radius:6px;padding:12px 16px;box-shadow:0 1px 2px #0002}
.badge{padding:2px 10px;border-radius:10px;font-weight:600}
.ok{background:#16a34a}.degraded{background:#d97706}.down{background:#dc2626}.unknown{background:#6b7280}
table{border-collapse:collapse;width:100%} td,th{padding:3px 6px;text-align:left;border-bottom:1px solid #eee}
.bar{background:#e5e7eb;height:10px;border-radius:3px;width:160px}.bar>div{background:#2563eb;height:10px;border-radius:3px}
.kv{display:grid;grid-template-columns:auto 1fr;gap:2px 12px} #err{color:#dc2626}
</style></head><body>
<header><h1>epochfs</h1><span id="health" class="badge unknown">…</span><span id="updated"></span><span id="err"></span></header>
<main>
<section><h2>Cluster</h2><div class="kv" id="summary"></div></section>
<section><h2>Throughput (this gateway)</h2>
<svg id="chart" viewBox="0 0 400 150" width="100%" height="150" role="img" aria-label="throughput chart">
<polyline id="line-in" fill="none" stroke="#2563eb" stroke-width="2" points=""/>
<polyline id="line-out" fill="none" stroke="#16a34a" stroke-width="2" points=""/>
<text x="4" y="12" font-size="10" id="chart-max"></text></svg>
<div><span style="color:#2563eb">&#9632; in</span> <span style="color:#16a34a">&#9632; out</span>
<span id="rates"></span></div></section>
<section style="grid-column:1/-1"><h2>NameNodes <span id="ha-mode"></span></h2><table><thead><tr><th>name</th>
<th>address</th><th>role</th><th>applied</th><th>lag</th><th>error</th></tr></thead><tbody id="namenodes"></tbody></table>
<table id="etcd-table"><thead><tr><th>etcd endpoint</th><th>health</th><th>leader</th><th>db size</th><th>revision</th>
<th>error</th></tr></thead><tbody id="etcd"></tbody></table><div id="ha-err"></div></section>
<section style="grid-column:1/-1"><h2>DataNodes</h2><table><thead><tr><th>id</th><th>address</th><th>state</th>
<th>capacity used</th><th>used / capacity</th><th>blocks</th><th>last heartbeat</th><th>replication lag</th></tr></thead>
<tbody id="nodes"></tbody></table></section>
</main>
<script>
const REFRESH = __REFRESH__, N = 60, samples = [];
const fmt = b => { const u = ["B","KiB","MiB","GiB","TiB","PiB"]; let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; } return b.toFixed(i ? 1 : 0) + " " + u[i]; };
const esc = s => String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c]));
async function get(path) {
  const r = await fetch("/admin/v1/" + path, {credentials: "same-origin", cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}
function drawChart() {
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i], dt = (b.t - a.t) / 1000 || 1;
    rates.push({in: (b.g.bytes_in - a.g.bytes_in) / dt, out: (b.g.bytes_out - a.g.bytes_out) / dt,
                req: (b.g.requests - a.g.requests) / dt});
  }
  const max = Math.max(1, ...rates.map(r => Math.max(r.in, r.out)));
  const pts = k => rates.map((r, i) => (i * 400 / (N - 1)).toFixed(1) + "," + (145 - r[k] / max * 125).toFixed(1)).join(" ");
  document.getElementById("line-in").setAttribute("points", pts("in"));
  document.getElementById("line-out").setAttribute("points", pts("out"));
  document.getElementById("chart-max").textContent = fmt(max) + "/s";
  const last = rates[rates.length - 1];
  if (last) document.getElementById("rates").textContent =
    ` in ${fmt(last.in)}/s, out ${fmt(last.out)}/s, ${last.req.toFixed(1)} req/s`;
}
async function refreshHa() {
  try {
    const h = await get("ha"), etcd = h.mode === "etcd";
    document.getElementById("ha-mode").textContent = etcd ?
      `(etcd, epoch ${h.epoch}, leader ${h.leader || "none"}, log ${h.log_first}..${h.log_end})` : `(${h.mode})`;
    document.getElementById("namenodes").innerHTML = h.namenodes.map(n => `<tr class="namenode"
      data-role="${esc(n.role)}"><td>${esc(n.name)}</td><td>${esc(n.address)}</td>
      <td>${esc(n.role + (n.current ? " (this gateway's)" : ""))}</td><td>${etcd ? n.applied : "-"}</td>
      <td>${etcd ? n.lag : "-"}</td><td>${esc(n.error || "")}</td></tr>`).join("");
    document.getElementById("etcd-table").style.display = etcd ? "" : "none";
    document.getElementById("etcd").innerHTML = h.etcd.map(e => `<tr class="etcd"><td>${esc(e.endpoint)}</td>
      <td>${e.healthy ? "healthy" : "UNHEALTHY"}</td><td>${e.leader ? "yes" : ""}</td>
      <td>${e.db_size == null ? "-" : fmt(e.db_size)}</td><td>${e.revision == null ? "-" : e.revision}</td>
      <td>${esc(e.error || "")}</td></tr>`).join("");
    document.getElementById("ha-err").textContent = "";
  } catch (e) { document.getElementById("ha-err").textContent = String(e); }
}
async function refresh() {
  refreshHa();
  try {
    const [s, nodes] = await Promise.all([get("summary"), get("nodes")]);
    const h = document.getElementById("health");
    h.textContent = s.health; h.className = "badge " + s.health;
    const rows = [["capacity", fmt(s.capacity)], ["used", fmt(s.used)], ["free", fmt(s.free)],
      ["buckets", s.buckets], ["objects", s.objects], ["object bytes", fmt(s.bytes)],
      ["DataNodes", Object.entries(s.nodes).map(([k, v]) => v + " " + k).join(", ") || "none"],
      ["under-replicated blocks", s.under_replicated], ["lost blocks", s.lost],
      ["copies waiting", s.waiting_for_copies]];
    document.getElementById("summary").innerHTML = rows.map(([k, v]) => `<b>${esc(k)}</b><span>${esc(v)}</span>`).join("");
    document.getElementById("nodes").innerHTML = nodes.map(n => {
      const pct = n.capacity ? Math.min(100, 100 * n.used / n.capacity) : 0;
      return `<tr class="node" data-id="${n.id}"><td>${n.id}</td><td>${esc(n.address)}</td>
        <td>${esc(n.state + (n.write_error ? ": " + n.write_error : ""))}</td>
        <td><div class="bar"><div style="width:${pct.toFixed(1)}%"></div></div></td>
        <td>${fmt(n.used)} / ${fmt(n.capacity)}</td><td>${n.blocks}</td>
        <td>${n.last_heartbeat_s == null ? "never" : n.last_heartbeat_s.toFixed(1) + " s ago"}</td>
        <td>${n.replication_lag == null ? "-" : n.replication_lag}</td></tr>`; }).join("");
    samples.push({t: Date.now(), g: s.gateway}); if (samples.length > N) samples.shift();
    drawChart();
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.getElementById("err").textContent = "";
  } catch (e) { document.getElementById("err").textContent = String(e); }
}
refresh(); setInterval(refresh, REFRESH);
</script></body></html>
""".replace("__REFRESH__", str(REFRESH_MS))


@router.get("/admin/ui", response_class=HTMLResponse, include_in_schema=False)
async def dashboard(_: AdminDep) -> HTMLResponse:
    return HTMLResponse(PAGE, headers={"cache-control": "no-store"})
