// The timeline page: GET /api/timeline (packets, bytes and drops per
// interval per agent, from the indexes, not the packets) as one uPlot
// chart; a brushed range zooms and links to its flows and packets.
import { getJSON, say, markNav, selection, runForm, fmtTime } from "./common.js";
import uPlot from "/vendor/uplot-1.6.30/uPlot.esm.js";
import { fetchMarkers, markerPlugin, listMarkers } from "./markers.js";

markNav("timeline");
const form = document.getElementById("selection");
const colors = ["#36c", "#c63", "#393", "#939", "#c93", "#399", "#933", "#669", "#696", "#966"];
let plot = null;

function coverageText(d) {
  const c = d.coverage;
  let t = `${c.agents} agents, ${fmtTime(d.since)} – ${fmtTime(d.until)} in ${d.points} intervals of ${d.step}, ` +
    `from the indexes of ${c.files} data files (${c.blocks} blocks, ${c.index_bytes} bytes read)`;
  if (c.skipped) t += `; ${c.skipped} files outside the range not opened`;
  t += ".";
  const miss = [];
  if (c.unindexed) miss.push(`${c.unindexed} files without a usable index, not counted (${c.unindexed_files.join("; ")}${c.unindexed > c.unindexed_files.length ? "; …" : ""})`);
  if (c.no_drops) miss.push(`the drops of ${c.no_drops} files (being written, or zstd of one frame)`);
  if (c.error) miss.push(`an error: ${c.error}`);
  if (c.agents === 0) miss.push("no agent of the selection in the root");
  return [t + (miss.length ? " Missing: " + miss.join(", ") + "." : " Nothing missing.") +
    " Gaps in a line: nothing kept of the agent then.", miss.length > 0];
}

// rangeLinks offers the flows and packets of [lo, hi] (ms) and the
// timeline of it at a finer step.
function rangeLinks(lo, hi) {
  const el = document.getElementById("range");
  el.replaceChildren();
  if (lo === null) return;
  const p = new URLSearchParams();
  const agent = new FormData(form).get("agent");
  if (agent && String(agent).trim()) p.set("agent", String(agent).trim());
  p.set("since", new Date(lo).toISOString());
  p.set("until", new Date(hi).toISOString());
  el.append(`Range ${fmtTime(new Date(lo).toISOString())} – ${fmtTime(new Date(hi).toISOString())}: `);
  for (const [id, href, text] of [["range-flows", "/flows?", "flows of this range"],
    ["range-packets", "/packets?", "packets of this range"], ["range-timeline", "/timeline?", "timeline of this range"]]) {
    const a = document.createElement("a");
    a.id = id; a.href = href + p.toString(); a.textContent = text;
    el.append(a, " ");
  }
}

// fromZero ranges a y scale from 0 to a little over its largest value.
const fromZero = (u, min, max) => [0, max > 0 ? max * 1.1 : 1];

function chart(d, m) {
  const el = document.getElementById("chart");
  if (plot) { plot.destroy(); plot = null; }
  el.replaceChildren();
  rangeLinks(null);
  if (d.agents.length === 0) { el.textContent = "No agent to chart."; return; }
  const secs = d.step_ns / 1e9, t0 = Date.parse(d.since) / 1000;
  const x = [];
  for (let i = 0; i < d.points; i++) x.push(t0 + i * secs);
  const data = [x], series = [{}];
  const rate = (v) => (v === null ? null : v / secs);
  d.agents.forEach((a, i) => {
    const c = colors[i % colors.length];
    const name = a.server ? `${a.agent} on ${a.server}` : a.agent;
    data.push(a.packets.map(rate), a.bytes.map(rate), a.drops.map((v) => (v > 0 ? v : null)));
    series.push({ label: `${name} packets/s`, stroke: c, scale: "pps" },
      { label: `${name} bytes/s`, stroke: c, dash: [4, 4], scale: "bps" },
      { label: `${name} drops`, stroke: "#d00", fill: "#d00", scale: "drops", paths: () => null,
        points: { show: true, size: 9, stroke: "#d00", fill: "#d00" } });
  });
  plot = new uPlot({
    width: Math.max(400, el.clientWidth || 900), height: 320,
    cursor: { drag: { x: true, y: false, setScale: false } },
    scales: { x: { time: true }, pps: { range: fromZero }, bps: { range: fromZero }, drops: { range: fromZero } },
    series,
    plugins: [markerPlugin(m)],
    axes: [{}, { scale: "pps", label: "packets/s" }, { scale: "bps", side: 1, label: "bytes/s" }],
    hooks: {
      setSelect: [(u) => {
        if (u.select.width < 2) return;
        const lo = u.posToVal(u.select.left, "x"), hi = u.posToVal(u.select.left + u.select.width, "x");
        u.setScale("x", { min: lo, max: hi });
        u.setSelect({ left: 0, width: 0 }, false);
        rangeLinks(Math.round(lo * 1000), Math.round(hi * 1000));
      }],
    },
  }, data, el);
  el.addEventListener("dblclick", () => { plot.setScale("x", { min: x[0], max: x[x.length - 1] + secs }); rangeLinks(null); });
  window.pcapsyncTimeline = plot; // for the browser test: uPlot's API
}

async function load() {
  try {
    const [d, m] = await Promise.all([getJSON("/api/timeline?" + selection(form).toString()), fetchMarkers(selection(form))]);
    chart(d, m);
    listMarkers(document.getElementById("markers"), m);
    const [text, warn] = coverageText(d);
    say(text, warn);
  } catch (e) {
    say("The timeline could not be loaded: " + e.message, true);
  }
}

runForm(form, load);
