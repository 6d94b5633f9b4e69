package queryhttp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/query"
)

// Path is the query's URL path.
const Path = "/query"

// ContentType is the pcapng media type the answer carries.
const ContentType = "application/x-pcapng"

// Trailers of the answer.
const (
	TrailerResult = "Pcapsync-Result" // query.Result as JSON
	TrailerError  = "Pcapsync-Error"  // why the query failed after its stream began
)

// Server serves queries over one listener. Its methods are safe for
// concurrent use.
type Server struct {
	Counters Counters

	cfg   Config
	log   *slog.Logger
	cas   *x509.CertPool // client certificates required, verified by the handler
	ln    *listener
	srv   *http.Server
	slots chan struct{}   // a token per running query
	base  context.Context // the requests'; ended by Run to stop the queries
	stop  context.CancelFunc
	plain bool // a TLS listener that admits plain clients (loopback)

	refusals, tlsFails frontdoor.RateLog // one WARN per interval for each

	run func(context.Context, *query.Prepared, io.Writer) (query.Result, error) // Prepared.Run; tests replace it
}

func runPrepared(ctx context.Context, q *query.Prepared, w io.Writer) (query.Result, error) {
	return q.Run(ctx, w)
}

// connKey keys a connection's refusal in its requests' contexts.
type connKey struct{}

// New validates cfg and returns a Server with its listener open, so
// that a port already taken fails the start; Run serves it, Close
// closes it unserved.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, log: cfg.Logger, slots: make(chan struct{}, cfg.MaxQueries), run: runPrepared}
	var tc *tls.Config
	if cfg.TLS != nil {
		// The handler checks client certificates, so that a refusal is
		// an answer with its reason rather than a failed handshake.
		tc = cfg.TLS.Clone()
		if tc.ClientAuth >= tls.VerifyClientCertIfGiven && tc.ClientCAs != nil {
			s.cas, tc.ClientAuth = tc.ClientCAs, tls.RequestClientCert
		}
		tc.NextProtos = []string{"http/1.1"}
	}
	raw, err := frontdoor.Listen(cfg.Listen, frontdoor.Config{Name: cfg.Name, MaxConns: cfg.MaxConns, Logger: s.log})
	if err != nil {
		return nil, fmt.Errorf("query listener: %w", err)
	}
	addr := raw.Addr().String()
	tcp, _ := raw.Addr().(*net.TCPAddr)
	switch {
	case tc == nil:
		s.log.Warn("INSECURE: "+cfg.Name+" listener in plain HTTP: anyone who reaches it reads the captures", cfg.Name, addr)
	case tcp != nil && tcp.IP.IsLoopback():
		s.plain = true
		if s.cas != nil && cfg.Token == "" {
			s.log.Warn(cfg.Name+" listener on loopback: plain HTTP clients on this host need no client certificate; add --token-file to require one there", cfg.Name, addr)
		}
	}
	s.ln = newListener(raw, tc, s.plain, cfg.HandshakeTimeout, func(remote string, err error) {
		s.Counters.TLS.Add(1)
		s.tlsFails.Warn(s.log, cfg.Name+" client refused", "remote", remote, cfg.Name, addr, "status", "tls", "err", err)
	})
	s.base, s.stop = context.WithCancel(context.Background())
	s.srv = frontdoor.HTTPServer(s, frontdoor.HTTPConfig{HeaderTimeout: cfg.HandshakeTimeout})
	s.srv.ErrorLog = log.New(slogWriter{s.log}, "", 0)
	s.srv.BaseContext = func(net.Listener) context.Context { return s.base }
	s.srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if pc, ok := c.(*plainConn); ok && pc.refused {
			return context.WithValue(ctx, connKey{}, true)
		}
		return ctx
	}
	return s, nil
}

// Conns returns the counters of the listener's connections.
func (s *Server) Conns() *frontdoor.Counters { return &s.ln.ln.Counters }

// Addr returns the address the listener is bound to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves queries until ctx ends, then stops: it cancels the
// running queries (their answers end with the error in the trailer),
// waits up to ShutdownTimeout for them, and returns.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
		s.stop()
		s.ln.Close()
		return fmt.Errorf("query listener: %w", err)
	}
	s.stop()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if serr := s.srv.Shutdown(sctx); serr != nil {
		s.srv.Close()
	}
	<-errc
	return nil
}

// Close closes the listener of a Server that Run never served.
func (s *Server) Close() error {
	s.stop()
	return s.ln.Close()
}

// ServeHTTP answers one request: authentication, parameters (the
// filter's limits), a slot, the filter compiled, then the query.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := s.log.With("remote", r.RemoteAddr, s.cfg.Name, s.Addr())
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		log = log.With("cert_cn", r.TLS.PeerCertificates[0].Subject.CommonName)
	}
	if s.cfg.Handler != nil {
		s.front(w, r, log)
		return
	}
	if code, reason := s.authenticate(r); code != 0 {
		s.refuse(w, log, code, reason)
		return
	}
	switch {
	case r.URL.Path == StatusPath:
		s.serveStatus(w, r, log)
		return
	case r.URL.Path != Path && r.URL.Path != FlowsPath && r.URL.Path != TimelinePath && r.URL.Path != MarkersPath:
		s.refuse(w, log, http.StatusNotFound, "no such path: the query is GET "+Path+", the flows GET "+FlowsPath+", the status GET "+StatusPath+
			", the timeline GET "+TimelinePath+", its markers GET "+MarkersPath)
		return
	case r.Method != http.MethodGet && r.Method != http.MethodPost:
		w.Header().Set("Allow", "GET, POST")
		s.refuse(w, log, http.StatusMethodNotAllowed, "the query is GET "+Path+" (or POST, the parameters in the body)")
		return
	}
	v, code, err := readParams(w, r, s.cfg.HandshakeTimeout)
	if err != nil {
		s.refuse(w, log, code, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
		return
	}
	log = log.With("selection", selection(v))
	if r.URL.Path == TimelinePath {
		s.serveTimeline(w, r, v, log)
		return
	}
	if r.URL.Path == MarkersPath {
		s.serveMarkers(w, r, v, log)
		return
	}
	var cfg query.Config
	var fc flowquery.Config
	if r.URL.Path == FlowsPath {
		fc, err = parseFlows(v, s.cfg.Dir, time.Now())
	} else {
		cfg, err = parseQuery(v, s.cfg.Dir, time.Now())
	}
	if err != nil {
		s.refuse(w, log, http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrBadRequest.Error()+": "))
		return
	}
	if !s.takeSlot(w, log) {
		return
	}
	defer func() { <-s.slots }()
	if r.URL.Path == FlowsPath {
		s.serveFlows(w, r, fc, log)
		return
	}
	cfg.ReorderMem, cfg.Logger = s.cfg.ReorderMem, log
	if q := s.prepare(w, r, cfg, log); q != nil {
		s.serve(w, r, q, log)
	}
}

// takeSlot takes a query slot (give it back: <-s.slots); false: none
// free, answered 503.
func (s *Server) takeSlot(w http.ResponseWriter, log *slog.Logger) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		w.Header().Set("Retry-After", "1")
		s.refuse(w, log, http.StatusServiceUnavailable, fmt.Sprintf("too many queries running (%d): try again later", s.cfg.MaxQueries))
		return false
	}
}

// prepare reads the blocks of a community_id's flow records
// (flowquery.Blocks) and compiles the query's filter within
// CompileTimeout and the request's life; nil: answered (400, 503, 500)
// or the client gone.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, cfg query.Config, log *slog.Logger) *query.Prepared {
	c := &s.Counters
	var q *query.Prepared
	var err error
	if cfg.CommunityID != "" { // only the blocks its flow records name, as the CLI reads
		cfg.Blocks, err = flowquery.Blocks(r.Context(), cfg)
	}
	if err == nil {
		c.Compiling.Add(1)
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.CompileTimeout)
		q, err = query.Prepare(ctx, cfg)
		cancel()
		c.Compiling.Add(-1)
	}
	switch {
	case err == nil:
		return q
	case errors.Is(err, query.ErrBadFilter):
		s.refuse(w, log, http.StatusBadRequest, err.Error())
	case errors.Is(err, flowquery.ErrTooManyFlows):
		s.refuse(w, log, http.StatusBadRequest, s.public(err))
	case r.Context().Err() != nil:
		c.Canceled.Add(1)
		log.Info("query canceled: the client went away", "selection", r.URL.RawQuery, "err", err)
	case errors.Is(err, context.DeadlineExceeded):
		w.Header().Set("Retry-After", "1")
		s.refuse(w, log, http.StatusServiceUnavailable, fmt.Sprintf(
			"the filter was not compiled within %s (one filter compiles at a time): try again later, or a simpler filter", s.cfg.CompileTimeout))
	default:
		c.Failed.Add(1)
		log.Warn("query failed", "selection", r.URL.RawQuery, "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, s.public(err))
	}
	return nil
}

// Client is what the front door knows of a request it hands to
// Config.Handler.
type Client struct {
	// Cert: the request came over TLS with a client certificate that
	// verified against the TLS configuration's ClientCAs.
	Cert bool
	// CertRequired: the listener requires client certificates (TLS
	// with ClientCAs) and the request came over TLS.
	CertRequired bool
}

// clientKey keys a request's Client in its context.
type clientKey struct{}

// ClientOf returns what the front door knows of r (zero outside a
// Handler's request).
func ClientOf(r *http.Request) Client {
	c, _ := r.Context().Value(clientKey{}).(Client)
	return c
}

// front hands a request to Config.Handler: a plain one on a listener
// that refuses plain clients is refused here; a client certificate is
// verified, its result in ClientOf.
func (s *Server) front(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	if refused, _ := r.Context().Value(connKey{}).(bool); refused {
		s.refuse(w, log, http.StatusForbidden, "this "+s.cfg.Name+" listener requires HTTPS (TLS); plain HTTP only on a loopback listener")
		return
	}
	var c Client
	if r.TLS != nil && s.cas != nil {
		c.CertRequired = true
		c.Cert = s.verifyCert(r.TLS.PeerCertificates) == nil
	}
	s.cfg.Handler.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientKey{}, c)))
}

// verifyCert verifies a client's chain against the client CAs.
func (s *Server) verifyCert(certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("no client certificate")
	}
	opts := x509.VerifyOptions{Roots: s.cas, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := certs[0].Verify(opts)
	return err
}

// authenticate returns the status and reason of a refused request, or
// 0: the rules of the agents and the tap.
func (s *Server) authenticate(r *http.Request) (int, string) {
	if refused, _ := r.Context().Value(connKey{}).(bool); refused {
		return http.StatusForbidden, "this query listener requires HTTPS (TLS); plain HTTP only on a loopback listener"
	}
	if r.TLS != nil && s.cas != nil {
		certs := r.TLS.PeerCertificates
		if len(certs) == 0 {
			return http.StatusUnauthorized, "client certificate required"
		}
		if err := s.verifyCert(certs); err != nil {
			return http.StatusForbidden, "client certificate refused: " + err.Error()
		}
	}
	if want := s.cfg.Token; want != "" {
		got, ok := frontdoor.BearerToken(r.Header.Get("Authorization"))
		switch {
		case !ok:
			return http.StatusUnauthorized, "token required: send Authorization: Bearer TOKEN (pcapsync query --token-file)"
		case !frontdoor.TokenEqual(got, want):
			return http.StatusForbidden, "wrong token"
		}
	}
	return 0, ""
}

// refuse answers code with reason on one line, counts it and logs it
// (at most one line per interval and reason), and closes the connection after the
// answer: a refused client keeps nothing open.
func (s *Server) refuse(w http.ResponseWriter, log *slog.Logger, code int, reason string) {
	reason = strings.Join(strings.Fields(reason), " ")
	s.Counters.result(code).Add(1)
	s.refusals.WarnKey(log, fmt.Sprint(code, reason), "query refused", "status", code, "reason", reason)
	frontdoor.CloseAfter(w)
	if code == http.StatusUnauthorized && strings.HasPrefix(reason, "token") {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pcapsync"`)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintln(w, reason)
}

// serve runs the query and streams its output, the result in the
// trailers.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, q *query.Prepared, log *slog.Logger) {
	c := &s.Counters
	c.Active.Add(1)
	defer c.Active.Add(-1)
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Content-Disposition", `attachment; filename="pcapsync-query.pcapng"`)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Trailer", TrailerResult+", "+TrailerError)
	start := time.Now()
	out := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, sent: &c.Bytes}
	res, err := s.run(r.Context(), q, out)
	c.Packets.Add(uint64(res.Packets))
	attrs := []any{"packets", res.Packets, "bytes", out.n, "files_read", res.FilesRead,
		"duration", time.Since(start).Round(time.Millisecond)}
	switch {
	case err == nil:
		c.OK.Add(1)
		log.Info("query served", attrs...)
	case r.Context().Err() != nil && !s.stopping():
		c.Canceled.Add(1)
		log.Info("query canceled: the client went away", append(attrs, "err", err)...)
	default:
		c.Failed.Add(1)
		if s.stopping() {
			err = fmt.Errorf("the server is stopping: %w", err)
		}
		log.Warn("query failed", append(attrs, "err", err)...)
	}
	if err != nil && out.n == 0 { // nothing sent yet: an answer of its own
		for k := range h {
			delete(h, k)
		}
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprintln(w, s.public(err))
		return
	}
	for i := range res.Coverage { // the reasons without the server's paths
		for j, u := range res.Coverage[i].Unusable {
			res.Coverage[i].Unusable[j].Reason = s.public(errors.New(u.Reason))
		}
	}
	if b, jerr := json.Marshal(res); jerr == nil {
		h.Set(TrailerResult, string(b))
	}
	if err != nil {
		h.Set(TrailerError, s.public(err))
	}
}

// absPath finds an absolute path in an error's text: a '/' at the start
// or after a space, quote, parenthesis, '=' or ':', followed by a name.
var absPath = regexp.MustCompile(`(^|[\s"'(=:])/[^\s/]`)

// public returns err's text for the client, on one line: the paths
// below the output root relative to it; if an absolute path of the
// server remains, a generic text instead (the log has the error).
func (s *Server) public(err error) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	roots := []string{filepath.Clean(s.cfg.Dir)}
	if abs, aerr := filepath.Abs(s.cfg.Dir); aerr == nil && abs != roots[0] {
		roots = append(roots, abs)
	}
	for _, r := range roots {
		if r == "/" || r == "." {
			continue
		}
		msg = strings.ReplaceAll(msg, r+"/", "")
		msg = regexp.MustCompile(regexp.QuoteMeta(r)+`($|[\s"':)])`).ReplaceAllString(msg, ".$1")
	}
	if absPath.MatchString(msg) {
		return "the query failed on the server (its log has the reason)"
	}
	return msg
}

// stopping reports whether Run is stopping the queries.
func (s *Server) stopping() bool {
	select {
	case <-s.base.Done():
		return true
	default:
		return false
	}
}

// streamWriter writes a query's output to the client as it comes (every
// piece of 256 KiB flushed), with a deadline renewed before each: a client that
// takes nothing for timeout is cut off, a slow one that keeps taking is
// not.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	n       int64
	sent    *atomic.Uint64
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	return WritePieces(sw.rc, sw.timeout, p, func(b []byte) (int, error) {
		n, err := sw.w.Write(b)
		sw.n += int64(n)
		sw.sent.Add(uint64(n))
		if err == nil {
			err = sw.rc.Flush()
		}
		return n, err
	})
}

// StreamPiece is what a client of a query's output must take within
// the write timeout: WritePieces renews the deadline for each piece.
const StreamPiece = 256 << 10

// WritePieces writes p with write in pieces of StreamPiece, the write
// deadline of rc set timeout ahead before each: a client that takes
// nothing for timeout is cut off, a slow one that keeps taking is not,
// however large the query's writes.
func WritePieces(rc *http.ResponseController, timeout time.Duration, p []byte, write func([]byte) (int, error)) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), StreamPiece)
		rc.SetWriteDeadline(time.Now().Add(timeout))
		m, err := write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// slogWriter sends net/http's own error lines (a malformed request, a
// connection reset) to the log, at debug: refusals are logged by the
// handler.
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.log.Debug("query listener: " + strings.TrimSpace(string(p)))
	return len(p), nil
}
