package collector

import (
	"testing"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestAgentVersion: the Welcome advertises wire.FeatureInfo; an agent
// that answers with an Info frame shows its version in AgentStats, one
// that sends none (an agent of before) shows "", and a hostile Info
// frame ends its connection like any malformed frame, with nothing
// recorded.
func TestAgentVersion(t *testing.T) {
	ts := startServer(t, Config{Insecure: true})
	for _, tc := range []struct {
		name, agent string
		info        []byte // sent right after the Welcome; nil: none
		want        string
		fails       bool
	}{
		{"new agent", "new1", wire.AppendInfo(nil, &wire.Info{Version: "2.0.0 (abc)"}), "2.0.0 (abc)", false},
		{"old agent", "old1", nil, "", false},
		{"empty info", "empty1", wire.AppendInfo(nil, &wire.Info{}), "", false},
		{"hostile info", "bad1", append(wire.AppendHeader(nil, wire.TypeInfo, 0, 4), 1, wire.InfoVersion, 1, 0x07), "", true},
		{"truncated info", "trunc", append(wire.AppendHeader(nil, wire.TypeInfo, 0, 3), 1, wire.InfoVersion, 9), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dial(t, ts.addr, nil, tc.agent, "")
			h, p, err := s.fr.Next()
			if err != nil || h.Type != wire.TypeWelcome {
				t.Fatalf("handshake: %s, %v", h.Type, err)
			}
			if w, err := wire.ParseWelcome(p); err != nil || w.Codecs&wire.FeatureInfo == 0 {
				t.Fatalf("welcome %+v, %v: want FeatureInfo set", w, err)
			}
			if tc.info != nil {
				if _, err := s.conn.Write(tc.info); err != nil {
					t.Fatal(err)
				}
			}
			if tc.fails {
				if _, _, err := s.fr.Next(); err == nil {
					t.Fatal("the collector answered a malformed info frame")
				}
			} else {
				s.deliver(t, 2)
			}
			var got *AgentStats
			for _, st := range ts.core.AgentStats() {
				if st.Name == tc.agent {
					got = &st
				}
			}
			if got == nil || got.Version != tc.want {
				t.Fatalf("AgentStats %+v, want version %q", got, tc.want)
			}
		})
	}
}
