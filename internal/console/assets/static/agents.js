// The agents page: GET /api/agents, one row per agent.
import { getJSON, cell, say, markNav, fmtTime, fmtRate } from "./common.js";

markNav("agents");

function row(tbody, a) {
  const s = a.status || {};
  const c = a.coverage || {};
  const tr = document.createElement("tr");
  tr.dataset.agent = a.name;
  cell(tr, a.name);
  cell(tr, a.server || "this server");
  cell(tr, a.status ? [s.host, s.address].filter(Boolean).join(" ") : "not known to this server");
  // The version the agent told its collector; an older agent (or one
  // over UDP) tells none.
  cell(tr, a.status ? s.version || "unknown" : "");
  cell(tr, a.status ? (s.connected ? "yes, since " + fmtTime(s.connected_since)
    : "no" + (s.disconnected_at ? ", since " + fmtTime(s.disconnected_at) : "")) : "not since this server started");
  const ifs = cell(tr, a.status ? "" : "not known to this server");
  ifs.className = "ifaces";
  if (s.interfaces) ifs.textContent = s.interfaces.map((i) => i.name + (i.reported ? ` (${i.kernel_drops})` : " (no counters yet)")).join(", ");
  cell(tr, fmtRate(s.packets_per_second), true);
  cell(tr, fmtRate(s.bytes_per_second), true);
  cell(tr, a.status ? `${s.kernel_drops} / ${s.agent_drops} / ${s.lost_batches}` : "", true);
  cell(tr, fmtTime(s.last_batch || c.newest));
  let kept = c.oldest ? fmtTime(c.oldest) + " – " + fmtTime(c.newest) : "nothing kept";
  if (c.times_unknown) kept += ` (${c.times_unknown} files of unknown times)`;
  if (c.unusable_total) kept += ` (${c.unusable_total} files unusable)`;
  cell(tr, kept);
  tbody.appendChild(tr);
}

// downRow is a row for a server that did not answer: its agents are
// not known.
function downRow(tbody, s) {
  const tr = document.createElement("tr");
  tr.className = "down";
  tr.dataset.server = s.server;
  cell(tr, "–");
  cell(tr, s.server);
  const td = cell(tr, `server down: ${s.outcome}: ${s.reason}`);
  td.colSpan = 9;
  tbody.appendChild(tr);
}

async function load() {
  const tbody = document.querySelector("#agents tbody");
  try {
    const d = await getJSON("/api/agents");
    tbody.replaceChildren();
    for (const a of d.agents) row(tbody, a);
    const down = (d.servers || []).filter((s) => s.outcome !== "ok");
    for (const s of down) downRow(tbody, s);
    let text = `${d.agents.length} agents as of ${fmtTime(d.time)}: `;
    text += d.has_status ? "state from this server's status, kept window from the output root." : "this server gives no status: kept window from the output root only.";
    if (d.coverage_error) text += " The root could not be read whole: " + d.coverage_error;
    if (d.servers) text = `${d.agents.length} agents of ${d.servers.length - down.length} servers as of ${fmtTime(d.time)} (${down.length} down: their agents are missing): state from each server's status, kept window from its output root.`;
    if (d.agents.length === 0) text = "No agent: none connected and the output root keeps nothing.";
    say(text, !!d.coverage_error);
  } catch (e) {
    say("The agents could not be loaded: " + e.message, true);
  }
}

load();
