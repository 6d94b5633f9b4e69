package query

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestVecWriterRefers: packets written through a vecWriter make the
// same bytes as through a plain writer, ties, cut packets and packets
// larger than its buffer included, and the data of a packet refMin
// bytes or more long is handed to writev where it lies, not copied.
func TestVecWriterRefers(t *testing.T) {
	sizes := []int{0, 1, 60, refMin - 1, refMin, 576, 1500, 9000, 70_000, outBuf + 5, 64, 1514}
	var pieces [][]byte
	var got bytes.Buffer
	vw := newVecWriter(func(iov [][]byte) error {
		for _, b := range iov {
			got.Write(b)
			pieces = append(pieces, b) // valid: the data stays until the test ends
		}
		return nil
	})
	defer vw.Close()
	vw.refs = true
	var want bytes.Buffer
	ws := []io.Writer{vw, &want}
	var nws []*pcapfile.NgWriter
	for _, w := range ws {
		nw, err := pcapfile.NewNgWriter(w, pcapfile.SectionInfo{OS: "Linux"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nw.AddInterface(pcapfile.Interface{Name: "a:eth0", LinkType: 1, SnapLen: 262144}); err != nil {
			t.Fatal(err)
		}
		nws = append(nws, nw)
	}
	var datas [][]byte
	for r := range 300 { // several buffers' worth of pieces
		for i, n := range sizes {
			d := bytes.Repeat([]byte{byte(r + i)}, n)
			datas = append(datas, d)
			orig := uint32(n)
			if i%3 == 0 {
				orig += 100 // cut by a snaplen
			}
			for _, nw := range nws {
				if err := nw.WritePacket(0, int64(r), orig, d); err != nil { // ties: r repeats
					t.Fatal(err)
				}
			}
		}
	}
	if err := vw.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("vecWriter wrote %d bytes, not the %d of a plain writer", got.Len(), want.Len())
	}
	if nws[0].Written() != int64(want.Len()) {
		t.Errorf("Written %d, want %d", nws[0].Written(), want.Len())
	}
	at := map[*byte]bool{}
	for _, p := range pieces {
		if len(p) > 0 {
			at[&p[0]] = true
		}
	}
	for _, d := range datas {
		if referred := len(d) > 0 && at[&d[0]]; referred != (len(d) >= refMin) {
			t.Fatalf("data of %d bytes referred to: %v", len(d), referred)
		}
	}
}

// TestThreadsFileOutput: with threads the query writes a file or a
// pipe (writev, the packets' data by reference) byte for byte as it
// writes a plain io.Writer with one thread, ties, a small window,
// limits and a cut .part included.
func TestThreadsFileOutput(t *testing.T) {
	dir := threadsRoot(t)
	cases := []Config{
		{},
		{Agents: []string{"a1", "h8"}},
		{ReorderMem: 1},
		{Count: 1234},
		{MaxBytes: 200_000},
		{Filter: "udp port 5001"},
	}
	for i, c := range cases {
		c.Dir, c.Since = dir, ts(-1e9)
		c.Threads = 1
		want, _, err := runQuery(t, c)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		c.Threads = 2
		p, err := Prepare(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(t.TempDir(), "out.pcapng")
		f, err := os.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if fileWritev(f) == nil {
			t.Skip("no writev here")
		}
		if _, err := p.Run(context.Background(), f); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		f.Close()
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("case %d (%+v): file of %d bytes differs from the %d of one thread", i, c, len(got), len(want))
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte)
		go func() { b, _ := io.ReadAll(pr); done <- b }()
		_, err = p.Run(context.Background(), pw)
		pw.Close()
		if got := <-done; err != nil || !bytes.Equal(got, want) {
			t.Errorf("case %d: pipe of %d bytes (%v) differs from the %d of one thread", i, len(got), err, len(want))
		}
		pr.Close()
	}
}
