// Helpers shared by the console's pages. Everything is written with
// textContent: nothing from the server becomes markup.

// getJSON fetches an /api/ path; a refusal or failure throws its text.
export async function getJSON(path) {
  const r = await fetch(path, { credentials: "same-origin" });
  if (r.status === 401) { location.href = "/login"; throw new Error("not logged in"); }
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (body && body.servers) showServers(body.servers);
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

// cell appends a td with text to tr; num right-aligns it.
export function cell(tr, text, num) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null || text === "" ? "–" : String(text);
  if (num) td.className = "num";
  tr.appendChild(td);
  return td;
}

// say writes a coverage line; warn marks what is missing.
export function say(text, warn) {
  const p = document.getElementById("coverage");
  p.textContent = text;
  p.classList.toggle("warn", !!warn);
}

// markNav underlines the current page in the navigation.
export function markNav(name) {
  const a = document.getElementById("nav-" + name);
  if (a) a.classList.add("current");
}

// selection returns the form's non-empty fields as URL parameters.
export function selection(form) {
  const p = new URLSearchParams();
  for (const [k, v] of new FormData(form)) if (String(v).trim() !== "") p.set(k, String(v).trim());
  return p;
}

// fillForm sets the form's fields from the page's URL.
export function fillForm(form) {
  const p = new URLSearchParams(location.search);
  for (const el of form.elements) if (el.name && p.has(el.name)) el.value = p.get(el.name);
  return p;
}

export function fmtTime(t) { return t ? String(t).replace("T", " ").replace("Z", " UTC") : ""; }

export function fmtRate(x) { return x === undefined || x === null ? "" : Number(x).toFixed(1); }

// runForm fills form from the page's URL, runs load, and runs it again
// on each submit, the URL showing the selection.
export function runForm(form, load) {
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    history.replaceState(null, "", "?" + selection(form).toString());
    load();
  });
  fillForm(form);
  load();
}

// showServers writes, in a federated console, the line that says which
// servers answered and which are down (and why), above the coverage.
export function showServers(servers) {
  let p = document.getElementById("servers");
  if (!p) {
    p = document.createElement("p");
    p.id = "servers";
    const cov = document.getElementById("coverage");
    if (!cov) return;
    cov.parentNode.insertBefore(p, cov);
  }
  const down = servers.filter((s) => s.outcome !== "ok");
  let t = `${servers.length - down.length} of ${servers.length} servers answered`;
  if (down.length) t += ". Down (their agents are missing here): " + down.map((s) => `${s.server} ${s.outcome}: ${s.reason}`).join("; ");
  p.textContent = t + ".";
  p.className = "coverage servers" + (down.length ? " warn" : "");
  p.dataset.down = down.map((s) => s.server).join(",");
}
