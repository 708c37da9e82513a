"use strict";
// The login page. A login link carries its token in the fragment
// (#token=…), which the browser never sends to any server nor in a
// Referer: the page posts it, then removes it from the address bar and
// the history. Everything is built with DOM calls and textContent.
const next = new URLSearchParams(location.search).get("next") || "/";
const statusBox = document.getElementById("status");
const errBox = document.getElementById("error");

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
}

function goOn(to) { location.replace(to || next); }

async function postToken(method, token) {
  errBox.textContent = "";
  const r = await fetch("/auth/" + encodeURIComponent(method), {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token, next }),
  });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) { errBox.textContent = body.error || ("HTTP " + r.status); return false; }
  statusBox.textContent = "Logged in as " + body.identity + ".";
  goOn(body.next);
  return true;
}

async function showMethods() {
  const r = await fetch("/auth/methods");
  const { methods } = await r.json();
  const box = document.getElementById("methods");
  statusBox.textContent = methods.length ? "Log in to go on." : "No way to log in is configured here.";
  for (const m of methods) {
    if (m.prompt) {
      const input = el("input", { type: "password", id: "token-" + m.name, name: "token", autocomplete: "off", class: "token" });
      // Posted by script, as JSON; method and action only keep the token
      // out of the address bar should the form ever be sent without it.
      const form = el("form", { class: "method", id: "method-" + m.name, method: "post", action: "/auth/" + encodeURIComponent(m.name) },
        el("label", { for: "token-" + m.name }, m.prompt), input, el("button", { type: "submit", id: "submit-" + m.name }, m.label || "Log in"));
      form.addEventListener("submit", (ev) => { ev.preventDefault(); postToken(m.name, input.value); });
      box.append(form);
    } else {
      box.append(el("div", { class: "method" }, el("a", { class: "button", id: "method-" + m.name, href: "/auth/" + encodeURIComponent(m.name) + "?next=" + encodeURIComponent(next) }, m.label || m.name)));
    }
  }
}

async function start() {
  const hash = new URLSearchParams(location.hash.slice(1));
  const token = hash.get("token");
  if (token) {
    history.replaceState(null, "", location.pathname + location.search);
    statusBox.textContent = "Logging in…";
    if (await postToken(hash.get("method") || "token", token)) return;
  } else {
    const r = await fetch("/auth/session");
    if (r.ok) { statusBox.textContent = "Logged in."; goOn(); return; }
  }
  await showMethods();
}
start().catch((e) => { errBox.textContent = String(e); });
