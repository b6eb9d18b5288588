"""The one script of the host's page (`/ui`), and the Content-Security-Policy that lets only it run.

Why a script at all: the page used to reload itself every few seconds (a navigation: the scroll, an open preview
and the browser's history churned). Now it updates in place and previews a stream's records:

- every few seconds it fetches the page again with the token it was opened with (from its own address, sent as
  `Authorization: Bearer`, never written into the page) and swaps the parts that changed (`[data-live]`): the
  charts are drawn once, on the server (ui.py), not a second time in JavaScript;
- a stream's "Preview" form posts to the host's own `POST /streams/{name}/check` (its caps and deadline apply)
  and shows the records' offsets and the statements the transformation makes of them, as text nodes (no HTML
  from an answer is ever parsed).

The policy allows this script by its hash and nothing else: no other script, no eval, no connection but to the
host itself, no frame around the page, no referrer (the address holds the token).
"""
from __future__ import annotations

import base64
import hashlib

SCRIPT = """
"use strict";
(() => {
  const token = new URLSearchParams(location.search).get("token");
  const auth = token ? {"Authorization": "Bearer " + token} : {};
  const body = document.body;
  const every = Number(body.dataset.refreshS) * 1000;
  const note = document.getElementById("live-note");
  async function refresh() {
    try {
      const answer = await fetch(location.pathname, {headers: auth, cache: "no-store"});
      if (!answer.ok) throw new Error("the host answered " + answer.status);
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      const now = new Map([...fresh.querySelectorAll("[data-live]")].map(e => [e.dataset.live, e]));
      const shown = [...document.querySelectorAll("[data-live]")];
      const same = shown.length === now.size && shown.every(e => now.has(e.dataset.live));
      if (!same) {   // a stream created or dropped: every part again (an open preview is closed)
        document.getElementById("page").replaceWith(document.adoptNode(fresh.getElementById("page")));
      } else {
        for (const e of shown) e.replaceWith(document.adoptNode(now.get(e.dataset.live)));
      }
      body.dataset.updates = String(Number(body.dataset.updates) + 1);
      note.textContent = "updated in place every " + every / 1000 + " s";
    } catch (error) {
      note.textContent = "not updated: " + error.message + " (the figures shown are older)";
    }
  }
  setInterval(refresh, every);

  function cell(row, text) { row.insertCell().textContent = text; }
  async function preview(form) {
    const out = form.parentElement.querySelector(".preview-out");
    const text = form.elements.offset.value.trim() || "committed";
    let offset = text;
    if (text.startsWith("{")) { try { offset = JSON.parse(text); } catch (e) { offset = text; } }
    const request = {offset: offset, limit: Number(form.elements.limit.value) || 10};
    out.textContent = "asking the host...";
    const answer = await fetch("/streams/" + encodeURIComponent(form.dataset.stream) + "/check", {
      method: "POST", headers: Object.assign({"Content-Type": "application/json"}, auth),
      body: JSON.stringify(request), cache: "no-store"});
    const rows = await answer.json();
    out.textContent = "";
    if (!answer.ok) { out.textContent = rows.error || ("the host answered " + answer.status); return; }
    if (!rows.length) { out.textContent = "no records there: nothing to preview"; return; }
    const table = document.createElement("table");
    table.className = "preview";
    const head = table.createTHead().insertRow();
    for (const name of ["topic", "partition", "offset", "statement", "parameters", "error"]) {
      const th = document.createElement("th"); th.textContent = name; head.appendChild(th);
    }
    const tbody = table.createTBody();
    for (const r of rows) {
      const row = tbody.insertRow();
      row.dataset.offset = r.partition + ":" + r.offset;
      cell(row, r.topic); cell(row, String(r.partition)); cell(row, String(r.offset));
      cell(row, r.query); cell(row, JSON.stringify(r.parameters)); cell(row, r.error || "");
    }
    out.appendChild(table);
  }
  document.addEventListener("submit", event => {
    if (!event.target.matches("form.preview-form")) return;
    event.preventDefault();
    preview(event.target).catch(error => {
      event.target.parentElement.querySelector(".preview-out").textContent = "preview failed: " + error.message;
    });
  });
})();
"""

_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()

# style-src 'unsafe-inline': the verdict badges' colours are style attributes (a style runs no script; every
# text in the page is escaped). Nothing else is fetched: no images, fonts or frames.
POLICY = ("default-src 'none'; "
          f"script-src 'sha256-{_HASH}'; "
          "style-src 'unsafe-inline'; "
          "connect-src 'self'; "
          "form-action 'self'; "
          "base-uri 'none'; "
          "frame-ancestors 'none'")

HEADERS = {"Content-Security-Policy": POLICY, "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
           "Cache-Control": "no-store"}
