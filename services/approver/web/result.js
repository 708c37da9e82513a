"use strict";
// Pages through a spilled result, 32 KiB at a time, as text.
const params = new URLSearchParams(location.search);
const handle = params.get("handle") || "";
const scope = params.get("scope") || ""; // whose run it is, as the run page said
const scopeQ = scope ? "&scope=" + encodeURIComponent(scope) : "";
const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
const back = (params.get("back") || "").split(",").filter(Boolean);
document.getElementById("handle").textContent = handle;
// producer names a trust class for people.
function producer(tc) {
  const names = {
    "first-party-user-defined": "a first-party tool (user-defined)", "first-party-built-in": "a built-in tool",
    "skill-trusted": "a trusted skill's tool", "skill-untrusted": "an untrusted skill's tool (untrusted output)",
    "mcp-derived": "an MCP server's tool (untrusted output)", "web-search": "a web tool (untrusted output)",
    "channel-inbound": "an inbound channel (untrusted output)",
  };
  return (names[tc] || "a tool of trust class " + tc) + " (" + tc + ")";
}
async function load() {
  const r = await fetch("/api/result?handle=" + encodeURIComponent(handle) + scopeQ + "&offset=" + offset);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) { document.getElementById("content").textContent = body.error || "HTTP " + r.status; return; }
  document.getElementById("content").textContent = body.content;
  document.getElementById("page-info").textContent = "bytes " + body.offset + "–" + body.nextOffset + " of " + body.totalBytes +
    (body.producerTrustClass ? " · produced by " + producer(body.producerTrustClass) : "");
  const next = document.getElementById("next"), prev = document.getElementById("prev");
  next.disabled = body.eof;
  prev.disabled = offset === 0;
  next.addEventListener("click", () => { location.search = "?handle=" + encodeURIComponent(handle) + scopeQ + "&offset=" + body.nextOffset + "&back=" + [...back, offset].join(","); });
  prev.addEventListener("click", () => { const b = back.slice(0, -1); location.search = "?handle=" + encodeURIComponent(handle) + scopeQ + "&offset=" + (back[back.length - 1] || 0) + "&back=" + b.join(","); });
}
load();
