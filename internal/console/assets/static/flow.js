// One flow's page: GET /api/flow with its Community ID (and the
// selection): every agent that saw it (pcapsync flows --same) and what
// was lost between them (pcapsync correlate over its packets).
import { getJSON, cell, say, markNav, selection, runForm, fmtTime } from "./common.js";

markNav("flows");
const form = document.getElementById("selection");

function ep(ip, port, mac) { return ip ? `${ip}:${port}` : mac || ""; }

function ms(ns) { return (ns / 1e6).toFixed(3) + " ms"; }

function render(d) {
  document.getElementById("cid").textContent = d.community_id;
  document.getElementById("flow-packets").href = d.packets;
  document.getElementById("flow-download").href = d.download;
  const seen = document.querySelector("#seen tbody");
  seen.replaceChildren();
  for (const f of d.seen) {
    const tr = document.createElement("tr");
    tr.dataset.agent = f.agent;
    for (const v of [f.server ? `${f.agent} on ${f.server}` : f.agent, f.iface, fmtTime(f.first), fmtTime(f.last), f.proto, ep(f.src_ip, f.src_port, f.src_mac), ep(f.dst_ip, f.dst_port, f.dst_mac)]) cell(tr, v);
    cell(tr, `${f.src_packets} / ${f.dst_packets}`, true);
    cell(tr, `${f.src_bytes} / ${f.dst_bytes}`, true);
    cell(tr, f.tcp_flags); cell(tr, f.end);
    seen.appendChild(tr);
  }
  const pairs = document.querySelector("#pairs tbody");
  pairs.replaceChildren();
  const note = document.getElementById("lost-note");
  if (d.correlation) {
    note.textContent = "pcapsync correlate over this flow's packets, window " + ms(d.correlation.window_ns) +
      " (a packet is matched by its unchanging bytes). " + d.correlation.delay_note + ".";
    for (const p of d.correlation.pairs) {
      const tr = document.createElement("tr");
      tr.dataset.pair = `${p.from}>${p.to}`;
      cell(tr, p.from); cell(tr, p.to);
      for (const v of [p.at_from, p.at_to, p.matched, p.from_not_to, p.to_not_from]) cell(tr, v, true);
      cell(tr, `${p.dup_from} / ${p.dup_to}`, true);
      cell(tr, p.delay.count ? `${ms(p.delay.p50_ns)} / ${ms(p.delay.max_ns)}` : "");
      if (p.from_not_to || p.to_not_from) tr.className = "lost";
      pairs.appendChild(tr);
    }
  } else if (d.correlate_error) {
    note.textContent = "The correlation failed: " + d.correlate_error;
  } else {
    note.textContent = d.agents.length === 1 ? `Only ${d.agents[0]} saw it in the selection: nothing to compare.` : "No agent saw it in the selection.";
  }
}

function coverageText(d) {
  const c = d.coverage;
  let t = `${d.seen.length} flow records of ${d.community_id} at ${d.agents.length} agents (${d.agents.join(", ")}), ` +
    `from ${c.files} data files of ${c.agents} agents`;
  t += c.oldest ? `; the root keeps ${fmtTime(c.oldest)} – ${fmtTime(c.newest)}.` : ".";
  const miss = [];
  if (c.missing) miss.push(`${c.missing} closed files without flow records`);
  if (c.writing) miss.push(`${c.writing} files being written (their flows only as they end)`);
  if (c.times_unknown) miss.push(`${c.times_unknown} files of unknown times`);
  if (c.damaged.length) miss.push(`${c.damaged.length} damaged flow files: ${c.damaged.join("; ")}`);
  if (d.seen.length === 0) miss.push("no flow record of this Community ID in the selection");
  return [t + (miss.length ? " Missing: " + miss.join(", ") + "." : " Nothing missing."), miss.length > 0];
}

async function load() {
  const p = selection(form);
  if (!p.get("community_id")) { say("Give a flow's Community ID (the flows page links each flow here).", true); return; }
  try {
    const d = await getJSON("/api/flow?" + p.toString());
    render(d);
    const [text, warn] = coverageText(d);
    say(text, warn);
  } catch (e) {
    say("The flow could not be loaded: " + e.message, true);
  }
}

runForm(form, load);
