package flowquery

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"

	"github.com/pcapsync/pcapsync/internal/flow"
)

// Group keys and measures of Top.
const (
	GroupHost  = "host"
	GroupPair  = "pair"
	GroupPort  = "port"
	GroupAgent = "agent"

	ByBytes   = "bytes"
	ByPackets = "packets"
	ByFlows   = "flows"
)

// Talker is one group of Top: its key and its totals.
type Talker struct {
	Key     string `json:"key"`
	Flows   uint64 `json:"flows"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Top sums flows per group and returns the n largest by measure
// (ties by key):
//   - host: each endpoint address (a MAC for traffic that is not IP), a
//     flow counting for both of its endpoints (top talkers);
//   - pair: the two endpoints, the smaller address first (conversations,
//     both ways, whoever initiated);
//   - port: the responder's protocol and port, "tcp/443" (services;
//     for ICMP the responder's port equivalent, "icmp/0" for echoes;
//     the protocol alone without ports);
//   - agent: the agent.
//
// n 0 returns every group.
func Top(fs []Flow, group, measure string, n int) ([]Talker, error) {
	s, err := newSummer(group, measure)
	if err != nil {
		return nil, err
	}
	for i := range fs {
		s.add(&fs[i])
	}
	return s.top(n), nil
}

// Summer sums flows per group one at a time, as Top does: Top of the
// flows added is Top(flows added, ...)'s.
type Summer struct{ s *summer }

// NewSummer returns a Summer per group by measure (Top's; another is
// ErrConfig).
func NewSummer(group, measure string) (*Summer, error) {
	s, err := newSummer(group, measure)
	if err != nil {
		return nil, err
	}
	return &Summer{s: s}, nil
}

// Add counts f (held only during the call) in its groups.
func (s *Summer) Add(f *Flow) { s.s.add(f) }

// Top returns the n largest groups so far (every one for n 0), as Top.
func (s *Summer) Top(n int) []Talker { return s.s.top(n) }

// summer sums flows per group as they come. Groups are held by a
// compact key (groupKey), named only when ranked: no allocation per
// flow, and only the groups that may rank among the n largest named.
type summer struct {
	group   string
	measure string
	at      map[groupKey]int32 // the group's sums
	sums    []Talker           // Key empty until top
	agents  map[string]uint32  // GroupAgent: the agent's number in groupKey
	names   []string           // the agents by number
}

// groupKey is a group of Top before it is named: an endpoint (host), two
// (pair: a the first named), a protocol and port (port) or an agent.
// Every field not used is zero. Two keys name one group only if they are
// equal: the names are a one-to-one function of the keys (addresses
// masked to their kind's length; the port group's kind only IP, link or
// none, as ProtoName tells them apart).
type groupKey struct {
	kind  flow.Kind
	proto uint8
	ports bool
	port  uint16
	agent uint32 // the agent's number
	a, b  [16]byte
}

func newSummer(group, measure string) (*summer, error) {
	switch group {
	case GroupHost, GroupPair, GroupPort, GroupAgent:
	default:
		return nil, fmt.Errorf("%w: top per %q: want host, pair, port or agent", ErrConfig, group)
	}
	switch measure {
	case ByBytes, ByPackets, ByFlows:
	default:
		return nil, fmt.Errorf("%w: top by %q: want bytes, packets or flows", ErrConfig, measure)
	}
	return &summer{group: group, measure: measure, at: map[groupKey]int32{}, agents: map[string]uint32{}}, nil
}

// len returns the groups held.
func (s *summer) len() int { return len(s.sums) }

// add counts f in its groups (host: both endpoints, once if they are
// the same).
func (s *summer) add(f *Flow) {
	k := &f.Key
	switch s.group {
	case GroupHost:
		a, b := groupKey{kind: k.Kind, a: addrBytes(k, &k.Src)}, groupKey{kind: k.Kind, a: addrBytes(k, &k.Dst)}
		s.count(&a, f)
		if a != b {
			s.count(&b, f)
		}
	case GroupPair:
		g := groupKey{kind: k.Kind, a: addrBytes(k, &k.Src), b: addrBytes(k, &k.Dst)}
		if bytes.Compare(k.Src[:], k.Dst[:]) > 0 {
			g.a, g.b = g.b, g.a
		}
		s.count(&g, f)
	case GroupPort:
		g := groupKey{kind: k.Kind, proto: k.Proto, ports: k.Flags&flow.FlagPorts != 0}
		switch k.Kind {
		case flow.KindIPv6:
			g.kind = flow.KindIPv4 // "tcp/443" either way
		case flow.KindLink, flow.KindNone:
			g.proto = 0 // "ether", ""
		}
		if g.ports {
			g.port = k.DstPort
		}
		s.count(&g, f)
	case GroupAgent:
		id, ok := s.agents[f.Agent]
		if !ok {
			id = uint32(len(s.names))
			s.agents[f.Agent] = id
			s.names = append(s.names, f.Agent)
		}
		g := groupKey{agent: id}
		s.count(&g, f)
	}
}

func (s *summer) count(g *groupKey, f *Flow) {
	i, ok := s.at[*g]
	if !ok {
		i = int32(len(s.sums))
		s.at[*g] = i
		s.sums = append(s.sums, Talker{})
	}
	t := &s.sums[i]
	t.Flows++
	t.Packets += f.TotalPackets()
	t.Bytes += f.TotalBytes()
}

// addrBytes returns the bytes of a the key's kind uses, the rest zero.
func addrBytes(k *flow.Key, a *[16]byte) [16]byte {
	var b [16]byte
	switch k.Kind {
	case flow.KindIPv4:
		copy(b[:4], a[:4])
	case flow.KindIPv6:
		b = *a
	case flow.KindLink:
		copy(b[:6], a[:6])
	}
	return b
}

// name returns the group's name, as Top prints it.
func (s *summer) name(g *groupKey) string {
	k := flow.Key{Kind: g.kind, Proto: g.proto, Src: g.a, Dst: g.b}
	switch s.group {
	case GroupHost:
		return Endpoint(&k, true)
	case GroupPair:
		return Endpoint(&k, true) + " <-> " + Endpoint(&k, false)
	case GroupPort:
		p := ProtoName(&k)
		if g.ports {
			p += "/" + strconv.Itoa(int(g.port))
		}
		return p
	}
	return s.names[g.agent]
}

// value returns t's measure.
func value(t *Talker, measure string) uint64 {
	switch measure {
	case ByPackets:
		return t.Packets
	case ByFlows:
		return t.Flows
	}
	return t.Bytes
}

// top returns the n largest groups (every one for n 0), ties by name.
// Only the groups whose measure is at least the n-th largest are named.
func (s *summer) top(n int) []Talker {
	keys := make([]groupKey, len(s.sums))
	for g, i := range s.at {
		keys[i] = g
	}
	idx := make([]int32, len(s.sums))
	for i := range idx {
		idx[i] = int32(i)
	}
	if n > 0 && len(idx) > n {
		slices.SortFunc(idx, func(a, b int32) int {
			return cmp.Compare(value(&s.sums[b], s.measure), value(&s.sums[a], s.measure))
		})
		least := value(&s.sums[idx[n-1]], s.measure)
		cut := n
		for cut < len(idx) && value(&s.sums[idx[cut]], s.measure) == least {
			cut++
		}
		idx = idx[:cut]
	}
	out := make([]Talker, len(idx))
	for j, i := range idx {
		out[j] = s.sums[i]
		out[j].Key = s.name(&keys[i])
	}
	slices.SortFunc(out, func(a, b Talker) int {
		return cmp.Or(cmp.Compare(value(&b, s.measure), value(&a, s.measure)), cmp.Compare(a.Key, b.Key))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
