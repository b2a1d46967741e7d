"""The status page's HTML (kept apart from the handlers: it is text, not logic)."""

__all__ = ["PAGE"]

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>entrepot status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em} h2{font-size:1.05em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff;min-width:40em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums} th{background:#f0f0f0}
.bad{color:#b00020;font-weight:600} .ok{color:#1b5e20;font-weight:600} .muted{color:#777}
tr.bad td{background:#fdecea} code{font-size:.9em}
</style></head>
<body>
<h1>entrepot</h1>
<div id="summary" class="muted">loading&hellip;</div>
<h2>Queues</h2>
<table id="queues"><thead><tr><th>queue</th><th>messages</th><th>size</th>
<th>oldest</th><th>sent</th><th>received</th><th>range consumers</th></tr></thead>
<tbody></tbody></table>
<p class="muted">sent and received: messages per second over about the last minute (since
start until the page has watched a minute).</p>
<h2>Links</h2>
<table id="links"><thead><tr><th>id</th><th>destination</th><th>kind</th><th>state</th>
<th>backlog</th><th>unacked</th><th>retries</th><th>last error</th></tr></thead>
<tbody></tbody></table>
<p class="muted">Pause or resume one with <code>entrepot link pause ID</code>
(or <code>resume</code>); failing links are highlighted.</p>
<h2>Dead letters</h2>
<table id="dead"><thead><tr><th>queue</th><th>class</th><th>messages</th></tr></thead>
<tbody></tbody></table>
<h2>Recent errors</h2>
<table id="errors"><thead><tr><th>time</th><th>level</th><th>logger</th><th>message</th>
</tr></thead><tbody></tbody></table>
<script>
"use strict";
const FAILING = new Set(["waiting to connect", "inactive"]);
function bytes(n) {
  if (n === undefined || n === null) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : String(n)) + " " + units[i];
}
function duration(s) {
  s = Math.floor(s);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor(s % 3600 / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor(s % 86400 / 3600) + " h";
}
function ago(s) {
  if (!s || s < 0) return "";
  return s < 1 ? "< 1 s ago" : duration(s) + " ago";
}
function rate(r) {
  if (r === undefined || r === null) return "";
  return (r >= 10 || r === 0 ? r.toFixed(0) : r.toFixed(2)) + "/s";
}
function cell(row, text, numeric) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (numeric) td.className = "n";
  row.appendChild(td);
}
// columns: [key, numeric, format]; rowClass(item) names a row's class
function fill(id, rows, columns, empty, rowClass) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = columns.length; td.className = "muted"; td.textContent = empty;
    tr.appendChild(td); body.appendChild(tr); return;
  }
  for (const item of rows) {
    const tr = document.createElement("tr");
    tr.dataset.key = String(item[columns[0][0]]);
    if (rowClass) tr.className = rowClass(item);
    for (const [key, numeric, format] of columns) {
      const value = item[key];
      cell(tr, format ? format(value) : typeof value === "object" && value !== null
        ? Object.entries(value).map(([k, v]) => k + "@" + v).join(", ") : value, numeric);
    }
    body.appendChild(tr);
  }
}
async function refresh() {
  const summary = document.getElementById("summary");
  try {
    const response = await fetch("/ui/status.json", {cache: "no-store"});
    if (!response.ok) throw new Error("HTTP " + response.status);
    const s = await response.json();
    summary.className = s.ready ? "ok" : "bad";
    const dash = " \\u2014 ";
    const parts = [s.ready ? "ready" : "not ready: " + s.reason,
                   "entrepot " + s.version + ", up " + duration(s.uptime_s)];
    if (s.store) parts.push("store " + bytes(s.store.used_bytes) + " of "
                            + bytes(s.store.quota_bytes));
    if (s.disk) parts.push("disk " + bytes(s.disk.free_bytes) + " free of "
                           + bytes(s.disk.total_bytes));
    parts.push("updated " + s.time);
    summary.textContent = parts.join(dash);
    const now = Date.parse(s.time);
    const since = t => {
      const d = (now - Date.parse(t)) / 1000;
      return isNaN(d) ? t : d < 1 ? "< 1 s ago" : duration(d) + " ago";
    };
    fill("queues", s.queues, [["path"], ["messages", 1], ["bytes", 1, bytes],
         ["oldest_age_s", 1, ago], ["sent_per_s", 1, rate], ["received_per_s", 1, rate],
         ["consumers"]], "no queues");
    fill("links", s.links, [["id"], ["destination"], ["kind"], ["state"], ["backlog", 1],
         ["unacked", 1], ["retries", 1], ["last_error"]], "no outgoing links",
         link => FAILING.has(link.state) ? "bad" : "");
    fill("dead", s.dead_letters, [["queue"], ["class"], ["messages", 1]], "none");
    fill("errors", s.errors, [["time", 0, since], ["level"], ["logger"], ["message"]], "none",
         e => e.level === "error" || e.level === "critical" ? "bad" : "");
    document.body.dataset.loaded = "1";
  } catch (error) {
    summary.className = "bad";
    summary.textContent = "status unavailable: " + error.message;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
"""
