package correlate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
)

// ngStreamOf writes a pcapng of the packets ts (ns), each on the interface
// ifaces[i%len(ifaces)], its one data byte i.
func ngStreamOf(t *testing.T, ifaces []string, ts ...int64) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapfile.NewNgWriter(&b, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ifaces {
		if _, err := w.AddInterface(pcapfile.Interface{Name: name, LinkType: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range ts {
		if err := w.WritePacket(i%len(ifaces), v, 1, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// TestMergeStreams: the packets of several pcapng streams in time order
// (the earlier stream first at equal times), each stream's interfaces
// numbered in the order of first packets with their agent; a stream
// that is not pcapng, or is cut off, names its index; fn's error ends
// the merge with index -1.
func TestMergeStreams(t *testing.T) {
	a := ngStreamOf(t, []string{"a:eth0"}, 10, 30, 50)
	b := ngStreamOf(t, []string{"b:eth0", "b:eth1"}, 10, 20, 60)
	collect := func(srcs ...[]byte) (string, int, error) {
		var rs []io.Reader
		for _, s := range srcs {
			rs = append(rs, bytes.NewReader(s))
		}
		var got []string
		failed, err := MergeStreams(rs, func(p *query.Packet) error {
			got = append(got, fmt.Sprintf("%d:%s/%d:%s", p.Timestamp, p.Agent, p.Iface, p.Interface.Name))
			return nil
		})
		return strings.Join(got, " "), failed, err
	}
	_, failed, err := collect(a, b, []byte{})
	if err == nil || failed != 2 {
		t.Errorf("an empty stream: failed %d, %v; want 2 and an error", failed, err)
	}
	got, failed, err := collect(a, b)
	if want := "10:a/0:a:eth0 10:b/1:b:eth0 20:b/2:b:eth1 30:a/0:a:eth0 50:a/0:a:eth0 60:b/1:b:eth0"; err != nil || failed != -1 || got != want {
		t.Errorf("merge: %q, %d, %v; want %q", got, failed, err, want)
	}
	for _, bad := range [][]byte{[]byte("not a pcapng at all"), b[:len(b)-5]} {
		if _, failed, err := collect(a, bad); err == nil || failed != 1 {
			t.Errorf("a bad second stream: failed %d, %v; want 1 and an error", failed, err)
		}
	}
	stop := errors.New("stop")
	failed, err = MergeStreams([]io.Reader{bytes.NewReader(a)}, func(*query.Packet) error { return stop })
	if failed != -1 || !errors.Is(err, stop) {
		t.Errorf("fn's error: failed %d, %v", failed, err)
	}
}
