// The packets page: the first packets of a selection as lines
// (GET /api/packets), and the download of all of it.
import { getJSON, say, markNav, selection, fillForm } from "./common.js";

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

async function load() {
  const p = selection(form);
  const dl = new URLSearchParams(p);
  dl.delete("count");
  document.getElementById("download").href = "/api/download?" + dl.toString();
  try {
    const d = await getJSON("/api/packets?" + p.toString());
    const pre = document.getElementById("packets");
    pre.textContent = d.lines.join("\n");
    let [text, warn] = coverageText(d.result, d.lines.length);
    if (d.error) { text += " The query failed: " + d.error; warn = true; }
    say(text, warn);
  } catch (e) {
    say("The packets could not be loaded: " + e.message, true);
  }
}

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  history.replaceState(null, "", "?" + selection(form).toString());
  load();
});
fillForm(form);
load();
