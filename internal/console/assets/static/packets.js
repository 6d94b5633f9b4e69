// The packets page: the first packets of a selection as lines
// (GET /api/packets), and the download of all of it.
import { getJSON, say, markNav, selection, runForm } from "./common.js";

markNav("packets");
const form = document.getElementById("selection");

function coverageText(res, n) {
  const cov = res.coverage || [];
  let t = `${n} packets shown` + (res.stopped === "count" ? " (the first of more)" : "") + ` from ${res.agents} agents, ${res.files_read} files read.`;
  const miss = [];
  for (const c of cov) {
    if (c.removed) miss.push(`${c.agent}: retention removed ${c.removed.files} files reaching into the range`);
    if (c.unusable_total) miss.push(`${c.agent}: ${c.unusable_total} files unusable`);
    if (!c.overlaps) miss.push(`${c.agent}: keeps nothing in the range` + (c.oldest ? ` (keeps ${c.oldest} – ${c.newest})` : ""));
  }
  if (cov.length === 0) miss.push("no agent of the root matches the selection");
  return [t + (miss.length ? " Missing: " + miss.join("; ") + "." : ""), miss.length > 0];
}

// showPacket shows the i-th packet's bytes (GET /api/packet).
async function showPacket(i) {
  const p = selection(form);
  p.delete("count");
  p.set("index", String(i));
  const line = document.getElementById("pktline");
  const hex = document.getElementById("hex");
  try {
    const d = await getJSON("/api/packet?" + p.toString());
    line.textContent = `Packet ${i + 1}: ${d.line} (${d.captured} of ${d.length} bytes captured)`;
    line.classList.remove("warn");
    hex.textContent = d.hex;
  } catch (e) {
    line.textContent = `Packet ${i + 1} could not be loaded: ${e.message}`;
    line.classList.add("warn");
    hex.textContent = "";
  }
}

async function load() {
  const p = selection(form);
  const dl = new URLSearchParams(p);
  dl.delete("count");
  document.getElementById("download").href = "/api/download?" + dl.toString();
  try {
    const d = await getJSON("/api/packets?" + p.toString());
    const list = document.getElementById("packets");
    list.replaceChildren();
    d.lines.forEach((line, i) => {
      const div = document.createElement("div");
      div.className = "pkt";
      div.textContent = line;
      div.addEventListener("click", () => showPacket(i));
      list.appendChild(div);
    });
    let [text, warn] = coverageText(d.result, d.lines.length);
    if (d.error) { text += " The query failed: " + d.error; warn = true; }
    say(text, warn);
  } catch (e) {
    say("The packets could not be loaded: " + e.message, true);
  }
}

runForm(form, load);
