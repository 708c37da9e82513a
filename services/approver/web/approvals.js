"use strict";
const approvals = new Map();

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
}

function when(t) { return t ? new Date(t).toLocaleString() : ""; }

// Where each argument's text was seen before (the run's taint ledger): the
// value with the bytes that match an untrusted output in <mark>, and the
// call that produced that output.
function highlighted(value, spans) {
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
  if (!list.some((a) => a.seen)) return el("div", { class: "provenance none" }, "No argument was seen in an earlier untrusted output of the run.");
  const box = el("div", { class: "provenance" }, el("div", { class: "title" }, "Where the arguments came from"));
  for (const a of list) {
    if (!a.seen) { box.append(el("div", { class: "arg clean" }, el("span", { class: "path mono" }, a.path), " not seen in any untrusted output of the run")); continue; }
    for (const s of a.sources) {
      box.append(el("div", { class: "arg seen" }, el("span", { class: "path mono" }, a.path), " ", highlighted(a.value, s.spans || []),
        el("span", { class: "source" }, " seen in the output of ", el("b", { class: "mono" }, s.tool || "an earlier call"),
          s.callId ? " (call " + s.callId + ", " + s.sourceKind + ")" : " (" + s.sourceKind + ")")));
    }
  }
  return box;
}

function card(a) {
  const args = JSON.stringify(a.args, null, 2);
  const c = el("div", { class: "card", id: "approval-" + a.id, "data-status": a.status },
    el("div", { class: "top" },
      el("span", { class: "tool" }, a.tool),
      el("span", { class: "status " + a.status }, a.status),
      el("span", { class: "meta" }, "requested " + when(a.requestedAt) + " · run " + a.runId + " · call " + a.callId +
        (a.expiresAt ? " · expires " + when(a.expiresAt) : ""))),
    el("pre", { class: "args" }, args));
  if (a.provenance && a.provenance.length) c.append(provenance(a.provenance));
  if (a.status === "pending") {
    const reason = el("input", { placeholder: "reason (optional)", class: "reason" });
    const err = el("div", { class: "error" });
    const decide = (grant) => async (ev) => {
      for (const b of c.querySelectorAll("button")) b.disabled = true;
      err.textContent = "";
      // Who decides is who logged in: the server records the session's
      // identity, and the CSRF token shows this page sent it.
      const { csrf } = await session;
      const r = await fetch("/api/approvals/" + encodeURIComponent(a.id) + "/decide", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ grant, argsHash: a.argsHash, reason: reason.value }),
      });
      if (!r.ok) {
        err.textContent = (await r.json().catch(() => ({}))).error || ("HTTP " + r.status);
        for (const b of c.querySelectorAll("button")) b.disabled = false;
      }
    };
    c.append(el("div", { class: "actions" }, reason,
      el("button", { class: "grant", onclick: decide(true) }, "Grant"),
      el("button", { class: "deny", onclick: decide(false) }, "Deny")), err);
  } else {
    c.append(el("div", { class: "meta" }, a.status + " by " + (a.decidedBy || "?") + " at " + when(a.decidedAt) +
      (a.reason ? " — " + a.reason : "")));
  }
  return c;
}

function render() {
  const list = [...approvals.values()];
  const pending = list.filter((a) => a.status === "pending").sort((x, y) => y.requestedAt.localeCompare(x.requestedAt));
  const decided = list.filter((a) => a.status !== "pending").sort((x, y) => (y.decidedAt || "").localeCompare(x.decidedAt || ""));
  for (const [id, items, empty] of [["pending", pending, "Nothing is waiting."], ["decided", decided.slice(0, 50), "Nothing decided yet."]]) {
    const box = document.getElementById(id);
    // Keep what is being typed: re-use a pending card that did not change.
    const keep = new Map([...box.querySelectorAll(".card")].map((c) => [c.id, c]));
    box.replaceChildren(...(items.length ? items.map((a) => {
      const old = keep.get("approval-" + a.id);
      return old && old.dataset.status === a.status ? old : card(a);
    }) : [el("div", { class: "empty" }, empty)]));
  }
}

function connect() {
  const live = document.getElementById("live");
  const es = new EventSource("/api/events");
  es.addEventListener("snapshot", (ev) => {
    approvals.clear();
    for (const a of JSON.parse(ev.data).approvals) approvals.set(a.id, a);
    live.textContent = "live"; live.classList.add("on");
    render();
  });
  es.addEventListener("approval", (ev) => {
    const a = JSON.parse(ev.data);
    approvals.set(a.id, a);
    render();
  });
  es.onerror = () => { live.textContent = "reconnecting…"; live.classList.remove("on"); sessionLost(); };
}
connect();
