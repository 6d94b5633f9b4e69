package agent

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestInfoOnlyWhenWelcomed: the agent tells its version (an Info frame
// right after the Welcome) only to a collector whose Welcome carries
// wire.FeatureInfo. A collector of before (its Welcome lists codecs
// only) would end the connection at the unknown frame type, so it must
// see the hello and then batches, nothing else.
func TestInfoOnlyWhenWelcomed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 50, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	const oldCodecs = 1<<wire.CodecNone | 1<<wire.CodecLZ4 | 1<<wire.CodecS2 | 1<<wire.CodecZstd
	for _, tc := range []struct {
		name    string
		codecs  uint32
		version string
		want    string // "" wants no Info frame
	}{
		{"old collector", oldCodecs, "9.9.9", ""},
		{"new collector", oldCodecs | wire.FeatureInfo, "9.9.9", "9.9.9"},
		{"new collector, no version", oldCodecs | wire.FeatureInfo, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			a, err := New(Config{Collectors: []string{ln.Addr().String()}, Name: "v1", ReadFile: path, Insecure: true,
				Version: tc.version, ShutdownTimeout: 10 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := runAsync(ctx, a)
			defer func() { cancel(); <-done }()
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fr := wire.NewFrameReader(c, wire.Limits{})
			if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeHello {
				t.Fatalf("hello: %s %v", h.Type, err)
			}
			c.Write(wire.AppendWelcome(nil, wire.Welcome{MaxFrame: 16 << 20, Codecs: tc.codecs}))
			var got []wire.Info
			for {
				h, p, err := fr.Next()
				if err != nil {
					t.Fatal(err)
				}
				if h.Type == wire.TypeBatch {
					break
				}
				if h.Type != wire.TypeInfo {
					continue
				}
				in, err := wire.ParseInfo(p)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, in)
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("sent %d info frames (%+v), want none", len(got), got)
			case tc.want != "" && (len(got) != 1 || got[0].Version != tc.want):
				t.Fatalf("info frames %+v, want one with version %q", got, tc.want)
			}
		})
	}
}
