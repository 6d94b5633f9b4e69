package queryhttp

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/units"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Params is a query as a client sends it: the selection flags of
// pcapsync query, the times unparsed (a relative time is resolved on
// the server's clock).
type Params struct {
	Agents, Ifaces []string
	Since, Until   string
	Filter         string
	CommunityID    string // "1:" and 28 base64 characters: one flow's packets
	Count          int64  // 0: no limit
	MaxBytes       int64  // 0: no limit
}

// paramNames are the parameters of GET /query, in the order an error
// lists them.
var paramNames = []string{"agent", "iface", "since", "until", "filter", "community_id", "count", "max_bytes"}

// MaxParamBytes bounds the parameters of a query sent as a POST body. In
// the URL of a GET, the listener's bound on a request's headers
// (frontdoor.DefaultMaxHeaderBytes, 64 KiB) applies: Fetch sends a
// query longer than MaxGetQuery as a POST.
const MaxParamBytes = 1 << 20

// MaxGetQuery is the longest query Fetch sends in a GET's URL.
const MaxGetQuery = 8 << 10

// MaxPatterns bounds the agent patterns of one query, and its interface
// patterns: each agent directory is matched against every one.
const MaxPatterns = 1 << 14

// maxCommunityID bounds a community_id parameter quoted in an error.
const maxCommunityID = 64

// formType is the media type of a POST's parameters.
const formType = "application/x-www-form-urlencoded"

// readParams reads a request's parameters: a GET's URL query, or a
// POST's body (of formType, at most MaxParamBytes, read within
// timeout, the URL then without a query), parsed by parseValues. It
// returns the status of a refusal (400, 413, 415) with its error.
func readParams(w http.ResponseWriter, r *http.Request, timeout time.Duration) (url.Values, int, error) {
	if r.Method != http.MethodPost {
		v, err := parseValues(r.URL.RawQuery)
		return v, http.StatusBadRequest, err
	}
	if r.URL.RawQuery != "" {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: a POST's parameters go in its body, not in the URL", ErrBadRequest)
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != formType {
		return nil, http.StatusUnsupportedMediaType, fmt.Errorf("%w: a POST's body is of type %s", ErrBadRequest, formType)
	}
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(timeout))
	// No read deadline once the body is read, while the answer streams
	// (net/http clears it too when it sees the body's end).
	defer rc.SetReadDeadline(time.Time{})
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxParamBytes))
	if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("%w: parameters of more than %d bytes", ErrBadRequest, MaxParamBytes)
	}
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("%w: reading the parameters: %w", ErrBadRequest, err)
	}
	v, err := parseValues(string(b))
	return v, http.StatusBadRequest, err
}

// parseValues reads a URL query or a form body strictly, unlike
// url.ParseQuery, which drops what it cannot read and so widens the
// selection: every pair is NAME=VALUE, separated by '&' (an empty one,
// as in "a=1&&b=2", is skipped), percent-encoded ('+' is a space);
// a pair without '=', with a ';', with a bad escape or with a NUL
// byte in its name or value is an error wrapping ErrBadRequest that
// names it.
func parseValues(raw string) (url.Values, error) {
	v := url.Values{}
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %s: no '=' (want NAME=VALUE)", ErrBadRequest, quotePair(pair))
		}
		if strings.Contains(pair, ";") {
			return nil, fmt.Errorf("%w: %s: ';' separates no parameters: use '&', or %%3B in a value", ErrBadRequest, quotePair(pair))
		}
		key, err := url.QueryUnescape(k)
		if err == nil {
			val, err = url.QueryUnescape(val)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadRequest, quotePair(pair), err)
		}
		if strings.IndexByte(key, 0) >= 0 || strings.IndexByte(val, 0) >= 0 {
			return nil, fmt.Errorf("%w: %s: a NUL byte (%%00)", ErrBadRequest, quotePair(pair))
		}
		v[key] = append(v[key], val)
	}
	return v, nil
}

// quotePair is a parameter as an error names it: quoted, its first 64
// bytes.
func quotePair(pair string) string {
	const n = 64
	if len(pair) > n {
		return "parameter " + strconv.Quote(pair[:n]) + "..."
	}
	return "parameter " + strconv.Quote(pair)
}

// selection is the query's parameters for the log, at most 1 KiB.
func selection(v url.Values) string {
	s := v.Encode()
	if len(s) > 1<<10 {
		s = s[:1<<10] + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return s
}

// Values returns p as the parameters of GET /query.
func (p Params) Values() url.Values {
	v := url.Values{}
	for _, a := range p.Agents {
		v.Add("agent", a)
	}
	for _, i := range p.Ifaces {
		v.Add("iface", i)
	}
	for _, kv := range [...][2]string{{"since", p.Since}, {"until", p.Until}, {"filter", p.Filter}, {"community_id", p.CommunityID}} {
		if kv[1] != "" {
			v.Set(kv[0], kv[1])
		}
	}
	if p.Count != 0 {
		v.Set("count", strconv.FormatInt(p.Count, 10))
	}
	if p.MaxBytes != 0 {
		v.Set("max_bytes", strconv.FormatInt(p.MaxBytes, 10))
	}
	return v
}

// parseQuery reads the parameters of GET /query into a query.Config
// over dir, times relative to now. Every error wraps ErrBadRequest; one
// of query.Config.Validate carries its message as it is, as the CLI
// shows it.
func parseQuery(v url.Values, dir string, now time.Time) (query.Config, error) {
	cfg := query.Config{Dir: dir, Threads: QueryThreads}
	for k, vs := range v {
		switch {
		case !slices.Contains(paramNames, k):
			return cfg, fmt.Errorf("%w: unknown parameter %q (want %s)", ErrBadRequest, k, strings.Join(paramNames, ", "))
		case len(vs) > 1 && k != "agent" && k != "iface":
			return cfg, fmt.Errorf("%w: %s given %d times", ErrBadRequest, k, len(vs))
		}
	}
	cfg.Agents, cfg.Ifaces = splitList(v["agent"]), splitList(v["iface"])
	for _, l := range []struct {
		name string
		n    int
	}{{"agent", len(cfg.Agents)}, {"iface", len(cfg.Ifaces)}} {
		if l.n > MaxPatterns {
			return cfg, fmt.Errorf("%w: %s: %d patterns, at most %d", ErrBadRequest, l.name, l.n, MaxPatterns)
		}
	}
	for _, a := range cfg.Agents {
		if err := checkAgent(a); err != nil {
			return cfg, fmt.Errorf("%w: agent: %w", ErrBadRequest, err)
		}
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &cfg.Since}, {"until", &cfg.Until}} {
		if s := v.Get(t.name); s != "" {
			tm, err := query.ParseTime(s, now)
			if err != nil {
				return cfg, fmt.Errorf("%w: %s: %w", ErrBadRequest, t.name, err)
			}
			*t.dst = tm
		}
	}
	cfg.Filter = v.Get("filter")
	// A client's filter names no host: the server would look the name
	// up inside libpcap's one-at-a-time compiler, every other query's
	// compile waiting on its resolver.
	if err := query.CheckRemoteFilter(cfg.Filter); err != nil {
		return cfg, fmt.Errorf("%w: filter: %w", ErrBadRequest, err)
	}
	// Validate takes "1:" and 28 base64 characters only; a longer value
	// is refused before an error quotes it.
	if cfg.CommunityID = v.Get("community_id"); len(cfg.CommunityID) > maxCommunityID {
		return cfg, fmt.Errorf("%w: community_id of %d bytes: want 1: and 28 base64 characters", ErrBadRequest, len(cfg.CommunityID))
	}
	if s := v.Get("count"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("%w: count %q: want a whole number", ErrBadRequest, s)
		}
		cfg.Count = n
	}
	if s := v.Get("max_bytes"); s != "" {
		n, err := units.ParseSize(s)
		if err != nil {
			return cfg, fmt.Errorf("%w: max_bytes: %w", ErrBadRequest, err)
		}
		cfg.MaxBytes = n
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return cfg, nil
}

// splitList splits comma-separated values, as the CLI's list flags do,
// dropping empty items.
func splitList(vs []string) []string {
	var out []string
	for _, v := range vs {
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
	}
	return out
}

// checkAgent accepts an agent name (wire.ValidateName) or a glob that
// cannot name anything but an agent directory of the root.
func checkAgent(p string) error {
	if !strings.ContainsAny(p, `*?[\`) {
		return wire.ValidateName(p)
	}
	if strings.ContainsAny(p, "/\x00") || strings.HasPrefix(p, ".") {
		return fmt.Errorf("pattern %q: an agent glob matches names below the output root only (no '/', no leading '.')", p)
	}
	return nil
}

// ParseValues reads a URL query or a form body as GET /query does
// (parseValues: strict, every error wrapping ErrBadRequest).
func ParseValues(raw string) (url.Values, error) { return parseValues(raw) }

// ParseQuery reads the parameters of GET /query into a query.Config
// over dir, times relative to now, with GET /query's names, bounds and
// checks: for other front ends of the same read side (the console).
// Every error wraps ErrBadRequest.
func ParseQuery(v url.Values, dir string, now time.Time) (query.Config, error) {
	return parseQuery(v, dir, now)
}

// ParseFlows reads the parameters of GET /flows into a flowquery.Config
// over dir, as ParseQuery. Every error wraps ErrBadRequest.
func ParseFlows(v url.Values, dir string, now time.Time) (flowquery.Config, error) {
	return parseFlows(v, dir, now)
}
