package capgen

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestRoundTrip: every link type's capture reads back through pcapfile
// as generated (bytes, original lengths, timestamps, link type), in
// either byte order, and the same Config makes the same capture.
func TestRoundTrip(t *testing.T) {
	for i, l := range Links {
		t.Run(l.Name, func(t *testing.T) {
			cfg := Config{Seed: 7, Index: i, Link: l, Packets: 300, Start: 1_700_000_000e9}
			c := Generate(cfg)
			if again := Generate(cfg); !reflect.DeepEqual(c, again) {
				t.Fatal("the same Config made two captures")
			}
			var buf bytes.Buffer
			if err := c.Write(&buf); err != nil {
				t.Fatal(err)
			}
			r, err := pcapfile.NewReader(&buf, nil)
			if err != nil {
				t.Fatal(err)
			}
			cut, back := 0, 0
			for j, want := range c.Packets {
				p, err := r.ReadPacket()
				if err != nil {
					t.Fatalf("packet %d: %v", j, err)
				}
				if p.Timestamp != want.TS || p.OrigLen != want.OrigLen || !bytes.Equal(p.Data, want.Data) {
					t.Fatalf("packet %d: read ts %d orig %d len %d, wrote ts %d orig %d len %d", j, p.Timestamp, p.OrigLen, len(p.Data), want.TS, want.OrigLen, len(want.Data))
				}
				if int(want.OrigLen) > len(want.Data) {
					cut++
				}
				if j > 0 && want.TS < c.Packets[j-1].TS {
					back++
				}
			}
			if got := r.Interfaces()[0].LinkType; uint32(got) != l.Type {
				t.Errorf("link type %d, want %d", got, l.Type)
			}
			if cut == 0 || back == 0 {
				t.Errorf("%d packets cut, %d going back in time: want some of each", cut, back)
			}
			if d := os.Getenv("CAPGEN_OUT"); d != "" {
				if err := c.WriteFile(filepath.Join(d, c.Name+".pcap")); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestRandomFilters: random filters use only the capture's values and
// are reproducible.
func TestRandomFilters(t *testing.T) {
	c := Generate(Config{Seed: 3, Link: Links[0], Packets: 200})
	a, b := Random(c, 9, 50), Random(c, 9, 50)
	if !reflect.DeepEqual(a, b) || len(a) != 50 {
		t.Fatalf("Random is not reproducible or short: %d filters", len(a))
	}
}
