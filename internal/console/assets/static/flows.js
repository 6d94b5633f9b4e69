// The flows page: GET /api/flows with the form's selection: a page of
// the flows, sorted by the server by a click on a heading, with links
// to the pages before and after; the chart of their starts and the
// top talkers, computed by the server.
import { getJSON, cell, say, markNav, selection, runForm, fmtTime } from "./common.js";
import uPlot from "/vendor/uplot-1.6.30/uPlot.esm.js";
import { bars } from "./bars.js";

markNav("flows");
const form = document.getElementById("selection");
let rows = [];
let sortKey = "first", sortDesc = false, offset = 0, limit = 100, total = 0;

function view(f) {
  return {
    first: f.first, last: f.last, iface: f.server ? `${f.iface} on ${f.server}` : f.iface, proto: f.proto,
    src: f.src_ip ? `${f.src_ip}:${f.src_port}` : f.src_mac || "",
    dst: f.dst_ip ? `${f.dst_ip}:${f.dst_port}` : f.dst_mac || "",
    packets: f.src_packets + f.dst_packets, bytes: f.src_bytes + f.dst_bytes,
    tcp_flags: f.tcp_flags, community_id: f.community_id,
  };
}

function render() {
  const tbody = document.querySelector("#flows tbody");
  tbody.replaceChildren();
  for (const r of rows) {
    const tr = document.createElement("tr");
    tr.className = "flow";
    for (const k of ["first", "last", "iface", "proto", "src", "dst", "packets", "bytes", "tcp_flags"]) cell(tr, r[k], k === "packets" || k === "bytes");
    const td = cell(tr, "");
    if (r.community_id) {
      const a = document.createElement("a");
      a.href = "/flow?community_id=" + encodeURIComponent(r.community_id); // its detail: where seen, what lost
      a.textContent = r.community_id;
      td.replaceChildren(a);
    }
    tbody.appendChild(tr);
  }
}

for (const th of document.querySelectorAll("#flows th[data-key]")) {
  th.addEventListener("click", () => {
    sortDesc = sortKey === th.dataset.key ? !sortDesc : !!th.dataset.num;
    sortKey = th.dataset.key;
    offset = 0;
    load();
  });
}

// pager shows which rows of the total the table holds, with buttons
// to the pages before and after.
function pager() {
  const el = document.getElementById("pager");
  el.replaceChildren();
  const text = document.createElement("span");
  text.textContent = total ? `Flows ${offset + 1}–${offset + rows.length} of ${total}, by ${sortKey} ${sortDesc ? "descending" : "ascending"}. ` : "No flows. ";
  el.appendChild(text);
  for (const [label, to, ok] of [["Previous", Math.max(0, offset - limit), offset > 0], ["Next", offset + limit, offset + limit < total]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.disabled = !ok;
    b.id = "page-" + label.toLowerCase();
    b.addEventListener("click", () => { offset = to; load(); });
    el.appendChild(b);
  }
}

function coverageText(c, n) {
  let t = `${n} flows of ${c.agents} agents, from ${c.files} data files`;
  t += c.oldest ? `; the root keeps ${fmtTime(c.oldest)} – ${fmtTime(c.newest)}.` : "; the root keeps no packets of them.";
  const miss = [];
  if (c.missing) miss.push(`${c.missing} closed files without flow records`);
  if (c.writing) miss.push(`${c.writing} files being written (their flows only as they end)`);
  if (c.times_unknown) miss.push(`${c.times_unknown} files of unknown times`);
  if (c.damaged.length) miss.push(`${c.damaged.length} damaged flow files: ${c.damaged.join("; ")}`);
  return [t + (miss.length ? " Missing: " + miss.join(", ") + "." : " Nothing missing."), miss.length > 0];
}

let plot = null;

// chart draws the flows started and their bytes per time bucket, as
// the server counted them (about 60 buckets over the flows' span, at
// least 1 ms) from the flows' first packets: what the selection's flow
// records say, not a packet count.
function chart(c) {
  const el = document.getElementById("chart");
  if (plot) { plot.destroy(); plot = null; }
  el.replaceChildren();
  if (!c || c.t.length === 0) { el.textContent = "No flows to chart."; return; }
  plot = new uPlot({
    width: Math.max(400, el.clientWidth || 800), height: 220,
    series: [{}, { label: "flows started", stroke: "#36c" }, { label: "their bytes", stroke: "#c63", scale: "bytes" }],
    axes: [{}, { label: "flows" }, { side: 1, scale: "bytes", label: "bytes" }],
  }, [c.t, c.flows, c.bytes], el);
}

// chartOf counts the chart's buckets in the browser, as the server
// does (chartOf in flowpage.go), for a source that sends every flow
// and no chart.
function chartOf(flows) {
  const ts = flows.map((f) => Date.parse(f.first)).filter((t) => !Number.isNaN(t));
  const c = { t: [], flows: [], bytes: [] };
  if (ts.length === 0) return c;
  const lo = Math.min(...ts), hi = Math.max(...ts);
  const step = Math.max(1, Math.ceil((hi - lo + 1) / 60));
  const n = Math.floor((hi - lo) / step) + 1;
  for (let i = 0; i < n; i++) { c.t.push((lo + i * step) / 1000); c.flows.push(0); c.bytes.push(0); }
  flows.forEach((f) => {
    const t = Date.parse(f.first);
    if (Number.isNaN(t)) return;
    const i = Math.floor((t - lo) / step);
    c.flows[i]++;
    c.bytes[i] += f.src_bytes + f.dst_bytes;
  });
  return c;
}

async function load() {
  const p = selection(form);
  p.set("sort", sortKey);
  p.set("order", sortDesc ? "desc" : "asc");
  p.set("offset", String(offset));
  p.set("limit", String(limit));
  try {
    const d = await getJSON("/api/flows?" + p.toString());
    rows = d.flows.map(view);
    total = d.total ?? d.flows.length; // a source that does not page sends every flow
    render();
    pager();
    chart(d.chart || chartOf(d.flows));
    for (const [id, list] of [["talkers", d.top_talkers], ["conversations", d.top_conversations], ["services", d.top_services]]) {
      const tb = document.querySelector(`#${id} tbody`);
      tb.replaceChildren();
      for (const t of list || []) {
        const tr = document.createElement("tr");
        cell(tr, t.key); cell(tr, t.flows, true); cell(tr, t.packets, true); cell(tr, t.bytes, true);
        tb.appendChild(tr);
      }
      bars(document.getElementById(id + "-chart"), list, (t) => t.bytes, "bytes");
    }
    const [text, warn] = coverageText(d.coverage, d.total);
    say(text, warn);
  } catch (e) {
    say("The flows could not be loaded: " + e.message, true);
  }
}

runForm(form, () => { offset = 0; return load(); });
