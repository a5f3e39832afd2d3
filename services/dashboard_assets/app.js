// The HiFi operations page: renders the snapshots /api/stream pushes every second, and streams a
// chosen query's or view's rows from /api/results. No framework, no network beyond this server.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const state = { snapshot: null, selected: null, rows: [], columns: [], results: null };

function $(id) { return document.getElementById(id); }
function el(tag, attrs = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) { if (v !== undefined && v !== null) node.setAttribute(k, v); }
  if (text !== undefined) node.textContent = text;
  return node;
}
function fmt(v, digits = 1) { return v === null || v === undefined ? "–" : Number(v).toFixed(digits); }
function clock(ms) { return new Date(ms).toLocaleTimeString(); }

// ------------------------------------------------------------------ live snapshot

function connect() {
  const source = new EventSource("/api/stream");
  source.addEventListener("snapshot", (e) => { $("conn").className = "conn up"; $("conn").textContent = "live"; render(JSON.parse(e.data)); });
  source.onerror = () => { $("conn").className = "conn down"; $("conn").textContent = "reconnecting…"; };
}

function render(s) {
  state.snapshot = s;
  $("topology-name").textContent = s.topology || "";
  const counts = { alive: 0, triaging: 0, lagging: 0, dead: 0 };
  s.nodes.forEach((n) => { counts[n.state] = (counts[n.state] || 0) + 1; });
  const triaging = counts.triaging ? `, ${counts.triaging} triaging` : "";
  $("summary").textContent = `${s.nodes.length} nodes: ${counts.alive} alive${triaging}, ${counts.lagging} lagging, ${counts.dead} dead · ${s.queries.length} queries · ${clock(s.now_ms)}`;
  renderTree(s);
  renderReceptors(s);
  renderQueries(s);
  renderViews(s);
  renderEvents(s);
  renderTiers(s);
}

function placementOf(s) {
  if (!state.selected || !state.selected.query) return {};
  const q = s.queries.find((x) => x.id === state.selected.query);
  const placed = {};
  if (q) q.tasks.forEach((t) => { (placed[t.node] = placed[t.node] || []).push(t.reused ? `${t.role} (reused)` : t.role); });
  return placed;
}

// a node's views on two lines of a box's width, the rest counted ("+2 more"; the title has them all)
function viewLines(views, width = 32) {
  if (!views.length) return ["no views"];
  const lines = [""];
  let shown = 0;
  for (const v of views) {
    const line = lines[lines.length - 1];
    if (!line || line.length + v.length + 2 <= width) lines[lines.length - 1] = line ? `${line}, ${v}` : v;
    else if (lines.length < 2) lines.push(v);
    else break;
    shown++;
  }
  if (shown < views.length) lines[lines.length - 1] += ` +${views.length - shown} more`;
  return lines.map((l) => (l.length > width + 10 ? l.slice(0, width + 9) + "…" : l));
}

function renderTree(s) {
  const svg = $("tree");
  svg.replaceChildren();
  const byId = Object.fromEntries(s.nodes.map((n) => [n.id, n]));
  const children = {};
  s.nodes.forEach((n) => { if (byId[n.parent]) (children[n.parent] = children[n.parent] || []).push(n.id); });
  const roots = s.nodes.filter((n) => !byId[n.parent]).map((n) => n.id);
  const pos = {};
  let leaf = 0, depthMax = 0;
  const place = (id, depth) => {
    depthMax = Math.max(depthMax, depth);
    const kids = (children[id] || []).sort();
    if (!kids.length) { pos[id] = { x: leaf++, depth }; return pos[id].x; }
    const xs = kids.map((k) => place(k, depth + 1));
    pos[id] = { x: (xs[0] + xs[xs.length - 1]) / 2, depth };
    return pos[id].x;
  };
  roots.sort().forEach((r) => place(r, 0));
  const W = 240, H = 92, gapX = 24, gapY = 34;
  const width = Math.max(leaf, 1) * (W + gapX), height = (depthMax + 1) * (H + gapY);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  // at its own scale, the page scrolling sideways past what fits: a box stays legible at 40 nodes
  const room = svg.parentElement.clientWidth || width;
  svg.style.width = `${Math.max(width, room)}px`;
  svg.style.height = `${Math.max(height, 200)}px`;   // the viewBox drawn at scale 1, centred when it is narrower
  const at = (id) => ({ x: pos[id].x * (W + gapX) + gapX / 2, y: pos[id].depth * (H + gapY) + 4 });
  s.nodes.forEach((n) => {
    if (!byId[n.parent] || !pos[n.id]) return;
    const a = at(n.id), b = at(n.parent);
    svg.append(el("svg:line", { class: "edge-line", x1: a.x + W / 2, y1: a.y, x2: b.x + W / 2, y2: b.y + H }));
  });
  // a re-parented node: a dashed line to the node that adopted its dead parent's parts
  s.nodes.forEach((n) => {
    if (!n.move || !n.move.startsWith("moved to") || !pos[n.id] || !pos[n.moved_to]) return;
    const a = at(n.id), b = at(n.moved_to);
    const line = el("svg:line", { class: "edge-moved", "data-moved": `${n.id}->${n.moved_to}`, x1: a.x + W / 2, y1: a.y, x2: b.x + W / 2, y2: b.y + H });
    line.append(el("svg:title", {}, `${n.id}: ${n.move}`));
    svg.append(line);
  });
  const placed = placementOf(s);
  s.nodes.forEach((n) => {
    if (!pos[n.id]) return;
    const { x, y } = at(n.id);
    const g = el("svg:g", { class: "node" + (placed[n.id] ? " placed" : ""), "data-node": n.id, "data-state": n.state, transform: `translate(${x},${y})` });
    g.append(el("svg:title", {}, n.reason ? `${n.id}: ${n.state} (${n.reason})` : `${n.id}: ${n.state}`));
    g.append(el("svg:rect", { width: W, height: H }));
    g.append(el("svg:text", { class: "title", x: 8, y: 16 }, `${n.id} · ${n.tier}`));
    g.append(el("svg:text", { class: "health", x: W - 8, y: 16, "text-anchor": "end" }, n.state));
    g.append(el("svg:text", { x: 8, y: 33 }, `in ${fmt(n.input_rate)}/s · lag ${fmt(n.lag_s)} s`));
    const batch = n.batch_mean_s === null || n.batch_mean_s === undefined ? "" : ` · batch ${fmt(n.batch_mean_s, 2)} s`;
    g.append(el("svg:text", { x: 8, y: 48 }, `out ${n.rows_out} · dead ${n.dead_lettered}${batch}`));
    const views = n.views.length ? n.views.join(", ") : "no views";
    viewLines(n.views).forEach((line, i) => {
      const viewsText = el("svg:text", { class: "views", x: 8, y: 63 + 15 * i }, line);
      viewsText.append(el("svg:title", {}, views));
      g.append(viewsText);
    });
    if (placed[n.id]) g.append(el("svg:text", { class: "task", x: 8, y: 82 }, placed[n.id].join(", ")));
    else if (n.move) g.append(el("svg:text", { class: "task moved", x: 8, y: 82 }, n.move.length > 34 ? n.move.slice(0, 33) + "…" : n.move));
    svg.append(g);
  });
}

function renderReceptors(s) {
  const body = $("receptors").tBodies[0];
  body.replaceChildren();
  for (const [edge, receptors] of Object.entries(s.receptors)) {
    receptors.forEach((r) => {
      const status = r.faulty ? "faulty" : r.silent ? "silent" : r.kind !== "rfid" ? "–" : r.reads_per_s === null ? "…" : "reading";
      const tr = el("tr", { "data-receptor": r.id });
      [edge, r.id, r.kind, r.location].forEach((v) => tr.append(el("td", {}, v)));
      tr.append(el("td", { class: "num" }, fmt(r.reads_per_s)));
      tr.append(el("td", { class: "num" }, r.cycle_ms === null ? "–" : `${fmt(r.cycle_ms, 0)} ms`));
      tr.append(el("td", { class: "num" }, r.weak_share === null ? "–" : `${fmt(100 * r.weak_share)} %`));
      tr.append(el("td", { class: `state-${status}` }, status));
      body.append(tr);
    });
  }
}

function renderQueries(s) {
  const list = $("queries");
  list.replaceChildren();
  if (!s.queries.length) list.append(el("li", { class: "empty" }, "no queries running"));
  s.queries.forEach((q) => {
    const li = el("li", { "data-query": q.id, class: state.selected && state.selected.query === q.id ? "selected" : "" });
    li.append(el("strong", {}, q.id), document.createTextNode(` root ${q.root} · ${q.status} · since ${clock(q.submitted_ms)} `));
    const cancel = el("button", { class: "cancel", "data-query": q.id }, "Cancel");
    cancel.onclick = (e) => { e.stopPropagation(); cancelQuery(q.id); };
    li.append(cancel, el("code", {}, q.text));
    if (q.error) li.append(el("div", { class: "query-error" }, `${q.status}: ${q.error}`));
    li.onclick = () => { select({ query: q.id }); showPlan(q.explain); };
    list.append(li);
  });
  // a query cancelled elsewhere: drop it once a snapshot that had it no longer does (a snapshot
  // taken before a submission landed does not have it yet)
  const sel = state.selected;
  if (sel && sel.query) {
    if (s.queries.some((q) => q.id === sel.query)) sel.seen = true;
    else if (sel.seen) select(null);
  }
}

function renderViews(s) {
  const list = $("views");
  list.replaceChildren();
  const internal = s.views.filter((v) => v.topic && v.internal).length;
  $("internal-count").textContent = internal ? `(${internal})` : "";
  s.views.filter((v) => v.topic && (!v.internal || $("show-internal").checked)).forEach((v) => {
    const key = `${v.node}.${v.name}`;
    const li = el("li", { "data-view": key, class: state.selected && state.selected.view === key ? "selected" : "" }, `${key}${v.window ? "  [" + v.window + "]" : ""}`);
    li.onclick = () => select({ view: key });
    list.append(li);
  });
}

function renderEvents(s) {
  const list = $("events");
  list.replaceChildren();
  const c = s.event_counts;
  $("event-counts").textContent = `alerts ${c.alert || 0} · faulty ${c.faulty || 0} · dead letters ${c.dead || 0}`;
  if (!s.events.length) list.append(el("li", {}, "nothing yet"));
  s.events.forEach((e) => {
    const li = el("li", { "data-kind": e.kind });
    li.append(el("span", { class: `kind kind-${e.kind}` }, e.kind), document.createTextNode(` ${clock(e.ms)} ${e.node}: ${e.text}`));
    list.append(li);
  });
}

function renderTiers(s) {
  const box = $("tier-charts");
  box.replaceChildren();
  ["edge", "aggregation", "core"].forEach((tier) => {
    const points = s.tiers[tier] || [];
    const wrap = el("div", { "data-tier": tier });
    wrap.append(el("h3", {}, `${tier}: rows/s (blue), lag s (orange)`));
    const svg = el("svg:svg");
    wrap.append(svg);
    box.append(wrap);
    lineChart(svg, [
      { cls: "series-rate", points: points.map((p) => [p.t, p.rate]) },
      { cls: "series-lag", points: points.map((p) => [p.t, p.lag_s]), own: true },
    ]);
  });
}

// A small line chart: x is time (ms); `own` series get their own y scale (right axis).
function lineChart(svg, series, labels = false) {
  const W = 460, H = 160, L = 40, R = 40, T = 8, B = 20;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.replaceChildren();
  const all = series.flatMap((s) => s.points);
  if (!all.length) { svg.append(el("svg:text", { class: "gridtext", x: L, y: H / 2 }, "no data yet")); return; }
  const x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]), x0 + 1);
  const maxOf = (pts) => Math.max(1e-9, ...pts.map((p) => p[1]));
  const shared = maxOf(series.filter((s) => !s.own).flatMap((s) => s.points));
  svg.append(el("svg:line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  svg.append(el("svg:text", { class: "gridtext", x: L, y: H - 5 }, clock(x0)));
  svg.append(el("svg:text", { class: "gridtext", x: W - R, y: H - 5, "text-anchor": "end" }, clock(x1)));
  svg.append(el("svg:text", { class: "gridtext", x: L - 4, y: T + 8, "text-anchor": "end" }, fmt(shared)));
  series.forEach((s, i) => {
    const top = s.own ? maxOf(s.points) : shared;
    if (s.own) svg.append(el("svg:text", { class: "gridtext", x: W - R + 4, y: T + 8 }, fmt(top)));
    const d = s.points.map((p) => `${L + (p[0] - x0) / (x1 - x0) * (W - L - R)},${H - B - p[1] / top * (H - T - B)}`).join(" ");
    const line = el("svg:polyline", { class: s.cls || "", points: d, fill: "none", stroke: s.color || null, "stroke-width": 1.5 });
    svg.append(line);
    if (labels && s.name) svg.append(el("svg:text", { class: "gridtext", x: L + 4 + 90 * (i % 4), y: T + 10 + 12 * Math.floor(i / 4), fill: s.color }, s.name));
  });
}

// ------------------------------------------------------------------ queries and results

async function post(path, body, method = "POST") {
  const answer = await fetch(path, { method, headers: { "Content-Type": "application/json" }, body: body ? JSON.stringify(body) : undefined });
  const data = await answer.json();
  if (!answer.ok) throw new Error(data.error || answer.statusText);
  return data;
}

function showError(message) { const box = $("query-error"); box.hidden = !message; box.textContent = message || ""; }
function showPlan(text) { const pre = $("plan"); pre.hidden = !text; pre.textContent = text || ""; }

async function submitQuery(explainOnly) {
  const sql = $("query-sql").value.trim();
  if (!sql) { showError("write a query first"); return; }
  showError("");
  try {
    const since = $("query-since").value.trim(), until = $("query-until").value.trim();
    const answer = await post(explainOnly ? "/api/explain" : "/api/queries", { sql, since, until });
    showPlan(answer.plan);
    if (!explainOnly) select({ query: answer.query_id });
  } catch (err) { showError(err.message); }
}

async function cancelQuery(id) {
  try { await post(`/api/queries/${encodeURIComponent(id)}`, null, "DELETE"); } catch (err) { showError(err.message); }
  if (state.selected && state.selected.query === id) select(null);
}

function select(source) {
  if (state.results) { state.results.close(); state.results = null; }
  state.selected = source;
  state.rows = [];
  state.columns = [];
  renderResults();
  if (!source) { $("results-title").textContent = "choose a query or a view"; return; }
  $("results-title").textContent = source.query ? `query ${source.query}` : `view ${source.view}`;
  const qs = source.query ? `query=${encodeURIComponent(source.query)}` : `view=${encodeURIComponent(source.view)}`;
  state.results = new EventSource(`/api/results?${qs}`);
  state.results.addEventListener("row", (e) => {
    const row = JSON.parse(e.data);
    state.columns = row.columns;
    state.rows.push(row);
    if (state.rows.length > 2000) state.rows.shift();
    scheduleResults();
  });
  state.results.addEventListener("failure", (e) => showError(JSON.parse(e.data).error));
  if (state.snapshot) render(state.snapshot);
}

let pending = null;
function scheduleResults() { if (!pending) pending = setTimeout(() => { pending = null; renderResults(); }, 200); }

const ISO_TIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/;
// a number to four significant digits, never fewer than its whole part (40.6139 → 40.61, 12345.6 → 12346)
function number(v) {
  if (Number.isInteger(v)) return String(v);
  const whole = Math.ceil(Math.log10(Math.abs(v) + 1));
  return String(Number(v.toPrecision(Math.min(21, Math.max(4, whole)))));
}
function cell(v) {
  if (typeof v === "number") return number(v);
  if (typeof v === "string" && ISO_TIME.test(v)) return new Date(v).toLocaleTimeString();
  return v === null ? "NULL" : String(v);
}

const PALETTE = ["#1565c0", "#ef8f00", "#2e7d32", "#c62828", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];

function renderResults() {
  const table = $("results-table");
  const head = el("tr");
  state.columns.forEach((c) => head.append(el("th", {}, c)));
  table.tHead.replaceChildren(head);
  const body = table.tBodies[0];
  body.replaceChildren();
  state.rows.slice(-100).reverse().forEach((row) => {
    const tr = el("tr", { class: "result-row" });
    row.values.forEach((v) => tr.append(el("td", { class: typeof v === "number" ? "num" : "" }, cell(v))));
    body.append(tr);
  });
  // chart: the first numeric column over the window's end (or emit time), one line per first text column value
  const cols = state.columns;
  const sample = state.rows.length ? state.rows[state.rows.length - 1].values : [];
  const timeCol = ["window_end", "window_start", "ts"].map((c) => cols.indexOf(c)).find((i) => i >= 0);
  const valueCol = cols.findIndex((c, i) => typeof sample[i] === "number" && !["window_start", "window_end"].includes(c));
  const keyCol = cols.findIndex((c, i) => typeof sample[i] === "string" && !["window_start", "window_end", "ts"].includes(c));
  const groups = {};
  if (valueCol >= 0) state.rows.forEach((row) => {
    const t = timeCol === undefined ? row.emitted_ms : Date.parse(row.values[timeCol]);
    const key = keyCol >= 0 ? row.values[keyCol] : cols[valueCol];
    (groups[key] = groups[key] || []).push([t, row.values[valueCol]]);
  });
  const series = Object.entries(groups).slice(0, PALETTE.length).map(([name, points], i) => ({ name, points: points.sort((a, b) => a[0] - b[0]), color: PALETTE[i] }));
  lineChart($("results-chart"), series, true);
}

// ------------------------------------------------------------------ login

async function login(token) {
  const answer = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ token }) });
  return answer.ok;
}

// The token may come in the link's fragment (hifi up prints one; the browser never sends a
// fragment to a server): log in with it, then drop it from the address bar and the history.
async function start() {
  const given = new URLSearchParams(location.hash.slice(1)).get("token");
  if (given) { history.replaceState(null, "", location.pathname); await login(given); }
  const me = await fetch("/api/me");
  if (!me.ok) {
    $("login").hidden = false;
    $("conn").textContent = "logged out";
    return;
  }
  const who = await me.json();
  $("who").textContent = `${who.principal} (${who.roles.join(", ")})`;
  connect();
}

$("login").onsubmit = async (e) => {
  e.preventDefault();
  if (await login($("login-token").value.trim())) { $("login").hidden = true; $("login-token").value = ""; start(); }
  else $("login-error").textContent = "unknown or expired token";
};
$("submit").onclick = () => submitQuery(false);
$("explain").onclick = () => submitQuery(true);
start();
