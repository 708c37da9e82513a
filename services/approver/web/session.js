"use strict";
// Who is logged in, for every page: the header names them, "Log out"
// ends the session, and requests that change something carry the
// session's CSRF token (session.then((s) => s.csrf)). A page whose
// session ended (logged out elsewhere, expired) goes to the login.
function toLogin() { location.replace("/login?next=" + encodeURIComponent(location.pathname + location.search)); }
const session = fetch("/auth/session").then(async (r) => {
  if (!r.ok) { toLogin(); throw new Error("not logged in"); }
  return r.json();
});
session.then((s) => {
  document.getElementById("whoami").textContent = s.identity;
  document.getElementById("logout").addEventListener("click", async () => {
    await fetch("/auth/logout", { method: "POST", headers: { "X-CSRF-Token": s.csrf } });
    location.replace("/login");
  });
}, () => {});
// sessionLost is what a page does when its live stream breaks: if the
// session ended, to the login; else the stream reconnects by itself.
async function sessionLost() {
  const r = await fetch("/auth/session").catch(() => null);
  if (r && r.status === 401) toLogin();
}
