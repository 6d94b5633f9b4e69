// bars draws a horizontal bar chart of items ({key, bytes, ...}) on a
// canvas of its own in el: one bar per item, longest first, its length
// value(item) against the largest, the key and the value written beside
// it. Drawn with the canvas API (no library, nothing inline: the CSP
// holds); the items' keys are kept in the canvas's data-keys for tests
// and its text alternative.
export function bars(el, items, value, unit) {
  el.replaceChildren();
  if (!items || items.length === 0) { el.textContent = "Nothing to chart."; return null; }
  const rowH = 22, pad = 6, numW = 100;
  const width = Math.max(480, Math.min(el.clientWidth || 640, 900));
  const labelW = Math.min(260, Math.floor(width * 0.4));
  const c = document.createElement("canvas");
  const ratio = window.devicePixelRatio || 1;
  const height = items.length * rowH + 2 * pad;
  c.width = width * ratio; c.height = height * ratio;
  c.style.width = width + "px"; c.style.height = height + "px"; // CSSOM, not an inline style attribute
  c.dataset.keys = JSON.stringify(items.map((t) => t.key));
  c.setAttribute("role", "img");
  c.setAttribute("aria-label", items.map((t) => `${t.key}: ${value(t)} ${unit}`).join("; "));
  const g = c.getContext("2d");
  g.scale(ratio, ratio);
  g.font = "12px system-ui, sans-serif";
  g.textBaseline = "middle";
  const max = Math.max(...items.map(value), 1);
  const barW = width - labelW - numW - 2 * pad;
  items.forEach((t, i) => {
    const y = pad + i * rowH;
    g.fillStyle = "#222";
    g.textAlign = "right";
    let k = t.key;
    while (k.length > 4 && g.measureText(k).width > labelW - 8) k = k.slice(0, -2);
    g.fillText(k === t.key ? k : k + "…", labelW - 6, y + rowH / 2);
    g.fillStyle = "#36c";
    g.fillRect(labelW, y + 3, Math.max(1, (barW * value(t)) / max), rowH - 6);
    g.fillStyle = "#222";
    g.textAlign = "left";
    g.fillText(`${value(t)} ${unit}`, labelW + barW + 6, y + rowH / 2);
  });
  el.appendChild(c);
  return c;
}
