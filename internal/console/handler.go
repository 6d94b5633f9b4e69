package console

import (
	"crypto/rand"
	"embed"
	"encoding/base64"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// CSP is the Content-Security-Policy of every answer: the console's own
// origin only, no inline script or style, no framing.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// CookieName is the session cookie's name.
const CookieName = "pcapsync_session"

// maxLoginBody bounds POST /login's body.
const maxLoginBody = 4 << 10

//go:embed assets
var assets embed.FS

// pages are the pages behind the login, by path.
var pages = map[string]string{
	"/agents":   "agents.html",
	"/flows":    "flows.html",
	"/packets":  "packets.html",
	"/timeline": "timeline.html",
	"/flow":     "flow.html",
}

// Handler serves the console (package doc).
type Handler struct {
	cfg    Config
	log    *slog.Logger
	src    Source        // Config.Source, or the local root's
	static http.Handler  // assets/static at /static/
	vendor http.Handler  // assets/vendor (third-party, pinned) at /vendor/
	slots  chan struct{} // a token per API request reading the root
	logins *loginLimiter // failed logins per source address

	mu       sync.Mutex
	sessions map[string]time.Time // id -> expiry
}

// New validates cfg and returns its Handler.
func New(cfg Config) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sub, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	static := http.StripPrefix("/static", http.FileServerFS(sub))
	vsub, err := fs.Sub(assets, "assets/vendor")
	if err != nil {
		return nil, err
	}
	vendor := http.StripPrefix("/vendor", http.FileServerFS(vsub))
	src := cfg.Source
	if src == nil {
		src = &local{dir: cfg.Dir, status: cfg.Status, log: cfg.Logger}
	}
	return &Handler{cfg: cfg, log: cfg.Logger, src: src, static: static, vendor: vendor, sessions: map[string]time.Time{}, logins: newLoginLimiter(),
		slots: make(chan struct{}, cfg.MaxQueries)}, nil
}

// ServeHTTP answers one request: the security headers, then the login,
// the static assets, or (authenticated) a page or the API.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	p := r.URL.Path
	if p == "/login" {
		h.login(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		http.Error(w, "the console is read-only: GET only (POST /login aside)", http.StatusMethodNotAllowed)
		return
	}
	switch { // the assets are no secret: the login page needs them
	case strings.HasPrefix(p, "/static/"):
		h.static.ServeHTTP(w, r)
		return
	case strings.HasPrefix(p, "/vendor/"):
		h.vendor.ServeHTTP(w, r)
		return
	}
	if !h.authenticated(r) {
		if strings.HasPrefix(p, "/api/") {
			http.Error(w, "not logged in: log in at /login (token) or present a client certificate", http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	switch {
	case p == "/":
		http.Redirect(w, r, "/agents", http.StatusSeeOther)
	case strings.HasPrefix(p, "/api/"):
		h.api(w, r)
	case pages[p] != "":
		h.page(w, r, pages[p])
	default:
		http.NotFound(w, r)
	}
}

// page serves an embedded page.
func (h *Handler) page(w http.ResponseWriter, r *http.Request, name string) {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

// open reports whether the console admits every client: no token and
// no client certificates to ask for.
func (h *Handler) open(c queryhttp.Client) bool {
	return h.cfg.Token == "" && !c.CertRequired
}

// authenticated reports whether r comes with a verified client
// certificate or a live session, or needs neither.
func (h *Handler) authenticated(r *http.Request) bool {
	c := queryhttp.ClientOf(r)
	if c.Cert || h.open(c) {
		return true
	}
	ck, err := r.Cookie(CookieName)
	if err != nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	exp, ok := h.sessions[ck.Value]
	if ok && time.Now().After(exp) {
		delete(h.sessions, ck.Value)
		return false
	}
	return ok
}

// login serves the login page (GET) and takes its token (POST): the
// right one sets a session cookie and goes to the agents page, a wrong
// one back to the form.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		h.page(w, r, "login.html")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "the login is GET or POST /login", http.StatusMethodNotAllowed)
		return
	}
	src := source(r.RemoteAddr)
	if d := h.logins.wait(src); d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
		h.log.Warn("console login refused: too many failed logins from this address", "remote", r.RemoteAddr)
		http.Error(w, "too many failed logins from your address: try again later", http.StatusTooManyRequests)
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLoginBody))
	if err != nil {
		http.Error(w, "login: a body of at most 4 KiB", http.StatusRequestEntityTooLarge)
		return
	}
	v, err := queryhttp.ParseValues(string(b))
	tok := v.Get("token")
	if err != nil || h.cfg.Token == "" || !frontdoor.TokenEqual(tok, h.cfg.Token) {
		h.logins.failed(src)
		h.log.Warn("console login refused", "remote", r.RemoteAddr)
		http.Redirect(w, r, "/login?failed=1", http.StatusSeeOther)
		return
	}
	id, ok := h.newSession()
	if !ok {
		http.Error(w, "too many sessions: try again later", http.StatusServiceUnavailable)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(h.cfg.SessionTTL / time.Second)})
	h.log.Info("console login", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/agents", http.StatusSeeOther)
}

// newSession makes a session of 32 random bytes, expired ones dropped
// first; false when MaxSessions live ones are held.
func (h *Handler) newSession() (string, bool) {
	var b [32]byte
	rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sessions) >= h.cfg.MaxSessions {
		for k, exp := range h.sessions {
			if now.After(exp) {
				delete(h.sessions, k)
			}
		}
		if len(h.sessions) >= h.cfg.MaxSessions {
			return "", false
		}
	}
	h.sessions[id] = now.Add(h.cfg.SessionTTL)
	return id, true
}
