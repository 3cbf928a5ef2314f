// The operator's dashboard: vanilla JS, no dependency. Asks once who the key is (/identity),
// then every few seconds reads the summary (/stats, /history) and the one page of /stacks on
// screen, with the key from sessionStorage; other pages are read only when the operator turns
// to them (or deletes a whole group). Renders only the visible rows of the page, and only the
// controls the key's role may use.
"use strict";

const KEY_STORAGE = "stack-provisioner.api-key";
const REFRESH_MS = 4000;
// Stacks per table page: one page costs one /stacks call whatever the total.
const PAGE_LIMIT = 100;
// Page size when walking every page for a group delete.
const WALK_LIMIT = 1000;
const ROW_HEIGHT = 34;
const OVERSCAN = 8;

const $ = (id) => document.getElementById(id);
const state = {
  key: sessionStorage.getItem(KEY_STORAGE) || "",
  // GET /identity of the key: {role, tenant (null: every tenant), may_change, ...}.
  identity: null,
  // Bumped whenever the key changes or goes: answers for an older key are dropped.
  generation: 0,
  // The page on screen: its index, and the cursor each page seen so far starts at.
  page: 0,
  cursors: [null],
  // How many stacks came before each page when the operator turned to it.
  starts: [0],
  next: null,
  stacks: [],
  shown: [],
  selected: new Set(),
  stats: null,
  history: null,
  challengeLabel: "challenge",
  timer: null,
  loading: false,
  // A refresh was asked for while one ran (e.g. a page turn): run once more after it.
  again: false,
  job: null,
  loadedAt: 0,
  // What the last action did; shown with the next refresh's line.
  note: "",
};

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Data calls are relative to the page, so the dashboard works under an API Gateway stage too.
async function api(method, path, body) {
  const headers = { "X-API-KEY": state.key };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  let data = null;
  try { data = await response.json(); } catch (_) { data = null; }
  if (!response.ok) {
    throw new ApiError(response.status, (data && data.error) || response.statusText || "request failed");
  }
  return data;
}

// One page of GET /stacks from `cursor` (the first without).
function stackPage(cursor, limit) {
  const query = new URLSearchParams({ limit: String(limit) });
  if (cursor) query.set("cursor", cursor);
  return api("GET", "stacks?" + query.toString());
}

// Every stack `keep` accepts, walking every page: only for an operator's explicit action.
async function collectStacks(keep, onPage) {
  const found = [];
  let cursor = null;
  for (let page = 1; page <= 100000; page++) {
    const data = await stackPage(cursor, WALK_LIMIT);
    for (const s of data.stacks || []) if (keep(s)) found.push(s);
    cursor = data.next_cursor;
    if (!cursor) break;
    onPage(page, found.length);
  }
  return found;
}

function note(text) {
  state.note = text ? text + " · " : "";
  message(text);
}

function message(text, isError) {
  const m = $("message");
  m.textContent = text;
  m.classList.toggle("error", !!isError);
}

// The summary and the page on screen, all at once. A timer's refresh is skipped while one
// runs; any other (a page turn, after an action) runs as soon as it ends.
async function refresh(byTimer) {
  if (!state.key) return;
  if (state.loading) {
    if (!byTimer) state.again = true;
    return;
  }
  state.loading = true;
  state.again = false;
  const started = performance.now();
  const page = state.page;
  const generation = state.generation;
  try {
    if (!state.identity) {
      const identity = await api("GET", "identity");
      if (generation !== state.generation) return;
      state.identity = identity;
      showIdentity();
      if (!identity.may_observe) {
        cannotObserve();
        return;
      }
    }
    const [stats, history, data] = await Promise.all([
      api("GET", "stats"),
      api("GET", "history"),
      stackPage(state.cursors[page], PAGE_LIMIT),
    ]);
    // Turned to another page, or another key, meanwhile: that one is loaded next.
    if (page !== state.page || generation !== state.generation) return;
    const stacks = data.stacks || [];
    if (!stacks.length && page > 0) {
      // Every stack of this page is gone: show the one before.
      state.page = page - 1;
      state.again = true;
      return;
    }
    state.stats = stats;
    state.stacks = stacks;
    state.next = data.next_cursor || null;
    state.history = history;
    state.challengeLabel = history.challenge_label || "challenge";
    $("main").hidden = false;
    $("key-forget").hidden = false;
    render();
    state.loadedAt = Date.now();
    const ms = Math.round(performance.now() - started);
    document.body.dataset.loadMs = String(ms);
    document.body.dataset.loaded = String(state.loadedAt);
    message(`${state.note}Updated ${new Date().toLocaleTimeString()} · page ${page + 1} loaded in ${ms} ms`);
  } catch (err) {
    if (generation !== state.generation) {
      // An answer for a key no longer in use.
    } else if (err instanceof ApiError && err.status === 401) {
      forgetKey();
      message("The API key was refused (401 invalid api key). Enter the right key.", true);
    } else {
      message(`Refresh failed: ${err.message}. Showing data from ${state.loadedAt ? new Date(state.loadedAt).toLocaleTimeString() : "never"}; retrying.`, true);
    }
  } finally {
    state.loading = false;
    if (state.again) refresh();
  }
}

// Turns to page `page` (only one step forward: its cursor is the page on screen's next).
function turnTo(page) {
  if (page < 0) return;
  if (page > state.page) {
    if (!state.next) return;
    state.cursors[page] = state.next;
    state.starts[page] = state.starts[state.page] + state.stacks.length;
  }
  state.page = page;
  state.next = null;
  $("viewport").scrollTop = 0;
  $("page-info").textContent = `Page ${page + 1} · loading…`;
  $("page-prev").disabled = true;
  $("page-next").disabled = true;
  refresh();
}

function start() {
  stop();
  refresh();
  state.timer = setInterval(() => refresh(true), REFRESH_MS);
}

function stop() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

// Back to the key form: nothing of the last key stays on screen.
function forgetKey() {
  stop();
  sessionStorage.removeItem(KEY_STORAGE);
  state.key = "";
  state.identity = null;
  state.generation++;
  $("identity").hidden = true;
  $("main").hidden = true;
  $("key-forget").hidden = true;
}

// A new key may be of another tenant: its pages start over, nothing stays selected.
function useKey(key) {
  forgetKey();
  state.key = key;
  sessionStorage.setItem(KEY_STORAGE, key);
  state.page = 0;
  state.cursors = [null];
  state.starts = [0];
  state.next = null;
  state.stacks = [];
  state.selected.clear();
  start();
}

// ---- who the key is ------------------------------------------------------------------------

const may = (what) => !!(state.identity && state.identity[what]);

// True when the key is of one tenant and the API gave it no history: passes and refusals are of
// the whole deployment, so /history answers them to keys of every tenant only.
function historyHidden() {
  const h = state.history;
  return !!state.identity && state.identity.tenant !== null && !h.passes.length && !h.refusals.length;
}

// Next to the title: "viewer · tenant wargame", "operator · every tenant"; and the controls the
// role may use (the API refuses the others with 403 anyway).
function showIdentity() {
  const who = state.identity;
  const badge = $("identity");
  badge.textContent = `${who.role} · ${who.tenant === null ? "every tenant" : "tenant " + who.tenant}`;
  const can = [["may_observe", "watch"], ["may_change", "renew and delete"], ["may_batch_delete", "batch delete"]]
    .filter(([what]) => who[what]).map(([, text]) => text);
  badge.title = can.length ? `This key may ${can.join(", ")}.` : "";
  badge.hidden = false;
  document.body.dataset.role = who.role;
  for (const node of document.querySelectorAll(".batch")) node.hidden = !who.may_batch_delete;
  $("actions-head").textContent = who.may_change ? "Actions" : "";
  $("groups").title = who.may_batch_delete ? "Groups of this page; delete all covers every page" : "Groups of this page";
}

// A key without stats and history (a platform's): say so instead of empty panels.
function cannotObserve() {
  const who = state.identity;
  forgetKey();
  message(`This ${who.role} key${who.tenant === null ? "" : " of tenant " + who.tenant} cannot open the dashboard: ` +
    "stats and history are for operator and viewer keys. Enter one of those.", true);
}

// ---- rendering -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

const fmtCpu = (m) => (m >= 1000 ? (m / 1000).toFixed(m % 1000 ? 1 : 0) + " CPU" : m + "m");
function fmtBytes(b) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + units[i];
}
const pct = (a, b) => (b > 0 ? Math.min(100, Math.round((a / b) * 100)) : 0);

// A share of a total; near full is a warning, unless full is the goal (`fullIsGood`).
function bar(used, total, label, fullIsGood = false) {
  const p = pct(used, total);
  const inner = el("span");
  inner.style.width = p + "%";
  const tone = fullIsGood ? (p >= 100 ? " done" : "") : (p >= 90 ? " high" : "");
  return el("span", {}, el("span", { class: "bar" + tone }, inner), label);
}

function challengeOf(s) {
  return (s.labels && s.labels[state.challengeLabel]) || "";
}

function render() {
  renderPager();
  renderCards();
  renderNodes();
  renderImages();
  renderHistoryNotes();
  if (!historyHidden()) {
    renderChart();
    renderFailures();
  }
  renderGroups();
  applyFilter();
}

// The history panels of a key of one tenant say why they are empty, rather than look broken.
function renderHistoryNotes() {
  const hidden = historyHidden();
  // The attribute, not the property: the chart is an SVG element, which has no `hidden`.
  for (const node of document.querySelectorAll(".history-data")) node.toggleAttribute("hidden", hidden);
  for (const node of document.querySelectorAll(".history-note")) {
    node.hidden = !hidden;
    node.textContent = hidden
      ? `${node.dataset.what}: the history of the whole deployment, shown to keys of every tenant only (this key is of tenant ${state.identity.tenant}).`
      : "";
  }
}

// Whether the stacks' NetworkPolicy is in place (no other policy widens it), and whether each
// stack proves it is enforced before it runs; what widens it, when it does not hold.
function renderIsolation(iso) {
  const value = $("stat-isolation");
  value.classList.toggle("bad", !!iso && !iso.in_place);
  if (!iso) {
    value.textContent = "unknown";
    $("stat-isolation-why").textContent = "the policies could not be read";
    return;
  }
  value.textContent = iso.in_place ? "in place" : "NOT in place";
  const when = `checked ${new Date(iso.checked_at).toLocaleTimeString()}`;
  $("stat-isolation-why").textContent = iso.in_place
    ? `${when}; ${iso.checked_per_stack ? "each stack verified before it runs" : "stacks not verified (no check image)"}`
    : `${iso.problems.join("; ")} (${when})`;
}

function renderCards() {
  const s = state.stats;
  const c = s.capacity;
  $("stat-total").textContent = s.total_stacks;
  // A key of one tenant: how many stacks the tenant holds against its limit, if it has one.
  const t = s.tenant;
  $("stat-tenant").textContent = t && t.max_stacks !== null && t.max_stacks !== undefined
    ? `${t.stacks} of ${t.max_stacks} stacks (tenant limit)` : "";
  $("stat-active").textContent = s.active_stacks;
  $("stat-ports").textContent = s.used_node_ports;
  const elsewhere = c.node_ports.held_elsewhere;
  $("stat-ports-free").textContent = `${c.node_ports.free} free of ${c.node_ports.total}`
    + (elsewhere ? `, ${elsewhere} held by other Services` : "");
  $("stat-cpu").textContent = fmtCpu(s.reserved_cpu_milli);
  $("stat-cpu-of").textContent = `of ${fmtCpu(c.allocatable_cpu_milli)} (${pct(s.reserved_cpu_milli, c.allocatable_cpu_milli)}%)`;
  $("stat-mem").textContent = fmtBytes(s.reserved_memory_bytes);
  $("stat-mem-of").textContent = `of ${fmtBytes(c.allocatable_memory_bytes)} (${pct(s.reserved_memory_bytes, c.allocatable_memory_bytes)}%)`;
  if (historyHidden()) {
    $("stat-refusals").textContent = "–";
    $("stat-refusals-why").textContent = "of the whole deployment: keys of every tenant";
  } else {
    const hourAgo = Date.now() - 3600e3;
    let refusals = 0;
    for (const m of state.history.refusals) if (Date.parse(m.minute) >= hourAgo) for (const n of Object.values(m.counts)) refusals += n;
    $("stat-refusals").textContent = refusals;
    $("stat-refusals-why").textContent = "";
  }
  renderIsolation(s.isolation);

  $("by-status").replaceChildren(...Object.entries(s.status_counts || {}).sort().map(([k, n]) =>
    el("span", { class: "chip" }, el("span", { class: "status " + k }, k), el("b", {}, n), " ")));
}

function renderNodes() {
  const rows = Object.entries(state.stats.capacity.nodes).map(([name, n]) =>
    el("tr", {},
      el("td", { class: "mono" }, name + (n.ready ? "" : " (not ready)")),
      el("td", {}, n.stacks),
      el("td", {}, bar(n.reserved_cpu_milli, n.allocatable_cpu_milli, `${fmtCpu(n.reserved_cpu_milli)} / ${fmtCpu(n.allocatable_cpu_milli)}`)),
      el("td", {}, bar(n.reserved_memory_bytes, n.allocatable_memory_bytes, `${fmtBytes(n.reserved_memory_bytes)} / ${fmtBytes(n.allocatable_memory_bytes)}`))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "4" }, "No stack node (nodes labelled with STACK_NODE_ROLE).")));
  $("nodes").tBodies[0].replaceChildren(...rows);
}

// The start gun's go/no-go: each image the pre-pull keeps, on how many stack nodes, which
// still pull it and which cannot (a missing tag is shown, not retried).
function renderImages() {
  const r = state.stats.images;
  const value = $("stat-images");
  value.classList.toggle("bad", !!r && !r.go);
  if (!r) {
    value.textContent = "unknown";
    $("stat-images-why").textContent = "the pre-pull could not be read";
    $("images-summary").textContent = "The pre-pull could not be read.";
    $("images").tBodies[0].replaceChildren();
    return;
  }
  value.textContent = r.images.length ? (r.go ? "go" : "no-go") : "none declared";
  $("stat-images-why").textContent = r.summary;
  $("images-summary").textContent = r.summary;
  const rows = r.images.map(i => el("tr", {},
    el("td", { class: "mono" }, i.image),
    el("td", {}, bar(i.ready, r.nodes, `${i.ready} / ${r.nodes}`, true)),
    el("td", { class: "mono" }, i.pulling.join(", ")),
    el("td", { class: i.failed ? "status failed" : "" },
      i.failed ? `${i.failed.reason}: ${i.failed.message}` : (i.retrying || ""))));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "4" }, "No image declared (PUT /prepull, STACK_PREPULL_IMAGES) and none in use.")));
  $("images").tBodies[0].replaceChildren(...rows);
}

const SVG = "http://www.w3.org/2000/svg";
function polyline(cls, points) {
  const p = document.createElementNS(SVG, "polyline");
  p.setAttribute("class", "line " + cls);
  p.setAttribute("points", points.join(" "));
  return p;
}

function renderChart() {
  const now = Date.now();
  const from = now - 24 * 3600e3;
  const passes = state.history.passes;
  const refusals = state.history.refusals;
  const x = (t) => (((t - from) / (now - from)) * 800).toFixed(1);
  const maxActive = Math.max(1, ...passes.map((p) => p.active_stacks));
  const perMinute = refusals.map((m) => Object.values(m.counts).reduce((a, b) => a + b, 0));
  const maxRate = Math.max(1, ...passes.map((p) => p.created_last_minute), ...perMinute);
  const y = (v, max) => (195 - (v / max) * 185).toFixed(1);
  const svg = $("chart");
  svg.replaceChildren(
    polyline("active", passes.map((p) => `${x(Date.parse(p.at))},${y(p.active_stacks, maxActive)}`)),
    polyline("creates", passes.map((p) => `${x(Date.parse(p.at))},${y(p.created_last_minute, maxRate)}`)),
    polyline("refusals", refusals.map((m, i) => `${x(Date.parse(m.minute))},${y(perMinute[i], maxRate)}`)));
  $("chart-axis").replaceChildren(
    el("span", {}, "24 h ago"),
    el("span", {}, `active max ${maxActive} · per-minute max ${maxRate} · ${passes.length} passes`),
    el("span", {}, "now"));
}

function renderFailures() {
  const hourAgo = Date.now() - 3600e3;
  const total = {};
  const hour = {};
  for (const m of state.history.refusals) {
    for (const [reason, n] of Object.entries(m.counts)) {
      total[reason] = (total[reason] || 0) + n;
      if (Date.parse(m.minute) >= hourAgo) hour[reason] = (hour[reason] || 0) + n;
    }
  }
  const rows = Object.keys(total).sort().map((r) => el("tr", {}, el("td", {}, r), el("td", {}, hour[r] || 0), el("td", {}, total[r])));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "3" }, "No refused create in 24 h.")));
  $("refusals").tBodies[0].replaceChildren(...rows);

  const passes = state.history.passes.slice(-15).reverse().map((p) => {
    const repaired = Object.entries(p.removals || {}).filter(([r]) => r !== "expired").map(([r, n]) => `${r} ${n}`).join(", ");
    return el("tr", {},
      el("td", {}, new Date(p.at).toLocaleTimeString()),
      el("td", {}, p.expired),
      el("td", {}, p.drift + (repaired ? ` (${repaired})` : "")),
      el("td", {}, p.orphans),
      el("td", { class: p.failures ? "status failed" : "" }, p.failures),
      el("td", {}, p.duration_ms));
  });
  if (!passes.length) passes.push(el("tr", {}, el("td", { colspan: "6" }, "No reconcile pass recorded yet.")));
  $("passes").tBodies[0].replaceChildren(...passes);
}

function groupKey(s, by = $("group-by").value) {
  if (by === "node") return s.node_id || "(unscheduled)";
  if (by === "status") return s.status;
  return challengeOf(s) || "(no " + state.challengeLabel + " label)";
}

function renderPager() {
  const first = state.starts[state.page] || 0;
  const total = state.stats ? state.stats.total_stacks : 0;
  $("page-info").textContent = state.stacks.length
    ? `Page ${state.page + 1} · stacks ${first + 1}–${first + state.stacks.length} of ${total}`
    : `Page ${state.page + 1} · no stack`;
  $("page-prev").disabled = state.page === 0;
  $("page-next").disabled = !state.next;
}

// Groups of the page on screen; "delete all" deletes the group's stacks on every page.
function renderGroups() {
  const groups = new Map();
  for (const s of state.stacks) {
    const k = groupKey(s);
    groups.set(k, (groups.get(k) || 0) + 1);
  }
  const chips = [...groups.entries()].sort((a, b) => b[1] - a[1]).map(([k, n]) =>
    el("span", { class: "chip", dataset: { group: k } },
      el("span", { class: "mono" }, k), el("b", {}, n),
      may("may_batch_delete")
        ? el("button", { type: "button", class: "group-delete", title: `Delete every stack of ${k}, on every page`, onclick: () => deleteGroup($("group-by").value, k) }, "delete all")
        : ""));
  $("groups").replaceChildren(...chips);
}

// Reads every page for the group's stacks (the only action that does), then deletes them.
async function deleteGroup(by, key) {
  const what = `every stack of ${by} “${key}”`;
  message(`Looking for ${what} on every page…`);
  let ids;
  try {
    const found = await collectStacks((s) => groupKey(s, by) === key,
      (page, n) => message(`Looking for ${what}: ${n} found in ${page} pages…`));
    ids = found.map((s) => s.stack_id);
  } catch (err) {
    message(`Looking for ${what} failed: ${err.message}`, true);
    return;
  }
  if (!ids.length) {
    message(`No stack left of ${by} “${key}”.`);
    return;
  }
  batchDelete(ids, what);
}

function applyFilter() {
  const q = $("filter").value.trim().toLowerCase();
  state.shown = q
    ? state.stacks.filter((s) => s.stack_id.includes(q) || s.node_id.toLowerCase().includes(q) || s.status.includes(q) || challengeOf(s).toLowerCase().includes(q))
    : state.stacks;
  $("spacer").style.height = state.shown.length * ROW_HEIGHT + "px";
  $("shown").replaceChildren(el("span", {}, `${state.shown.length} of the ${state.stacks.length} stacks of this page shown`));
  updateSelection();
  renderRows();
}

// Only the rows in view (plus a few) exist in the DOM, whatever the number of stacks.
function renderRows() {
  const vp = $("viewport");
  const first = Math.max(0, Math.floor(vp.scrollTop / ROW_HEIGHT) - OVERSCAN);
  const last = Math.min(state.shown.length, Math.ceil((vp.scrollTop + vp.clientHeight) / ROW_HEIGHT) + OVERSCAN);
  const rows = [];
  for (let i = first; i < last; i++) rows.push(row(state.shown[i]));
  const container = $("rows");
  container.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
  container.replaceChildren(...rows);
}

// The selection (for batch deletes) and the renew/delete buttons only for roles that may use them.
function row(s) {
  let box = "";
  if (may("may_batch_delete")) {
    box = el("input", { type: "checkbox", "aria-label": "Select " + s.stack_id });
    box.checked = state.selected.has(s.stack_id);
    box.addEventListener("change", () => {
      if (box.checked) state.selected.add(s.stack_id); else state.selected.delete(s.stack_id);
      updateSelection();
    });
  }
  const actions = may("may_change")
    ? [el("button", { type: "button", class: "small renew", dataset: { stackId: s.stack_id }, onclick: () => renew(s.stack_id) }, "renew"), " ",
      el("button", { type: "button", class: "small danger delete", dataset: { stackId: s.stack_id }, onclick: () => deleteOne(s.stack_id) }, "delete")]
    : [];
  const ports = (s.ports || []).map((p) => `${p.container_port}/${p.protocol}→${p.node_port}`).join(" ");
  return el("div", { class: "row", dataset: { stackId: s.stack_id } },
    el("span", {}, box),
    el("span", { class: "mono", title: s.stack_id }, s.stack_id),
    el("span", { class: "status " + s.status, title: s.reason ? `${s.reason}: ${s.message || ""}` : "" }, s.reason ? `${s.status} (${s.reason})` : s.status),
    el("span", { class: "mono", title: s.node_public_ip || "" }, s.node_id || "–"),
    el("span", { class: "wide" }, challengeOf(s) || "–"),
    el("span", { class: "wide mono" }, ports),
    el("span", { title: s.ttl_expires_at }, new Date(s.ttl_expires_at).toLocaleString()),
    el("span", {}, ...actions));
}

function updateSelection() {
  const n = state.selected.size;
  const button = $("delete-selected");
  button.textContent = `Delete selected (${n})`;
  button.disabled = n === 0;
  $("select-all").checked = state.shown.length > 0 && state.shown.every((s) => state.selected.has(s.stack_id));
}

// ---- actions ---------------------------------------------------------------------------------

function confirmAction(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
  });
}

async function deleteOne(id) {
  if (!(await confirmAction(`Delete stack ${id}? Its pod and service are removed at once.`))) return;
  try {
    await api("DELETE", "stacks/" + encodeURIComponent(id));
    note(`Deleted ${id}.`);
  } catch (err) {
    if (err.status === 404) note(`${id} was already gone.`);
    else message(`Deleting ${id} failed: ${err.message}`, true);
  }
  state.selected.delete(id);
  refresh();
}

async function renew(id) {
  if (!(await confirmAction(`Renew stack ${id}? Its TTL is extended (up to its maximum lifetime).`))) return;
  try {
    const s = await api("POST", "stacks/" + encodeURIComponent(id) + "/renew");
    note(`Renewed ${id} until ${new Date(s.ttl_expires_at).toLocaleString()}.`);
  } catch (err) {
    message(`Renewing ${id} failed: ${err.message}`, true);
  }
  refresh();
}

async function batchDelete(ids, what) {
  if (!ids.length) return;
  if (!(await confirmAction(`Delete ${ids.length} stacks (${what})? This cannot be undone.`))) return;
  try {
    const { job_id: jobId } = await api("POST", "stacks/batch-delete", { stack_ids: ids });
    for (const id of ids) state.selected.delete(id);
    updateSelection();
    followJob(jobId);
  } catch (err) {
    message(`Batch delete failed: ${err.message}`, true);
  }
}

async function followJob(jobId) {
  $("job").hidden = false;
  for (;;) {
    let job;
    try {
      job = await api("GET", "stacks/batch-delete/" + encodeURIComponent(jobId));
    } catch (err) {
      $("job-text").textContent = `Job ${jobId}: ${err.message}`;
      return;
    }
    const done = job.deleted + job.not_found + job.failed;
    $("job-progress").max = Math.max(1, job.total);
    $("job-progress").value = done;
    $("job-text").textContent = `Job ${jobId} ${job.status}: ${done}/${job.total} (deleted ${job.deleted}, already gone ${job.not_found}, failed ${job.failed})`;
    if (job.status === "completed" || job.status === "failed") {
      note(`Batch delete ${job.status}: ${job.deleted} deleted, ${job.not_found} already gone, ${job.failed} failed`);
      refresh();
      return;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- wiring ----------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("key-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("key").value.trim();
    if (!key) return;
    $("key").value = "";
    message("Loading…");
    useKey(key);
  });
  $("key-forget").addEventListener("click", () => {
    forgetKey();
    message("Key forgotten. Enter the API key to load the data.");
  });
  $("viewport").addEventListener("scroll", () => requestAnimationFrame(renderRows), { passive: true });
  window.addEventListener("resize", () => requestAnimationFrame(renderRows));
  $("filter").addEventListener("input", applyFilter);
  $("group-by").addEventListener("change", renderGroups);
  $("select-all").addEventListener("change", (e) => {
    for (const s of state.shown) if (e.target.checked) state.selected.add(s.stack_id); else state.selected.delete(s.stack_id);
    updateSelection();
    renderRows();
  });
  $("delete-selected").addEventListener("click", () => batchDelete([...state.selected], "the selection"));
  $("page-prev").addEventListener("click", () => turnTo(state.page - 1));
  $("page-next").addEventListener("click", () => turnTo(state.page + 1));
  if (state.key) start();
});
