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
	keys, err := groupKeys(group)
	if err != nil {
		return nil, err
	}
	var val func(t *Talker) uint64
	switch measure {
	case ByBytes:
		val = func(t *Talker) uint64 { return t.Bytes }
	case ByPackets:
		val = func(t *Talker) uint64 { return t.Packets }
	case ByFlows:
		val = func(t *Talker) uint64 { return t.Flows }
	default:
		return nil, fmt.Errorf("%w: top by %q: want bytes, packets or flows", ErrConfig, measure)
	}
	sums := map[string]*Talker{}
	var buf [2]string
	for i := range fs {
		f := &fs[i]
		for _, k := range keys(f, buf[:0]) {
			t := sums[k]
			if t == nil {
				t = &Talker{Key: k}
				sums[k] = t
			}
			t.Flows++
			t.Packets += f.TotalPackets()
			t.Bytes += f.TotalBytes()
		}
	}
	out := make([]Talker, 0, len(sums))
	for _, t := range sums {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Talker) int { return cmp.Or(cmp.Compare(val(&b), val(&a)), cmp.Compare(a.Key, b.Key)) })
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out, nil
}

func groupKeys(group string) (func(f *Flow, dst []string) []string, error) {
	host := func(f *Flow, src bool) string {
		k := f.Key
		k.Flags &^= flow.FlagPorts
		return Endpoint(&k, src)
	}
	switch group {
	case GroupHost:
		return func(f *Flow, dst []string) []string {
			a, b := host(f, true), host(f, false)
			if a == b {
				return append(dst, a)
			}
			return append(dst, a, b)
		}, nil
	case GroupPair:
		return func(f *Flow, dst []string) []string {
			a, b := host(f, true), host(f, false)
			if bytes.Compare(f.Key.Src[:], f.Key.Dst[:]) > 0 {
				a, b = b, a
			}
			return append(dst, a+" <-> "+b)
		}, nil
	case GroupPort:
		return func(f *Flow, dst []string) []string {
			p := ProtoName(&f.Key)
			if f.Key.Flags&flow.FlagPorts != 0 {
				p += "/" + strconv.Itoa(int(f.Key.DstPort))
			}
			return append(dst, p)
		}, nil
	case GroupAgent:
		return func(f *Flow, dst []string) []string { return append(dst, f.Agent) }, nil
	}
	return nil, fmt.Errorf("%w: top per %q: want host, pair, port or agent", ErrConfig, group)
}
