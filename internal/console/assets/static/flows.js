// The flows page: GET /api/flows with the form's selection, the flows
// in a table sorted by a click on a heading, and the top talkers.
import { getJSON, cell, say, markNav, selection, runForm, fmtTime } from "./common.js";
import uPlot from "/vendor/uplot-1.6.30/uPlot.esm.js";
import { bars } from "./bars.js";

markNav("flows");
const form = document.getElementById("selection");
let rows = [];
let sortKey = "first", sortDesc = false;

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
  const num = sortKey === "packets" || sortKey === "bytes";
  rows.sort((a, b) => {
    const x = a[sortKey], y = b[sortKey];
    const c = num ? x - y : String(x).localeCompare(String(y));
    return sortDesc ? -c : c;
  });
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
    render();
  });
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

// chart draws the flows started and their bytes per time bucket (about
// 60 buckets over the flows' span, at least 1 ms), from the flows'
// first packets: what the selection's flow records say, not a packet
// count.
function chart(flows) {
  const el = document.getElementById("chart");
  if (plot) { plot.destroy(); plot = null; }
  el.replaceChildren();
  const ts = flows.map((f) => Date.parse(f.first)).filter((t) => !Number.isNaN(t));
  if (ts.length === 0) { el.textContent = "No flows to chart."; return; }
  const lo = Math.min(...ts), hi = Math.max(...ts);
  const step = Math.max(1, Math.ceil((hi - lo + 1) / 60));
  const n = Math.floor((hi - lo) / step) + 1;
  const x = [], count = new Array(n).fill(0), bytes = new Array(n).fill(0);
  for (let i = 0; i < n; i++) x.push((lo + i * step) / 1000);
  flows.forEach((f) => {
    const t = Date.parse(f.first);
    if (Number.isNaN(t)) return;
    const i = Math.floor((t - lo) / step);
    count[i]++;
    bytes[i] += f.src_bytes + f.dst_bytes;
  });
  plot = new uPlot({
    width: Math.max(400, el.clientWidth || 800), height: 220,
    series: [{}, { label: "flows started", stroke: "#36c" }, { label: "their bytes", stroke: "#c63", scale: "bytes" }],
    axes: [{}, { label: "flows" }, { side: 1, scale: "bytes", label: "bytes" }],
  }, [x, count, bytes], el);
}

async function load() {
  const p = selection(form);
  try {
    const d = await getJSON("/api/flows?" + p.toString());
    rows = d.flows.map(view);
    render();
    chart(d.flows);
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
    const [text, warn] = coverageText(d.coverage, d.flows.length);
    say(text, warn);
  } catch (e) {
    say("The flows could not be loaded: " + e.message, true);
  }
}

runForm(form, load);
