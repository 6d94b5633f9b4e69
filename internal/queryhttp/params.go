package queryhttp

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

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
	Count          int64 // 0: no limit
	MaxBytes       int64 // 0: no limit
}

// paramNames are the parameters of GET /query, in the order an error
// lists them.
var paramNames = []string{"agent", "iface", "since", "until", "filter", "count", "max_bytes"}

// Values returns p as the parameters of GET /query.
func (p Params) Values() url.Values {
	v := url.Values{}
	for _, a := range p.Agents {
		v.Add("agent", a)
	}
	for _, i := range p.Ifaces {
		v.Add("iface", i)
	}
	for _, kv := range [...][2]string{{"since", p.Since}, {"until", p.Until}, {"filter", p.Filter}} {
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
	cfg := query.Config{Dir: dir}
	for k, vs := range v {
		switch {
		case !slices.Contains(paramNames, k):
			return cfg, fmt.Errorf("%w: unknown parameter %q (want %s)", ErrBadRequest, k, strings.Join(paramNames, ", "))
		case len(vs) > 1 && k != "agent" && k != "iface":
			return cfg, fmt.Errorf("%w: %s given %d times", ErrBadRequest, k, len(vs))
		}
	}
	cfg.Agents, cfg.Ifaces = splitList(v["agent"]), splitList(v["iface"])
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
