package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// TopTalkers is how many hosts, conversations and services GET
// /api/flows ranks (flowquery.Top by bytes).
const TopTalkers = 10

// api answers GET /api/...: JSON, or the pcapng of a download, from
// the Handler's Source.
func (h *Handler) api(w http.ResponseWriter, r *http.Request) {
	v, err := queryhttp.ParseValues(r.URL.RawQuery)
	if err != nil {
		h.bad(w, err)
		return
	}
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	default:
		w.Header().Set("Retry-After", "1")
		h.json(w, http.StatusServiceUnavailable, map[string]string{"error": fmt.Sprintf("too many requests reading the captures (%d): try again later", h.cfg.MaxQueries)})
		return
	}
	ctx := r.Context()
	switch r.URL.Path {
	case "/api/agents":
		h.answer(w, h.src.Agents(ctx))
	case "/api/flows":
		h.answer(w, h.src.Flows(ctx, v))
	case "/api/packets":
		h.packets(w, r, v)
	case "/api/download":
		h.download(w, r, v)
	case "/api/packet":
		h.packet(w, r, v)
	case "/api/timeline":
		h.answer(w, h.src.Timeline(ctx, v))
	case "/api/flow":
		h.answer(w, h.src.Flow(ctx, v))
	case "/api/markers":
		h.answer(w, h.src.Markers(ctx, v))
	default:
		http.Error(w, "no such API: GET /api/agents, /api/flows, /api/flow, /api/packets, /api/packet, /api/download, /api/timeline, /api/markers", http.StatusNotFound)
	}
}

func (h *Handler) bad(w http.ResponseWriter, err error) {
	h.answer(w, badRequest(err))
}

// answer writes a Source's Answer.
func (h *Handler) answer(w http.ResponseWriter, a Answer) {
	h.json(w, a.Code, a.Body)
}

func (h *Handler) json(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// packets answers GET /api/packets: the first count packets (default
// DefaultPackets, at most DefaultMaxPackets) of a selection as
// pktline's lines, with the query's Result (its coverage).
func (h *Handler) packets(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	n := int64(DefaultPackets)
	if s := v["count"]; len(s) > 1 {
		h.bad(w, fmt.Errorf("count given %d times", len(s)))
		return
	} else if len(s) == 1 {
		var err error
		if n, err = strconv.ParseInt(s[0], 10, 64); err != nil || n < 1 || n > DefaultMaxPackets {
			h.bad(w, fmt.Errorf("count %q: want 1..%d", s[0], DefaultMaxPackets))
			return
		}
	}
	v["count"] = []string{strconv.FormatInt(n, 10)}
	h.answer(w, h.src.Packets(r.Context(), v))
}

// packet answers GET /api/packet: the index-th packet (from 0, below
// DefaultMaxPackets) of a selection (GET /api/packets's, no count): its
// line and its captured bytes as a hex dump (encoding/hex.Dump: offset,
// 16 bytes in hex, their printable characters).
func (h *Handler) packet(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	s := v["index"]
	i, err := int64(0), error(nil)
	if len(s) == 1 {
		i, err = strconv.ParseInt(s[0], 10, 64)
	}
	if len(s) != 1 || err != nil || i < 0 || i >= DefaultMaxPackets {
		h.bad(w, fmt.Errorf("index: want one whole number 0..%d", DefaultMaxPackets-1))
		return
	}
	delete(v, "index")
	if _, ok := v["count"]; ok {
		h.bad(w, errors.New("count: GET /api/packet takes index, not count"))
		return
	}
	v["count"] = []string{strconv.FormatInt(i+1, 10)}
	h.answer(w, h.src.Packet(r.Context(), v, i))
}

// download answers GET /api/download: the selection's pcapng as
// GET /query streams it (the coverage in its section comment), for
// Wireshark.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, v map[string][]string) {
	run, refused := h.src.Download(r.Context(), v)
	if run == nil {
		h.answer(w, refused)
		return
	}
	w.Header().Set("Content-Type", queryhttp.ContentType)
	w.Header().Set("Content-Disposition", `attachment; filename="pcapsync-query.pcapng"`)
	dw := &deadlineWriter{w: w, rc: http.NewResponseController(w)}
	if err := run(dw); err != nil {
		h.log.Warn("console download failed", "err", err)
		if dw.n == 0 { // nothing sent yet: an answer that says why, not an empty file
			w.Header().Del("Content-Disposition")
			h.json(w, http.StatusBadGateway, map[string]string{"error": "the download failed: " + err.Error()})
		}
	}
}

// deadlineWriter writes a download with a deadline renewed before each
// piece of queryhttp.StreamPiece: a client that takes nothing for queryhttp.DefaultWriteTimeout
// is cut off (its slot freed), a slow one that keeps taking is not.
type deadlineWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	n  int64 // written
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	return queryhttp.WritePieces(d.rc, queryhttp.DefaultWriteTimeout, p, func(b []byte) (int, error) {
		n, err := d.w.Write(b)
		d.n += int64(n)
		return n, err
	})
}
