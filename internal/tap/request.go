package tap

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Proto starts every request line and every error reply.
const Proto = "PCAPSYNC-TAP/1"

// MaxRequest bounds a request line, its newline included.
const MaxRequest = 4096

// AllAgents is the agent name that selects every agent.
const AllAgents = "*"

// Selection says which packets a client is sent.
type Selection struct {
	Agent  string // "" every agent
	Iface  string // "" every interface (of the selected agents)
	Filter string // tcpdump (pcap-filter) syntax, run on the collector; "" everything
}

// String is the selection as a log and SHB comment shows it.
func (s Selection) String() string {
	a, i := s.Agent, s.Iface
	if a == "" {
		a = AllAgents
	}
	if i == "" {
		i = "*"
	}
	out := "agent=" + a + " iface=" + i
	if s.Filter != "" {
		out += " filter=" + s.Filter
	}
	return out
}

// Request is a client's request line:
//
//	PCAPSYNC-TAP/1 [agent=NAME|*] [iface=NAME] [token=TOKEN] [filter=EXPR...]\n
//
// Words are separated by spaces; values are percent-encoded where they
// hold a space, '%' or a control character (FormatRequest does it).
// filter= comes last and takes the rest of the line as it is. Each key at
// most once; unknown keys are an error, so that a typo never widens a
// selection. Fields left out keep the listener's default (see Apply).
type Request struct {
	Agent  string // "" not given; AllAgents for every agent
	Iface  string // "" not given
	Filter string // "" not given
	Token  string
}

// Apply returns def narrowed or replaced by r: an agent given replaces
// the default's agent and interface; an interface or filter given
// replaces the default's.
func (r Request) Apply(def Selection) Selection {
	sel := def
	if r.Agent != "" {
		sel.Agent, sel.Iface = r.Agent, ""
		if r.Agent == AllAgents {
			sel.Agent = ""
		}
	}
	if r.Iface != "" {
		sel.Iface = r.Iface
	}
	if r.Filter != "" {
		sel.Filter = r.Filter
	}
	return sel
}

// ParseRequest parses a request line, without or with its "\n" (and a
// "\r" before it).
func ParseRequest(line string) (Request, error) {
	var r Request
	line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
	if len(line)+1 > MaxRequest {
		return r, fmt.Errorf("%w: longer than %d bytes", ErrBadRequest, MaxRequest)
	}
	rest, ok := strings.CutPrefix(line, Proto)
	if !ok || rest != "" && rest[0] != ' ' {
		return r, fmt.Errorf("%w: does not start with %q", ErrBadRequest, Proto)
	}
	seen := map[string]bool{}
	for {
		rest = strings.TrimLeft(rest, " ")
		if rest == "" {
			break
		}
		if f, ok := strings.CutPrefix(rest, "filter="); ok {
			if r.Filter = strings.TrimSpace(f); r.Filter == "" {
				return r, fmt.Errorf("%w: empty filter", ErrBadRequest)
			}
			break
		}
		word, tail, _ := strings.Cut(rest, " ")
		rest = tail
		k, v, ok := strings.Cut(word, "=")
		if !ok {
			return r, fmt.Errorf("%w: %q is not KEY=VALUE", ErrBadRequest, word)
		}
		if seen[k] {
			return r, fmt.Errorf("%w: %s given twice", ErrBadRequest, k)
		}
		seen[k] = true
		v, err := url.PathUnescape(v)
		if err != nil {
			return r, fmt.Errorf("%w: %s: %w", ErrBadRequest, k, err)
		}
		if v == "" {
			return r, fmt.Errorf("%w: empty %s", ErrBadRequest, k)
		}
		switch k {
		case "agent":
			if v != AllAgents {
				if err := wire.ValidateName(v); err != nil {
					return r, fmt.Errorf("%w: agent: %w", ErrBadRequest, err)
				}
			}
			r.Agent = v
		case "iface":
			r.Iface = v
		case "token":
			r.Token = v
		default:
			return r, fmt.Errorf("%w: unknown key %q (want agent, iface, token, filter)", ErrBadRequest, k)
		}
	}
	return r, nil
}

// FormatRequest returns r as a request line, "\n" included.
func FormatRequest(r Request) string {
	var b strings.Builder
	b.WriteString(Proto)
	for _, kv := range [...][2]string{{"agent", r.Agent}, {"iface", r.Iface}, {"token", r.Token}} {
		if kv[1] != "" {
			b.WriteString(" " + kv[0] + "=" + escape(kv[1]))
		}
	}
	if r.Filter != "" {
		b.WriteString(" filter=" + strings.Join(strings.Fields(r.Filter), " "))
	}
	b.WriteString("\n")
	return b.String()
}

// escape percent-encodes what would end a word or the line.
func escape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c == '%' || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// ErrorLine is the reply to a refused client: Proto, "ERROR", the reason
// on one line.
func ErrorLine(reason string) string {
	return Proto + " ERROR " + strings.Join(strings.Fields(reason), " ") + "\n"
}
