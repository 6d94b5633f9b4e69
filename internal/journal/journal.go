package journal

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the variable in which systemd passes the journal's stream:
// "DEVICE:INODE", both decimal (systemd.exec(5)).
const Env = "JOURNAL_STREAM"

// Syslog priorities of sd-daemon(3) (SD_ERR, SD_WARNING, SD_INFO,
// SD_DEBUG), the ones Priority returns.
const (
	PriorityErr     = 3
	PriorityWarning = 4
	PriorityInfo    = 6
	PriorityDebug   = 7
)

// Stream reports whether w is the journal's stream: a file whose device
// and inode are those JOURNAL_STREAM names. A writer that is not a file
// (a buffer, a pipe wrapper), a different file, or no or a malformed
// JOURNAL_STREAM gives false: a process whose stderr was redirected
// elsewhere than the journal writes no prefixes (the check
// systemd.exec(5) describes for JOURNAL_STREAM).
func Stream(w io.Writer) bool { return matches(w, os.Getenv(Env)) }

func matches(w io.Writer, env string) bool {
	devS, inoS, ok := strings.Cut(env, ":")
	if !ok {
		return false
	}
	dev, err1 := strconv.ParseUint(devS, 10, 64)
	ino, err2 := strconv.ParseUint(inoS, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	d, i, ok := ident(w)
	return ok && d == dev && i == ino
}

// Value returns what JOURNAL_STREAM holds when w is the journal's
// stream: w's device and inode, "DEVICE:INODE"; false if w is not a
// file. It is for tests and for a process that hands its own stream to
// another.
func Value(w io.Writer) (string, bool) {
	dev, ino, ok := ident(w)
	if !ok {
		return "", false
	}
	return strconv.FormatUint(dev, 10) + ":" + strconv.FormatUint(ino, 10), true
}

// ident returns w's device and inode if w is a file.
func ident(w io.Writer) (dev, ino uint64, ok bool) {
	f, ok := w.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return 0, 0, false
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	// Dev and Ino differ in type across systems (int32 and uint64 on
	// darwin).
	return uint64(st.Dev), uint64(st.Ino), true
}

// Priority returns the syslog priority of a record at level l: error
// (3) at slog.LevelError and above, warning (4) from slog.LevelWarn,
// info (6) from slog.LevelInfo, debug (7) below.
func Priority(l slog.Level) int {
	switch {
	case l >= slog.LevelError:
		return PriorityErr
	case l >= slog.LevelWarn:
		return PriorityWarning
	case l >= slog.LevelInfo:
		return PriorityInfo
	}
	return PriorityDebug
}

// Prefix returns the line prefix of level l: "<N>", N its Priority.
func Prefix(l slog.Level) string { return "<" + strconv.Itoa(Priority(l)) + ">" }

// Handler returns a handler that writes every record to w as the
// handler newHandler returns formats it, with Prefix of the record's
// level before it. newHandler is called once, with the writer its
// handler must write to; that handler must write each record in one
// Write call, a whole line, as slog's TextHandler and JSONHandler do
// (whatever their HandlerOptions). Each prefixed line reaches w in one
// Write. The handler and those WithAttrs and WithGroup derive from it
// are safe for concurrent use: they format one record at a time.
func Handler(w io.Writer, newHandler func(io.Writer) slog.Handler) slog.Handler {
	pw := &prefixWriter{w: w}
	return &handler{inner: newHandler(pw), pw: pw}
}

type handler struct {
	inner slog.Handler
	pw    *prefixWriter
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	h.pw.mu.Lock()
	defer h.pw.mu.Unlock()
	h.pw.level = r.Level
	return h.inner.Handle(ctx, r)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{inner: h.inner.WithAttrs(as), pw: h.pw}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{inner: h.inner.WithGroup(name), pw: h.pw}
}

// prefixWriter writes each Write's bytes after the prefix of level, in
// one Write to w. Its mu is held by the handler around each record.
type prefixWriter struct {
	mu    sync.Mutex
	w     io.Writer
	level slog.Level
	buf   []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.buf = append(append(p.buf[:0], '<', byte('0'+Priority(p.level)), '>'), b...)
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
