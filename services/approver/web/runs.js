"use strict";
// The run page: recent runs, and a run's timeline, live by server-sent
// events. Everything is built with DOM calls and textContent: no markup
// from the data is ever parsed.
const PAGE = 100;
const params = new URLSearchParams(location.search);
const runId = params.get("run");
// scope names whose run it is (a tenant's agent's), when the list said so.
const scope = params.get("scope") || "";
const scopeQ = (r) => (r && r.scope ? "&scope=" + encodeURIComponent(r.scope) : "");
let page = Math.max(0, parseInt(params.get("page") || "0", 10) || 0);
let view = null; // the RunView on screen
const live = document.getElementById("live");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid !== null && kid !== undefined && kid !== "") e.append(kid);
  return e;
}
function when(t) { return t ? new Date(t).toLocaleString() : ""; }
function ms(n) { return n >= 1000 ? (n / 1000).toFixed(n >= 10000 ? 0 : 1) + " s" : n + " ms"; }
function setLive(on, text) { live.textContent = text; live.classList.toggle("on", on); }

// --- recent runs ---
function renderRuns(list) {
  const tb = document.querySelector("#runs tbody");
  const runs = list.runs || [];
  if (!runs.length) { tb.replaceChildren(el("tr", {}, el("td", { colspan: "9", class: "empty" }, "No run yet: runs appear here as agents call tools."))); return; }
  tb.replaceChildren(...runs.map((r) => el("tr", { id: "run-" + r.runId },
    el("td", {}, el("a", { href: "runs.html?run=" + encodeURIComponent(r.runId) + scopeQ(r), class: "mono" }, r.runId)),
    el("td", {}, String(r.calls)), el("td", { class: "ok" }, String(r.ok)), el("td", { class: r.errors ? "no" : "" }, String(r.errors)),
    el("td", { class: r.awaiting ? "wait" : "" }, String(r.awaiting)), el("td", { class: r.blocked ? "no" : "" }, String(r.blocked)),
    el("td", {}, String(r.running)), el("td", {}, when(r.lastAt)), el("td", {}, r.ended || (r.cancelled ? "cancelled" : "")))));
}
async function loadRuns() {
  const r = await fetch("/api/runs?limit=100");
  if (r.ok) renderRuns(await r.json());
}

// --- one run ---
function highlighted(value, spans) {
  // The value with the byte ranges that matched an untrusted output in <mark>.
  const bytes = new TextEncoder().encode(value);
  const dec = new TextDecoder();
  const out = el("span", { class: "value mono" });
  let at = 0;
  for (const [a, b] of spans) {
    if (a > at) out.append(dec.decode(bytes.slice(at, a)));
    out.append(el("mark", {}, dec.decode(bytes.slice(a, b))));
    at = b;
  }
  if (at < bytes.length) out.append(dec.decode(bytes.slice(at)));
  return out;
}
function provenance(list) {
  if (!list || !list.some((a) => a.seen)) return null;
  const box = el("div", { class: "provenance" });
  for (const a of list) {
    if (!a.seen) { box.append(el("div", { class: "arg clean" }, el("span", { class: "path mono" }, a.path), " not seen in any untrusted output")); continue; }
    for (const s of a.sources) {
      box.append(el("div", { class: "arg seen" }, el("span", { class: "path mono" }, a.path), " ", highlighted(a.value, s.spans || []),
        el("span", { class: "source" }, " seen in the output of ", el("b", { class: "mono" }, s.tool || "an earlier call"),
          s.callId ? " (call " + s.callId + ", " + s.sourceKind + ")" : " (" + s.sourceKind + ")")));
    }
  }
  return box;
}
// running returns [start, end] of the time the tool ran, in ms, as its
// duration says: from its start (or, when that is unknown, its end less
// its duration) for as long as it ran (until now while it runs); null
// before it started.
function running(row) {
  const finished = row.finishedAt ? new Date(row.finishedAt).getTime() : null;
  const start = row.startedAt ? new Date(row.startedAt).getTime() : (finished !== null ? finished - (row.durationMs || 0) : null);
  if (start === null) return null;
  if (finished !== null) return [start, start + (row.durationMs || 0)];
  return [start, row.state === "running" ? Date.now() : start];
}
// bar draws when a call waited and when it ran, within the run: waiting
// for a person (an approval) is a hatched stretch, not running time, so
// the bar says what the duration next to it says.
function bar(row, run) {
  const t0 = new Date(run.firstAt).getTime(), t1 = Math.max(new Date(run.lastAt).getTime(), Date.now()), span = Math.max(t1 - t0, 1);
  const track = el("div", { class: "track" });
  const seg = (cls, a, b) => {
    const f = el("div", { class: cls });
    f.style.left = (100 * (a - t0) / span).toFixed(2) + "%";
    f.style.width = Math.max(0.6, 100 * (b - a) / span).toFixed(2) + "%";
    track.append(f);
  };
  const ran = running(row);
  const accepted = row.acceptedAt ? new Date(row.acceptedAt).getTime() : null;
  if (row.approval && accepted !== null) {
    const waitEnd = ran ? ran[0] : (row.state === "awaiting_approval" ? Date.now() : accepted);
    if (waitEnd > accepted) seg("fill waiting", accepted, waitEnd);
  }
  if (ran) seg("fill " + row.state, ran[0], ran[1]);
  else if (!row.approval) { const at = accepted !== null ? accepted : t0; seg("fill " + row.state, at, at); }
  return track;
}
// tierText names a sandbox tier for people, as the CLI does: "none" is a
// tool that runs in the worker's own process.
function tierText(t) { return t === "none" ? "in-process" : t; }
// waited says how long a call waited for its approval, when it did.
function waited(row) {
  const ran = running(row);
  if (!row.approval || !row.acceptedAt || !ran) return "";
  const w = ran[0] - new Date(row.acceptedAt).getTime();
  return w >= 1000 ? " (waited " + ms(w) + " for approval)" : "";
}
function callRow(row, run) {
  const state = row.state === "error" && row.errorKind ? row.errorKind : row.state;
  const e = el("div", { class: "row", id: "call-" + row.callId, "data-state": row.state, "data-kind": row.errorKind || "" },
    el("div", { class: "head" },
      el("span", { class: "tool mono" }, row.tool || "?"),
      el("span", { class: "status " + row.state }, state.replaceAll("_", " ")),
      el("span", { class: "meta mono" }, row.callId),
      el("span", { class: "meta duration" }, row.durationMs || row.finishedAt ? ms(row.durationMs || 0) + waited(row) : ""),
      el("span", { class: "meta worker" }, row.worker ? row.worker + (row.tier ? " · " + tierText(row.tier) : "") : ""),
      ...(row.labels || []).map((l) => el("span", { class: "label " + l }, l)),
      row.deliveries > 1 ? el("span", { class: "label redelivered" }, "delivered " + row.deliveries + "×") : null,
      row.attempts > 1 ? el("span", { class: "label retried" }, row.attempts + " attempts") : null),
    bar(row, run));
  if (row.progress && row.state === "running") {
    const p = row.progress;
    e.append(el("div", { class: "detail progress" }, (p.total ? Math.round(100 * p.done / p.total) + "% " : p.done + " ") + (p.message || "")));
  }
  if (row.message && !row.dataflow) e.append(el("div", { class: "detail error-text" }, row.message));
  if (row.approval) {
    const a = row.approval;
    e.append(el("div", { class: "detail approval" }, "approval " + a.id + (a.why ? " — " + a.why : "") +
      (a.decision ? " · " + a.decision + " by " + (a.decidedBy || "?") + (a.reason ? " — " + a.reason : "") : " · waiting for a decision")));
  }
  if (row.dataflow) {
    const d = row.dataflow;
    e.append(el("div", { class: "detail dataflow " + d.decision }, "data-flow " + d.decision + (d.flow ? " (" + d.flow + ")" : "") + (d.reason ? ": " + d.reason : "")));
  }
  const prov = provenance(row.provenance);
  if (prov) e.append(prov);
  if (row.handle) {
    e.append(el("div", { class: "detail handle" }, "spilled result, " + row.handle.bytes + " bytes: ",
      el("a", { href: "result.html?handle=" + encodeURIComponent(row.handle.uri) + scopeQ(run), class: "result-link" }, "page through it")));
  }
  if (row.steps && row.steps.length) e.append(el("div", { class: "detail steps" }, row.steps.join(" → ")));
  return e;
}
function renderRun() {
  const run = view.run;
  document.getElementById("run-summary").textContent = run.calls + " calls · " + run.ok + " ok · " + run.errors + " errors (" + run.blocked +
    " blocked) · " + run.awaiting + " awaiting approval · " + run.running + " queued or running · from " + when(run.firstAt) + " to " + when(run.lastAt) +
    (run.ended ? " · ended " + run.ended : "");
  const from = view.offset, to = view.offset + view.calls.length;
  document.getElementById("page-info").textContent = view.total ? "calls " + (from + 1) + "–" + to + " of " + view.total : "no calls";
  document.getElementById("prev").disabled = page === 0;
  document.getElementById("next").disabled = to >= view.total;
  document.getElementById("timeline").replaceChildren(...view.calls.map((c) => callRow(c, run)));
}
async function loadRun() {
  const r = await fetch("/api/runs/" + encodeURIComponent(runId) + "?offset=" + page * PAGE + "&limit=" + PAGE + scopeQ({ scope }));
  if (!r.ok) { document.getElementById("timeline").replaceChildren(el("div", { class: "empty" }, (await r.json().catch(() => ({}))).error || "HTTP " + r.status)); return; }
  view = await r.json();
  renderRun();
}
function go(p) { location.search = "?run=" + encodeURIComponent(runId) + scopeQ({ scope }) + "&page=" + p; }

function connect(url, handlers) {
  const es = new EventSource(url);
  for (const [name, fn] of Object.entries(handlers)) es.addEventListener(name, (ev) => fn(JSON.parse(ev.data)));
  es.onopen = () => setLive(true, "live");
  es.onerror = () => { setLive(false, "reconnecting…"); sessionLost(); };
}

if (runId) {
  document.getElementById("list-view").hidden = true;
  document.getElementById("run-view").hidden = false;
  document.getElementById("run-id").textContent = runId;
  document.title = "graphorin · run " + runId;
  document.getElementById("prev").addEventListener("click", () => go(page - 1));
  document.getElementById("next").addEventListener("click", () => go(page + 1));
  connect("/api/runs/" + encodeURIComponent(runId) + "/live?" + scopeQ({ scope }).slice(1), {
    reload: () => loadRun(),
    rows: (u) => {
      if (!view) return;
      view.run = u.run; view.total = u.run.calls;
      const byId = new Map(view.calls.map((c, i) => [c.callId, i]));
      for (const c of u.calls) {
        if (byId.has(c.callId)) view.calls[byId.get(c.callId)] = c;
        else if (view.offset + view.calls.length < view.total && view.calls.length < PAGE) view.calls.push(c);
      }
      renderRun();
    },
  });
} else {
  connect("/api/runs-live", { reload: () => loadRuns(), runs: renderRuns });
}
