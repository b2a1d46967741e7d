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
</style></head>
<body>
<h1>entrepot</h1>
<div id="summary" class="muted">loading&hellip;</div>
<h2>Queues</h2>
<table id="queues"><thead><tr><th>queue</th><th>messages</th><th>bytes</th>
<th>oldest (s)</th><th>range consumers</th></tr></thead><tbody></tbody></table>
<h2>Links</h2>
<table id="links"><thead><tr><th>destination</th><th>kind</th><th>state</th><th>backlog</th>
<th>unacked</th><th>retries</th><th>last error</th></tr></thead><tbody></tbody></table>
<h2>Dead letters</h2>
<table id="dead"><thead><tr><th>queue</th><th>class</th><th>messages</th></tr></thead>
<tbody></tbody></table>
<h2>Recent errors</h2>
<table id="errors"><thead><tr><th>time</th><th>level</th><th>logger</th><th>message</th>
</tr></thead><tbody></tbody></table>
<script>
"use strict";
function cell(row, text, numeric) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  if (numeric) td.className = "n";
  row.appendChild(td);
}
function fill(id, rows, columns, empty) {
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
    for (const [key, numeric] of columns) {
      const value = item[key];
      cell(tr, typeof value === "object" && value !== null
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
    const store = s.store ? " \\u2014 store " + s.store.used_bytes + " of "
      + s.store.quota_bytes + " bytes" : "";
    summary.textContent = (s.ready ? "ready" : "not ready: " + s.reason) + store
      + " \\u2014 updated " + s.time;
    fill("queues", s.queues, [["path"], ["messages", 1], ["bytes", 1], ["oldest_age_s", 1],
         ["consumers"]], "no queues");
    fill("links", s.links, [["destination"], ["kind"], ["state"], ["backlog", 1], ["unacked", 1],
         ["retries", 1], ["last_error"]], "no outgoing links");
    fill("dead", s.dead_letters, [["queue"], ["class"], ["messages", 1]], "none");
    fill("errors", s.errors, [["time"], ["level"], ["logger"], ["message"]], "none");
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
