package federate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// errStalled is the cause of a server's context ended by its deadline.
var errStalled = errors.New("stalled")

// stat is a statistics block of a server kept for the end.
type stat struct {
	src   *source
	iface int // the server's
	st    pcapfile.InterfaceStats
}

// source is one server's answer as the merge reads it: the packet at
// its head (p, in its Reader's buffer) until written, then the next.
// Its Read is the answer's Body under the stall deadline: the timer
// runs only while a Read waits, so a server is not blamed for the time
// the merge spends on the others.
type source struct {
	idx     int
	cc      queryhttp.ClientConfig
	d       time.Duration
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stall   *time.Timer
	ans     *queryhttp.Answer
	body    io.Reader                    // ans.Body
	result  func() (query.Result, error) // ans.Result
	ahead   *readahead                   // the merge's reads of body
	r       *pcapfile.Reader
	p       pcapfile.Packet
	agent   string // of p
	has     bool   // p is a packet not yet written
	started bool   // failed after the output began
	got     int64  // packets read
	last    int64  // timestamp of its last packet written

	outs     []int    // the server's interface -> the output's; -1 not yet written
	agents   []string // the server's interface -> its agent
	comments []string // of its section header
	stats    []stat
	budget   *atomic.Int64 // MaxStatsBytes left, shared
	dropped  int

	out Server
	err error // why it failed, nil if not
}

func newSource(idx int, cc queryhttp.ClientConfig, d time.Duration, budget *atomic.Int64) *source {
	return &source{idx: idx, cc: cc, d: d, budget: budget, out: Server{Server: cc.Addr}}
}

// ask sends the query, the deadline running until the answer begins.
func (s *source) ask(ctx context.Context) error {
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.stall = time.AfterFunc(s.d, func() { s.cancel(errStalled) })
	cc := s.cc
	if cc.DialTimeout == 0 || cc.DialTimeout > s.d {
		cc.DialTimeout = s.d
	}
	ans, err := queryhttp.Open(s.ctx, cc)
	s.stall.Stop()
	if err == nil {
		s.ans, s.body, s.result = ans, ans.Body, ans.Result
	}
	return err
}

// open asks the server and reads up to its first packet.
func (s *source) open(ctx context.Context) {
	if err := s.ask(ctx); err != nil {
		s.fail(err)
		return
	}
	s.start()
}

// start reads the answer up to its first packet, read ahead.
func (s *source) start() {
	s.ahead = newReadahead(s.Read)
	var err error
	s.r, err = pcapfile.NewReader(s.ahead, &pcapfile.ReaderConfig{OnStats: s.onStats, MaxInterfaces: MaxInterfaces, MaxInterfaceBytes: MaxInterfaceBytes})
	if err != nil {
		s.fail(streamErr(err))
		return
	}
	kept := 0 // the section comment is at most maxComment: keep no more
	for _, c := range s.r.SectionComments() {
		if kept += len(c); kept > maxComment {
			break
		}
		s.comments = append(s.comments, strings.Clone(c))
	}
	s.advance()
}

// Read reads the answer's pcapng, the stall deadline running.
func (s *source) Read(b []byte) (int, error) {
	s.stall.Reset(s.d)
	n, err := s.body.Read(b)
	s.stall.Stop()
	return n, err
}

// advance reads the next packet; at the end of the stream, the
// server's Result.
func (s *source) advance() {
	s.has = false
	err := s.r.ReadInto(&s.p)
	if err == io.EOF {
		s.finish()
		return
	}
	if err != nil {
		s.fail(streamErr(err))
		return
	}
	s.got++
	ifcs := s.r.Interfaces()
	for len(s.agents) < len(ifcs) {
		a, _, _ := strings.Cut(ifcs[len(s.agents)].Name, ":")
		s.agents = append(s.agents, a)
		s.outs = append(s.outs, -1)
	}
	s.agent = s.agents[s.p.Interface]
	s.has = true
}

// finish takes the server's Result once its stream ended.
func (s *source) finish() {
	res, err := s.result()
	if err == nil && res.Packets != s.got {
		err = fmt.Errorf("%w: the server's result says %d packets, its stream held %d", ErrStream, res.Packets, s.got)
	}
	if err != nil {
		s.fail(err)
		return
	}
	s.out.Outcome, s.out.Result = OutcomeOK, &res
	s.close()
}

// streamErr marks an error reading the server's pcapng: a format error
// is the server's (ErrStream), another the stream's end.
func streamErr(err error) error {
	var fe *pcapfile.FormatError
	if errors.As(err, &fe) && !errors.Is(err, pcapfile.ErrTruncated) {
		return fmt.Errorf("%w: not a query's pcapng: %w", ErrStream, err)
	}
	return fmt.Errorf("the stream was cut off: %w", err)
}

// fail records why the server failed, and ends its answer.
func (s *source) fail(err error) {
	s.has = false
	s.err = err
	s.out.Reason = err.Error()
	switch {
	case s.stalled():
		s.out.Outcome = OutcomeTimedOut
		s.err = stallError{s.d}
		s.out.Reason = s.err.Error()
	case errors.Is(err, queryhttp.ErrRefused) || errors.Is(err, queryhttp.ErrBadRequest):
		s.out.Outcome = OutcomeRefused
	case s.body == nil && unreachable(err):
		s.out.Outcome = OutcomeUnreachable
	default:
		s.out.Outcome = OutcomeFailed
	}
	s.close()
}

// stallError is a server's silence for its deadline: ErrTimedOut,
// its text saying how long (the outcome says "timed out").
type stallError struct{ d time.Duration }

func (e stallError) Error() string        { return fmt.Sprintf("sent nothing for %s", e.d) }
func (e stallError) Is(target error) bool { return target == ErrTimedOut }

// stalled reports whether the server's deadline ended it.
func (s *source) stalled() bool {
	return s.ctx != nil && errors.Is(context.Cause(s.ctx), errStalled)
}

// Fetch runs the query cc on one server and copies the pcapng it
// streams to w byte for byte (the server's own answer, as
// queryhttp.Fetch does), under the stall deadline timeout (0:
// DefaultServerTimeout). Its errors are queryhttp.Fetch's; a server
// that sent nothing for timeout is an error wrapping ErrTimedOut (and
// queryhttp.ErrFailed once its stream began).
func Fetch(ctx context.Context, cc queryhttp.ClientConfig, timeout time.Duration, w io.Writer) (query.Result, error) {
	s := newSource(0, cc, Config{Timeout: timeout}.timeout(), nil)
	defer s.close()
	if err := s.ask(ctx); err != nil {
		if s.stalled() {
			err = fmt.Errorf("query %s: %w: sent nothing for %s", cc.Addr, ErrTimedOut, s.d)
		}
		return query.Result{}, err
	}
	if _, err := io.Copy(w, s); err != nil {
		var we *writeError
		switch {
		case errors.As(err, &we):
			return query.Result{}, we.err
		case s.stalled():
			return query.Result{}, fmt.Errorf("%w: query %s: %w: sent nothing for %s", queryhttp.ErrFailed, cc.Addr, ErrTimedOut, s.d)
		}
		return query.Result{}, fmt.Errorf("%w: the stream was cut off: %w", queryhttp.ErrFailed, err)
	}
	return s.result()
}

// WriteTo copies the answer to w, its errors marked apart from the
// answer's (writeError), so that io.Copy uses it.
func (s *source) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := s.Read(buf)
		if k > 0 {
			m, werr := w.Write(buf[:k])
			n += int64(m)
			if werr != nil {
				return n, &writeError{fmt.Errorf("writing the output: %w", werr)}
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// writeError is an error of Fetch's writer, told apart from the
// stream's.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// unreachable reports whether err is a failure to reach the server:
// its name not resolved, no connection made.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// close ends the answer.
func (s *source) close() {
	if s.ans != nil {
		s.ans.Close()
		s.ans = nil
	}
	if s.cancel != nil {
		s.cancel(nil)
		s.stall.Stop()
	}
	if s.ahead != nil {
		s.ahead.close()
		s.ahead = nil
	}
}

// onStats keeps a statistics block for the end, within the budget.
func (s *source) onStats(i int, st pcapfile.InterfaceStats) {
	n := int64(64 + len(st.Comment))
	if s.budget.Add(-n) < 0 {
		s.budget.Add(n)
		s.dropped++
		return
	}
	s.stats = append(s.stats, stat{src: s, iface: i, st: st})
}

// covered reports whether a server's Result says it had something to
// answer from.
func covered(res query.Result) bool {
	return res.Covered()
}

// OutcomeOf is the outcome of a request to a server that failed with
// err before its answer began (queryhttp.FetchStatus, FetchFlows,
// FetchTimeline, Open), as Run tells them: refused (4xx or 503),
// unreachable (no connection), else failed. A server silent for its
// deadline is the caller's to tell (OutcomeTimedOut).
func OutcomeOf(err error) string {
	switch {
	case errors.Is(err, queryhttp.ErrRefused) || errors.Is(err, queryhttp.ErrBadRequest):
		return OutcomeRefused
	case unreachable(err):
		return OutcomeUnreachable
	}
	return OutcomeFailed
}
