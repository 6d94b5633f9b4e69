// The timeline's markers (GET /api/markers): where capture stopped
// (an agent's last packet before a gap, its file closed) and where the
// status says an agent disconnected or connected, drawn as vertical
// lines on the uPlot chart and listed under it.
import { getJSON, fmtTime } from "./common.js";

const styles = {
  stop: { color: "#555", dash: [6, 3], label: "capture stopped" },
  disconnect: { color: "#d60", dash: [2, 2], label: "disconnected" },
  connect: { color: "#393", dash: [], label: "connected" },
};

// fetchMarkers returns the markers of the timeline's selection p (URL
// parameters), or {error} when they could not be had: the chart is
// drawn without them.
export async function fetchMarkers(p) {
  try {
    return await getJSON("/api/markers?" + p.toString());
  } catch (e) {
    return { markers: [], error: e.message };
  }
}

// markerPlugin draws m.markers (times in RFC 3339) over a uPlot chart
// whose x scale is in seconds.
export function markerPlugin(m) {
  return {
    hooks: {
      draw: [(u) => {
        const g = u.ctx;
        g.save();
        g.lineWidth = 2 * (window.devicePixelRatio || 1);
        for (const mk of m.markers || []) {
          const x = u.valToPos(Date.parse(mk.time) / 1000, "x", true);
          if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
          const s = styles[mk.kind] || styles.stop;
          g.strokeStyle = s.color;
          g.setLineDash(s.dash);
          g.beginPath();
          g.moveTo(x, u.bbox.top);
          g.lineTo(x, u.bbox.top + u.bbox.height);
          g.stroke();
        }
        g.restore();
      }],
    },
  };
}

// listMarkers writes m's markers into the list el, one line each.
export function listMarkers(el, m) {
  el.replaceChildren();
  if (m.error) {
    const li = document.createElement("li");
    li.className = "error";
    li.textContent = "The markers could not be loaded: " + m.error;
    el.appendChild(li);
    return;
  }
  for (const mk of m.markers || []) {
    const li = document.createElement("li");
    li.className = "marker " + mk.kind;
    li.dataset.agent = mk.agent;
    li.dataset.kind = mk.kind;
    li.textContent = `${fmtTime(mk.time)} ${mk.agent}${mk.server ? " on " + mk.server : ""}: ${(styles[mk.kind] || styles.stop).label}: ${mk.text}`;
    el.appendChild(li);
  }
  if (m.unknown) {
    const li = document.createElement("li");
    li.textContent = `${m.unknown} closed files of unknown times: where capture stopped in them is not known.`;
    el.appendChild(li);
  }
  if (!el.children.length) {
    const li = document.createElement("li");
    li.textContent = "No marker in this range: capture did not stop, no agent connected or disconnected.";
    el.appendChild(li);
  }
}
