package correlate

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// base is the first timestamp of the test packets.
const base = int64(1_780_000_000_000_000_000)

// sp is a stored packet: when (ns after base) and its frame.
type sp struct {
	ts    int64
	frame []byte
}

// writeAgent writes pkts, as batches of batch packets on interface
// eth0, through a real store below dir, compressed as comp ("" plain).
func writeAgent(t *testing.T, dir, name, comp string, pkts []sp, batch int) {
	t.Helper()
	var spec compress.Spec
	if comp != "" {
		var err error
		if spec, err = compress.ParseSpec(comp); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(store.Config{Dir: dir, FileCompress: spec, Fsync: store.FsyncNever})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st.Close(ctx)
	}()
	w, err := st.Writer(name)
	if err != nil {
		t.Fatal(err)
	}
	inst := st.Instance([16]byte{1}, name)
	w.Start("h-" + name)
	i, err := w.AddInterface(wire.Interface{Name: "eth0", LinkType: linkEthernet, SnapLen: 65535})
	if err != nil {
		t.Fatal(err)
	}
	var e wire.BatchEncoder
	for bi := 0; bi*batch < len(pkts); bi++ {
		e.Reset(nil)
		for _, p := range pkts[bi*batch : min((bi+1)*batch, len(pkts))] {
			e.Append(base+p.ts, 0, uint32(len(p.frame)), p.frame)
		}
		b, err := wire.ParseBatch(0, e.Finish(uint64(bi + 1))[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteBatch(&b, []int{i}, inst); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
}

// otherPort is a frame the filter "udp port 9999" leaves out.
func otherPort(id int) []byte {
	p := baseUDP()
	p.l4 = udp(5000, 53, 0, "dns?")
	p.id = uint16(id)
	return eth(p.bytes(), 9, etherIPv4)
}

// TestRun: two agents' files (plain and zstd) through the query: the
// drops on the way and a duplicate are reported, the filter and the
// range apply, and the unmatched pcapng holds exactly the dropped
// packets, with the agent's interface name and exact timestamps.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var edge, core []sp
	dropped := []int{10, 20, 33}
	for id := 1; id <= 60; id++ {
		ts := int64(id) * 1e6
		edge = append(edge, sp{ts, idFrame(id, 0)}, sp{ts + 1, otherPort(id)})
		if !slices.Contains(dropped, id) {
			core = append(core, sp{ts + 300_000, idFrame(id, 1)})
		}
		if id == 40 {
			core = append(core, sp{ts + 400_000, idFrame(id, 1)}) // a copy made on the way
		}
	}
	writeAgent(t, dir, "edge", "", edge, 7)
	writeAgent(t, dir, "core", "zstd", core, 5)

	var out bytes.Buffer
	cfg := Config{Dir: dir, Agents: []string{"edge", "core"}, Filter: "udp port 9999",
		Until: time.Unix(0, base+55e6)} // ids 55.. at edge, 54.3.. at core: out
	rep, err := Run(context.Background(), cfg, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := Pair{From: "edge", To: "core", AtFrom: 54, AtTo: 52, Matched: 51, FromNotTo: 3, DupTo: 1,
		Delay: Delay{Count: 51, Min: 300_000, P50: 300_000, P90: 300_000, P99: 300_000, Max: 300_000}}
	if len(rep.Pairs) != 1 || rep.Pairs[0] != want {
		t.Errorf("pairs %+v\nwant %+v", rep.Pairs, want)
	}
	if !slices.Equal(rep.Agents, []Agent{{"edge", 54}, {"core", 52}}) || rep.Unmatched != 3 || rep.FilesRead != 2 || rep.WindowNS != int64(DefaultWindow) {
		t.Errorf("report %+v", rep)
	}

	r, err := pcapfile.NewReader(&out, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		p, err := r.ReadPacket()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ifc := r.Interfaces()[p.Interface]
		id := int(p.Data[len(p.Data)-1])
		if ifc.Name != "edge:eth0" || !bytes.Equal(p.Data, idFrame(id, 0)) || p.Timestamp != base+int64(id)*1e6 {
			t.Errorf("unmatched packet on %q at %d: %x", ifc.Name, p.Timestamp, p.Data)
		}
		got = append(got, int64(id))
	}
	if !slices.Equal(got, []int64{10, 20, 33}) {
		t.Errorf("unmatched pcapng holds ids %v, want %v", got, dropped)
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, "a", "", []sp{{1, idFrame(1, 0)}}, 1)
	writeAgent(t, dir, "b", "gzip", []sp{{2, idFrame(1, 1)}}, 1)
	tests := []struct {
		name string
		cfg  Config
		is   error
	}{
		{"one agent", Config{Dir: dir, Agents: []string{"a"}}, nil},
		{"an agent twice", Config{Dir: dir, Agents: []string{"a", "a"}}, nil},
		{"a glob", Config{Dir: dir, Agents: []string{"a", "b*"}}, wire.ErrBadName},
		{"no directory", Config{Dir: dir, Agents: []string{"a", "c"}}, ErrNoAgent},
		{"no root", Config{Agents: []string{"a", "b"}}, nil},
		{"missing root", Config{Dir: filepath.Join(dir, "x"), Agents: []string{"a", "b"}}, fs.ErrNotExist},
		{"bad filter", Config{Dir: dir, Agents: []string{"a", "b"}, Filter: "udp port"}, query.ErrBadFilter},
		{"filter beyond the limits", Config{Dir: dir, Agents: []string{"a", "b"}, Filter: strings.Repeat("udp or ", 48) + "tcp"}, query.ErrBadFilter},
		{"negative window", Config{Dir: dir, Agents: []string{"a", "b"}, Window: -1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg, nil)
			if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Run: %v, want an error (%v)", err, tc.is)
			}
			if tc.is != ErrNoAgent && tc.name != "bad filter" && tc.cfg.Validate() == nil { // Run compiles the filter
				t.Errorf("Validate passes what Run refuses")
			}
		})
	}
	rep, err := Run(context.Background(), Config{Dir: dir, Agents: []string{"a", "b"}}, nil)
	if err != nil || len(rep.Pairs) != 1 || rep.Pairs[0].Matched != 1 {
		t.Errorf("a valid run: %+v, %v", rep, err)
	}
}
