// muster's web UI: pages over intake's JSON at /v1/ui/, now (live, following the watch
// streams) or at any past position of the log (the time slider). No dependencies.
"use strict";

const ui = { at: null, head: 0, last: 0, stream: null, refreshing: null, page: "queues", arg: null };
const $ = (sel) => document.querySelector(sel);

// -- talking to intake -------------------------------------------------------------------

function headers() {
  const token = sessionStorage.getItem("muster-token");
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function get(path) {
  const sep = path.includes("?") ? "&" : "?";
  const url = ui.at === null ? path : `${path}${sep}at=${ui.at}`;
  const resp = await fetch(url, { headers: headers() });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const why = (body.error && body.error.message) || resp.statusText;
    throw new Error(resp.status === 401 ? `${why} — enter a token above` : why);
  }
  return body;
}

// -- formatting --------------------------------------------------------------------------

const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
// Times as the API gives them, RFC 3339 (an event's numeric `time` written the same way).
const when = (t) => (typeof t === "string" ? t : t ? new Date(t * 1000).toISOString().replace(/\.000Z$/, "Z") : "");
const status = (s) => `<span class="status ${esc(s)}">${esc(s)}</span>`;
const wlink = (id, name) => (id ? `<a href="#/workload/${encodeURIComponent(id)}">${esc(name || id)}</a>` : esc(name));

function table(cols, rows, testid) {
  const head = cols.map((c) => `<th>${esc(c[0])}</th>`).join("");
  const body = rows.map((r) => `<tr>${cols.map((c) => `<td>${c[1](r)}</td>`).join("")}</tr>`).join("");
  const empty = rows.length ? "" : `<tr><td colspan="${cols.length}" class="muted">none</td></tr>`;
  return `<table data-testid="${testid}"><thead><tr>${head}</tr></thead><tbody>${body}${empty}</tbody></table>`;
}

const more = (d) => (d.total > d.items.length ? `<p class="muted">showing the first ${d.items.length} of ${d.total}</p>` : "");

function bar(row) {
  const t = row.text;
  const scale = Math.max(row.potential, row.usage, row.nominal, 1);
  const pct = (v) => `${(100 * v) / scale}%`;
  const within = Math.min(row.usage, row.nominal);
  const borrowed = row.borrowed ? `, borrowing ${esc(t.borrowed)}` : "";
  const limits = [
    row.borrowingLimit !== null ? `borrowing limit ${esc(t.borrowingLimit)}` : "",
    row.lendingLimit !== null ? `lending limit ${esc(t.lendingLimit)}` : "",
  ].filter(Boolean).join(", ");
  return `<div class="resource" data-testid="quota-${esc(row.flavor)}-${esc(row.resource)}">
    <div class="label"><span>${esc(row.resource)} <span class="muted">(${esc(row.flavor)})</span></span>
      <span class="usage">${esc(t.usage)} / ${esc(t.nominal)} used${borrowed}</span></div>
    <div class="bar" title="most it could hold: ${esc(t.potential)}">
      <div class="used" style="width:${pct(within)}"></div>
      <div class="borrowed" style="left:${pct(row.nominal)};width:${pct(row.borrowed)}"></div>
      <div class="nominal" style="left:${pct(row.nominal)}"></div></div>
    ${limits ? `<div class="muted">${limits}</div>` : ""}</div>`;
}

// -- pages -------------------------------------------------------------------------------

const pages = {
  async queues() {
    const d = await get("/v1/ui/queues");
    const cq = (q) => `<div class="card" data-testid="cq-${esc(q.name)}"><h3>${esc(q.name)}</h3>
      <div class="muted">cohort ${esc(q.cohort || "none")} · ${q.pendingWorkloads} pending ·
        ${q.admittedWorkloads} admitted · weighted share ${q.weightedShare}</div>
      ${q.resources.map(bar).join("") || '<p class="muted">no quota</p>'}</div>`;
    const co = (c) => `<div class="card" data-testid="cohort-${esc(c.name)}"><h3>cohort ${esc(c.name)}</h3>
      <div class="muted">members: ${c.members.map(esc).join(", ")}${c.parent ? ` · parent ${esc(c.parent)}` : ""}</div>
      ${c.resources.map(bar).join("")}</div>`;
    return [d, `<h1>ClusterQueues</h1>
      <p class="legend muted">bars: <span style="background:var(--used)"></span>used within nominal
        <span style="background:var(--borrowed)"></span>borrowed <span style="background:var(--ink);width:2px"></span>nominal quota</p>
      <div class="grid">${d.clusterQueues.map(cq).join("")}</div>
      <h2>Cohorts</h2><div class="grid">${d.cohorts.map(co).join("") || '<p class="muted">none</p>'}</div>`];
  },

  async pending() {
    const d = await get("/v1/ui/pending");
    return [d, `<h1>Pending workloads</h1>${more(d)}${table([
      ["ClusterQueue", (i) => esc(i.clusterQueue)],
      ["Position", (i) => esc(i.positionInClusterQueue)],
      ["Workload", (i) => wlink(i.id, i.name)],
      ["Namespace", (i) => esc(i.namespace)],
      ["LocalQueue (position)", (i) => `${esc(i.localQueueName)} (${esc(i.positionInLocalQueue)})`],
      ["Priority", (i) => esc(i.priority)],
      ["Reason", (i) => `<b>${esc(i.reason)}</b>`],
      ["Message", (i) => esc(i.message)],
    ], d.items, "pending")}`];
  },

  async workloads() {
    const d = await get("/v1/ui/workloads");
    return [d, `<h1>Workloads</h1>${more(d)}${table([
      ["Workload", (w) => wlink(w.id, w.name)],
      ["Namespace", (w) => esc(w.namespace)],
      ["LocalQueue", (w) => esc(w.queueName)],
      ["ClusterQueue", (w) => esc(w.clusterQueue)],
      ["Status", (w) => status(w.status)],
      ["Reason", (w) => esc(w.reason)],
      ["Pods", (w) => esc(w.pods)],
      ["Submitted", (w) => when(w.submittedTime || w.submittedAt)],
    ], d.items, "workloads")}`];
  },

  async workload(id) {
    const d = await get(`/v1/ui/workloads/${encodeURIComponent(id)}`);
    const w = d.workload;
    const conditions = table([
      ["Type", (c) => esc(c.type)], ["Status", (c) => esc(c.status)], ["Reason", (c) => esc(c.reason)],
      ["Message", (c) => esc(c.message)], ["Last transition", (c) => when(c.lastTransitionTime)],
    ], w.conditions || [], "conditions");
    const pods = table([
      ["Pod", (p) => esc(p.name)], ["Node", (p) => esc(p.node || "")], ["Status", (p) => esc(p.status)],
      ["GPU shares", (p) => p.gpus.map((g) => `<code>${esc(g.uuid)}</code> ${g.cores}% cores, ${g.memoryMiB} MiB`).join("<br>")],
    ], w.pods, "pods");
    const checks = (w.admissionChecks || []).map((c) => `<li>${esc(c.name)}: <b>${esc(c.state)}</b> ${esc(c.message)}</li>`).join("");
    const requests = (w.provisioningRequests || []).map(request).join("");
    const events = d.events.map((e) => `<li><span class="muted">${when(e.occurredTime || e.time)} · #${e.position}</span>
      <span class="type">${esc(e.type)}</span> ${e.reason ? `<b>${esc(e.reason)}</b>` : ""} ${esc(e.message || "")}${where(e.data)}</li>`).join("");
    return [d, `<h1>${esc(w.name)} <span class="muted">${esc(w.namespace)}/${esc(w.id)}</span></h1>
      <div class="card" data-testid="workload-status">${status(w.status)} · <b>${esc(w.reason)}</b> — ${esc(w.message)}
        <div class="muted">LocalQueue ${esc(w.queueName)} · ClusterQueue ${esc(w.clusterQueue || "—")} ·
        priority ${esc(w.priority)} · attempt ${esc(w.attempt)} · submitted ${when(w.submittedTime || w.submittedAt)}</div>
        ${w.queue ? `<div>position ${w.queue.positionInClusterQueue} in its ClusterQueue</div>` : ""}</div>
      <h2>Conditions</h2>${conditions}
      ${checks ? `<h2>Admission checks</h2><ul>${checks}</ul>` : ""}
      <h2>Pods and nodes</h2>${pods}
      ${requests ? `<h2>Provisioning requests</h2>${requests}` : ""}
      <h2>Timeline</h2><ol class="timeline" data-testid="timeline">${events}</ol>`];
  },

  async nodes() {
    const d = await get("/v1/ui/nodes");
    const gpu = (g) => `<div class="gpu ${g.pods ? "busy" : ""}" data-testid="gpu-${esc(g.uuid)}">
      <b>GPU ${g.index}</b> ${esc(g.model)}<br>${g.usedCores}% cores, ${g.usedMemoryMiB}/${g.memoryMiB} MiB,
      ${g.pods}/${g.split} pods${g.exclusive ? " (exclusive)" : ""}
      ${g.slices.map((s) => `<div class="slice">${wlink(s.workload, s.name)} <code>${esc(s.pod)}</code>: ${s.cores}% · ${s.memoryMiB} MiB</div>`).join("")}</div>`;
    const node = (n) => `<div class="card" data-testid="node-${esc(n.name)}"><h3>${esc(n.name)}
      <span class="status ${n.state === "Ready" || n.state === "Provisioned" ? "Running" : "Pending"}">${esc(n.state)}</span></h3>
      <div class="muted">${esc(n.source)}${n.zone ? ` · zone ${esc(n.zone)}` : ""}${n.request ? ` · request ${esc(n.request)}` : ""}${n.since ? ` · since ${when(n.since)}` : ""}</div>
      ${n.accelerators.length ? `<div data-testid="accelerators-${esc(n.name)}">GPUs: ${n.accelerators.map((a) => `${esc(a.model)} <b>${esc(a.used)}/${esc(a.total)}</b> used`).join(" · ")}${n.sharedSlices.pods ? ` · ${esc(n.sharedSlices.pods)} pod(s) sharing ${esc(n.sharedSlices.devices)} GPU(s)` : ""}</div>` : ""}
      ${n.allocatable ? `<div>allocatable: ${Object.entries(n.allocatable).map(([r, v]) => `${esc(r)} ${esc(v)}`).join(", ")}</div>` : ""}
      ${(n.workloads || n.placed || []).map((w) => `<div>▸ ${wlink(w.workload, w.name)} ${w.pods ? `(${w.pods} pods)` : esc(w.pod)}</div>`).join("")}
      ${n.gpus.length ? `<div class="gpus">${n.gpus.map(gpu).join("")}</div>` : ""}</div>`;
    return [d, `<h1>Nodes</h1><div class="grid">${d.nodes.map(node).join("") || '<p class="muted">no nodes</p>'}</div>`];
  },

  async requests() {
    const d = await get("/v1/ui/provisioningrequests");
    return [d, `<h1>Provisioning requests</h1>${d.items.map(request).join("") || '<p class="muted">none</p>'}`];
  },
};

// The pod and node an event names (a pod started, failed or was evicted there).
const where = (data) => {
  const pod = data && typeof data.pod === "string" ? ` <code>${esc(data.pod)}</code>` : "";
  const node = data && typeof data.node === "string" ? ` on ${esc(data.node)}` : "";
  return pod + node;
};

function request(r) {
  const conditions = table([
    ["Condition", (c) => esc(c.type)], ["Status", (c) => esc(c.status)], ["Reason", (c) => esc(c.reason)],
    ["Message", (c) => esc(c.message)], ["Since", (c) => when(c.lastTransitionTime)],
  ], r.conditions, "conditions");
  return `<div class="card" data-testid="request-${esc(r.id)}"><h3>${esc(r.id)} ${status(r.status)}</h3>
    <div class="muted">${r.workload ? `for ${wlink(r.workload, r.workload)} · ` : ""}${r.zone ? `zone ${esc(r.zone)} · ` : ""}
    nodes: ${r.nodes.map(esc).join(", ") || "none"} · created ${when(r.createdAt)}</div>${conditions}</div>`;
}

// -- the moment shown: live or a past position ----------------------------------------------

function parseHash() {
  const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
  const [page, ...rest] = path.split("/");
  const at = new URLSearchParams(query || "").get("at");
  return { page: page || "queues", arg: rest.length ? decodeURIComponent(rest.join("/")) : null, at: at === null ? null : Number(at) };
}

function setHash(page, arg, at) {
  const path = arg ? `${page}/${encodeURIComponent(arg)}` : page;
  location.hash = `#/${path}${at === null ? "" : `?at=${at}`}`;
}

// Links between pages keep the moment shown: a past position stays until Live is pressed.
function keepMoment() {
  document.querySelectorAll('a[href^="#/"]').forEach((a) => {
    const base = a.getAttribute("href").split("?")[0];
    a.setAttribute("href", ui.at === null ? base : `${base}?at=${ui.at}`);
  });
}

function showMoment(d) {
  $("#live").classList.toggle("on", ui.at === null);
  $("#slider").max = String(Math.max(ui.head, d ? d.position : 0));
  $("#slider").value = ui.at === null ? $("#slider").max : String(ui.at);
  const t = d && d.time ? when(d.time) : "";
  $("#moment").textContent = ui.at === null ? `Live · position ${d ? d.position : "…"} · ${t}` : `As of position ${ui.at} · ${t}`;
  const banner = $("#banner");
  banner.className = "";
  banner.hidden = ui.at === null;
  if (ui.at !== null) banner.textContent = `Showing the cluster as it was at log position ${ui.at} (${t}), rebuilt from the log. Press Live to follow it now.`;
}

async function render() {
  const h = parseHash();
  Object.assign(ui, { page: h.page in pages ? h.page : "queues", arg: h.arg, at: h.at });
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === ui.page));
  try {
    const clock = await get("/v1/ui/clock");
    ui.head = clock.head;
    const [d, html] = await pages[ui.page](ui.arg);
    $("#main").innerHTML = html;
    showMoment(d);
    ui.last = Math.max(ui.last, ui.at === null ? d.position : 0);
  } catch (err) {
    $("#main").innerHTML = `<p class="muted">—</p>`;
    const banner = $("#banner");
    banner.hidden = false;
    banner.className = "error";
    banner.textContent = err.message;
  }
  keepMoment();
  follow();
}

// Live mode follows a watch stream and redraws the page (debounced) when something the
// caller may see happens: the workload's own event watch on its page, the UI's watch
// (every event the caller may see) elsewhere. Past moments follow nothing.
function follow() {
  const want = ui.at === null ? (ui.page === "workload" ? `/v1/workloads/${encodeURIComponent(ui.arg)}/events?watch=1` : "/v1/ui/events?watch=1") : null;
  if (ui.stream && ui.stream.url === want) return;
  if (ui.stream) ui.stream.abort.abort();
  ui.stream = null;
  if (want) stream(want);
}

async function stream(url) {
  const abort = new AbortController();
  const me = (ui.stream = { url, abort });
  while (ui.stream === me) {
    try {
      const resp = await fetch(`${url}&after=${ui.last}`, { headers: headers(), signal: abort.signal });
      if (!resp.ok) throw new Error(resp.statusText);
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        const lines = buffer.split("\n");
        buffer = lines.pop();
        for (const line of lines) if (line.trim()) changed(JSON.parse(line));
      }
    } catch (err) {
      if (abort.signal.aborted) return;
    }
    await new Promise((r) => setTimeout(r, 2000)); // then resume after the last seen
  }
}

function changed(event) {
  ui.last = Math.max(ui.last, event.position);
  ui.head = Math.max(ui.head, event.position);
  clearTimeout(ui.refreshing);
  ui.refreshing = setTimeout(() => ui.at === null && render(), 250);
}

// -- controls ----------------------------------------------------------------------------

$("#slider").addEventListener("input", (e) => { $("#moment").textContent = `Go to position ${e.target.value}…`; });
$("#slider").addEventListener("change", (e) => setHash(ui.page, ui.arg, Number(e.target.value)));
$("#live").addEventListener("click", () => setHash(ui.page, ui.arg, null));
$("#time-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  try {
    const d = await fetch(`/v1/ui/clock?time=${encodeURIComponent($("#time-input").value)}`, { headers: headers() }).then((r) => r.json());
    if (d.at === undefined) throw new Error((d.error && d.error.message) || "not a time");
    setHash(ui.page, ui.arg, d.at);
  } catch (err) {
    $("#banner").hidden = false;
    $("#banner").className = "error";
    $("#banner").textContent = err.message;
  }
});
function showToken() {
  const set = sessionStorage.getItem("muster-token");
  $("#token").placeholder = set ? "token in use (empty: forget it)" : "token (when auth is on)";
}

$("#token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const token = $("#token").value.trim();
  if (token) sessionStorage.setItem("muster-token", token);
  else sessionStorage.removeItem("muster-token");
  $("#token").value = "";
  showToken();
  if (ui.stream) ui.stream.abort.abort();
  ui.stream = null;
  render();
});
window.addEventListener("hashchange", render);
showToken();
render();
