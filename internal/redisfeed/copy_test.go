package redisfeed

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// copyIfaces: Ethernet and raw IPv4, so that a filter runs on two link
// types.
var copyIfaces = []wire.Interface{
	{Name: "eth0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535},
	{Name: "tun0", LinkType: gen.LinkTypeRaw, SnapLen: 65535},
}

// copyEvent is a batch of generated packets seq from..to-1, alternating
// between the two interfaces; gen.Frame sets the IP ID to the sequence
// number.
func copyEvent(t testing.TB, agent string, seq, from, to uint64) *collector.BatchEvent {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	buf := make([]byte, 120)
	for i := from; i < to; i++ {
		ifx := uint32(i % 2)
		e.Append(int64(1_767_225_600_000_000_000+i*1000), ifx, uint32(len(buf)), gen.Frame(buf, copyIfaces[ifx].LinkType, 1, i))
	}
	f := e.Finish(seq)
	b, err := wire.ParseBatch(0, f[wire.HeaderSize:], wire.BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return &collector.BatchEvent{Agent: agent, Host: "h1", Ifaces: copyIfaces, Batch: &b}
}

type copiedPacket struct {
	iface string
	seq   uint64
}

// readCopy reads Copy's pcapng output.
func readCopy(t *testing.T, raw []byte) (pkts []copiedPacket) {
	t.Helper()
	r, err := pcapfile.NewReader(bytes.NewReader(raw), nil)
	if err != nil {
		t.Fatalf("reading Copy's output: %v", err)
	}
	var p pcapfile.Packet
	for {
		if err := r.ReadInto(&p); err != nil {
			if err != io.EOF {
				t.Fatalf("Copy's output after %d packets: %v", len(pkts), err)
			}
			return pkts
		}
		ifc := r.Interfaces()[p.Interface]
		_, seq, ok, err := gen.Parse(p.Data, ifc.LinkType)
		if err != nil || !ok {
			t.Fatalf("packet %d: not generated (%v)", len(pkts), err)
		}
		pkts = append(pkts, copiedPacket{ifc.Name, seq})
	}
}

// TestCopy: Copy writes the agent's stream as pcapng, interfaces named
// as in the collector's files, selected by interface and filter, and
// stops after Count packets or Idle.
func TestCopy(t *testing.T) {
	srv := redistest.Start(t)
	f := newFeed(t, Config{URL: srv.URL()})
	for b := range 10 {
		f.Batch(copyEvent(t, "cp", uint64(b+1), uint64(b*10), uint64(b*10+10)))
		f.Batch(copyEvent(t, "other", uint64(b+1), 1000, 1010))
	}
	if err := f.Close(context.Background()); err != nil || f.Counters.Published.Load() != 20 {
		t.Fatalf("published %d of 20 batches: %v", f.Counters.Published.Load(), err)
	}
	base := CopyConfig{URL: srv.URL(), Agent: "cp", From: time.Hour, Idle: 300 * time.Millisecond, Logger: quietLogger()}
	for _, tt := range []struct {
		name string
		edit func(*CopyConfig)
		want func(seq uint64) bool
	}{
		{"all", func(*CopyConfig) {}, func(uint64) bool { return true }},
		{"count", func(c *CopyConfig) { c.Count, c.Idle = 15, 0 }, func(s uint64) bool { return s < 15 }},
		{"iface", func(c *CopyConfig) { c.Iface = "tun0" }, func(s uint64) bool { return s%2 == 1 }},
		// The same filter on Ethernet and raw IPv4 frames.
		{"filter", func(c *CopyConfig) { c.Filter = "udp and ip[4:2] < 25" }, func(s uint64) bool { return s < 25 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.edit(&cfg)
			var out bytes.Buffer
			if err := Copy(t.Context(), cfg, &out); err != nil {
				t.Fatalf("Copy: %v", err)
			}
			got := readCopy(t, out.Bytes())
			var want []copiedPacket
			for s := range uint64(100) {
				if tt.want(s) {
					want = append(want, copiedPacket{"cp:" + copyIfaces[s%2].Name, s})
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("copied %v,\nwant %v", got, want)
			}
			if !bytes.Contains(out.Bytes(), []byte("pcapsync agent cp, from Redis stream "+Key(DefaultPrefix, "cp"))) {
				t.Error("the section header's comment does not name the agent and the stream")
			}
		})
	}
}

// TestCopyFilterLinkType: a filter that does not apply to a link type
// in the stream ends Copy with an error naming it, after the section
// header.
func TestCopyFilterLinkType(t *testing.T) {
	srv := redistest.Start(t)
	f := newFeed(t, Config{URL: srv.URL()})
	f.Batch(copyEvent(t, "lt", 1, 0, 10))
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// "ether" does not compile for raw IP (tun0).
	err := Copy(t.Context(), CopyConfig{URL: srv.URL(), Agent: "lt", Filter: "ether broadcast or udp", From: time.Hour, Idle: 300 * time.Millisecond, Logger: quietLogger()}, &out)
	if err == nil || !strings.Contains(err.Error(), "tun0") {
		t.Fatalf("Copy = %v, want an error naming tun0", err)
	}
}

func TestCopyConfigValidate(t *testing.T) {
	base := CopyConfig{URL: "redis://127.0.0.1:1", Agent: "a"}
	for _, tt := range []struct {
		name string
		edit func(*CopyConfig)
		want string
	}{
		{"ok", func(*CopyConfig) {}, ""},
		{"no url", func(c *CopyConfig) { c.URL = "" }, "no URL"},
		{"bad url", func(c *CopyConfig) { c.URL = "http://x" }, "CopyConfig.URL"},
		{"no agent", func(c *CopyConfig) { c.Agent = "" }, "no agent"},
		{"bad agent", func(c *CopyConfig) { c.Agent = "../x" }, "agent"},
		{"negative count", func(c *CopyConfig) { c.Count = -1 }, "count"},
		{"negative from", func(c *CopyConfig) { c.From = -time.Second }, "CopyConfig.From"},
		{"bad filter", func(c *CopyConfig) { c.Filter = "udp port 99999" }, "CopyConfig.Filter"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.edit(&c)
			err := c.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
}
