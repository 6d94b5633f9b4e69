package federate

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// pk is a packet of a generated server stream.
type pk struct {
	iface string // AGENT:IF, declared on first use
	ts    int64
	lt    uint16 // link type; 0: Ethernet
}

// stream is a generated server answer: its section comment, its
// packets in order, a statistics block per interface after them.
type stream struct {
	comment string
	pkts    []pk
	stats   bool
}

// bytes writes s as a query listener would.
func (s stream) bytes(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := pcapfile.NewNgWriter(&b, pcapfile.SectionInfo{Comment: s.comment})
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for i, p := range s.pkts {
		o, ok := idx[p.iface]
		if !ok {
			lt := cmp.Or(p.lt, 1)
			if o, err = w.AddInterface(pcapfile.Interface{Name: p.iface, LinkType: lt, SnapLen: 262144}); err != nil {
				t.Fatal(err)
			}
			idx[p.iface] = o
		}
		if err := w.WritePacket(o, p.ts, 60, packetData(p, i)); err != nil {
			t.Fatal(err)
		}
	}
	if s.stats {
		for name, o := range idx {
			if err := w.WriteStats(o, pcapfile.InterfaceStats{Timestamp: 1e9, IfRecv: 7, HaveIfRecv: true, Comment: "from " + name}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.Bytes()
}

// packetData makes a packet's bytes say which it is.
func packetData(p pk, i int) []byte {
	return fmt.Appendf(make([]byte, 0, 60), "%s %d #%d", p.iface, p.ts, i)
}

// serve answers GET /query with body and the trailer of a Result
// saying packets packets (-1: none).
func serve(t *testing.T, body []byte, packets int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", queryhttp.ContentType)
		w.Header().Set("Trailer", queryhttp.TrailerResult+", "+queryhttp.TrailerError)
		w.Write(body)
		if packets >= 0 {
			j, _ := json.Marshal(query.Result{Packets: packets, Agents: 1})
			w.Header().Set(queryhttp.TrailerResult, string(j))
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// got is a packet read back from the output.
type got struct {
	name, desc string
	lt         uint16
	ts         int64
	data       string
}

// readBack reads the output: its packets with their interfaces, its
// section comments, its statistics blocks' interface names and comments.
func readBack(t *testing.T, b []byte) (pkts []got, shb []string, stats []string) {
	t.Helper()
	var r *pcapfile.Reader
	r, err := pcapfile.NewReader(bytes.NewReader(b), &pcapfile.ReaderConfig{OnStats: func(i int, st pcapfile.InterfaceStats) {
		stats = append(stats, r.Interfaces()[i].Name+"@"+r.Interfaces()[i].Description+": "+st.Comment)
	}})
	if err != nil {
		t.Fatal(err)
	}
	shb = r.SectionComments()
	for {
		var p pcapfile.Packet
		err := r.ReadInto(&p)
		if err == io.EOF {
			return pkts, shb, stats
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		ifc := r.Interfaces()[p.Interface]
		pkts = append(pkts, got{ifc.Name, ifc.Description, ifc.LinkType, p.Timestamp, string(p.Data)})
	}
}

func configOf(addrs ...string) Config {
	var cfg Config
	for _, a := range addrs {
		cfg.Servers = append(cfg.Servers, queryhttp.ClientConfig{Addr: a})
	}
	return cfg
}

// TestMergeOrder: the servers' packets come out in timestamp order,
// ties by agent name, then server order, then each server's own order;
// one interface per server and interface, described by its server; the
// statistics blocks carried over on their interfaces; each server's
// section comment in the output's, prefixed with it.
func TestMergeOrder(t *testing.T) {
	streams := []stream{
		{comment: "coverage of a", stats: true, pkts: []pk{
			{iface: "web1:eth0", ts: 10}, {iface: "web2:eth0", ts: 10}, {iface: "web1:eth0", ts: 20},
			{iface: "web1:eth0", ts: 20}, {iface: "web2:eth0", ts: 40}, {iface: "web1:eth0", ts: 50},
		}},
		{comment: "coverage of b\nsecond line", stats: true, pkts: []pk{ // web1 here too: a failover
			{iface: "db1:eth0", ts: 5}, {iface: "web1:eth0", ts: 10}, {iface: "web1:eth0", ts: 30},
			{iface: "db1:eth0", ts: 40}, {iface: "web1:eth0", ts: 40},
		}},
		{pkts: []pk{ // another link type
			{iface: "aaa:any", ts: 10, lt: 276}, {iface: "web1:eth0", ts: 20}, {iface: "zz:lo", ts: 60, lt: 0},
		}},
	}
	var addrs []string
	type ref struct {
		got
		agent  string
		server int
		seq    int
	}
	var want []ref
	for si, s := range streams {
		addrs = append(addrs, serve(t, s.bytes(t), int64(len(s.pkts))))
		for i, p := range s.pkts {
			agent, _, _ := strings.Cut(p.iface, ":")
			want = append(want, ref{got{p.iface, "", cmp.Or(p.lt, 1), p.ts, string(packetData(p, i))}, agent, si, i})
		}
	}
	slices.SortStableFunc(want, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.ts, b.ts), cmp.Compare(a.agent, b.agent), cmp.Compare(a.server, b.server), cmp.Compare(a.seq, b.seq))
	})
	var out bytes.Buffer
	res, err := Run(context.Background(), configOf(addrs...), &out)
	if err != nil {
		t.Fatal(err)
	}
	pkts, shb, stats := readBack(t, out.Bytes())
	if len(pkts) != len(want) || res.Packets != int64(len(want)) {
		t.Fatalf("%d packets (result %d), want %d", len(pkts), res.Packets, len(want))
	}
	for i, w := range want {
		w.desc = "server " + addrs[w.server]
		if pkts[i] != w.got {
			t.Errorf("packet %d: %+v, want %+v", i, pkts[i], w.got)
		}
	}
	if len(stats) != 4 {
		t.Errorf("statistics blocks %q, want one per interface of a and b", stats)
	}
	for _, st := range stats {
		name, rest, _ := strings.Cut(st, "@")
		if !strings.HasSuffix(rest, ": from "+name) || !strings.HasPrefix(rest, "server "+addrs[0]) && !strings.HasPrefix(rest, "server "+addrs[1]) {
			t.Errorf("statistics block %q: not on its interface", st)
		}
	}
	c := strings.Join(shb, "\n")
	for _, w := range []string{"federated over 3 servers", "server " + addrs[0] + ": coverage of a", "server " + addrs[1] + ": second line"} {
		if !strings.Contains(c, w) {
			t.Errorf("section comment %q lacks %q", c, w)
		}
	}
	if len(res.Servers) != 3 || res.Partial || !res.Covered() {
		t.Errorf("result %+v", res)
	}
	for i, s := range res.Servers {
		if s.Outcome != OutcomeOK || s.Packets != int64(len(streams[i].pkts)) || s.Result == nil || s.Result.Packets != s.Packets {
			t.Errorf("server %d: %+v", i, s)
		}
	}
}

// TestMergeCount: Count and MaxBytes bound the merged output.
func TestMergeCount(t *testing.T) {
	a := serve(t, stream{pkts: []pk{{iface: "a:e", ts: 1}, {iface: "a:e", ts: 3}, {iface: "a:e", ts: 5}}}.bytes(t), 3)
	b := serve(t, stream{pkts: []pk{{iface: "b:e", ts: 2}, {iface: "b:e", ts: 4}}}.bytes(t), 2)
	cfg := configOf(a, b)
	cfg.Count = 3
	var out bytes.Buffer
	res, err := Run(context.Background(), cfg, &out)
	pkts, _, _ := readBack(t, out.Bytes())
	if err != nil || res.Stopped != "count" || len(pkts) != 3 || pkts[2].ts != 3 {
		t.Errorf("%v, %+v, %+v", err, res, pkts)
	}
}

// failing is a server that fails as its name says.
type failing struct {
	name    string
	start   func(t *testing.T) string // its address
	outcome string
	reason  string
}

// stallListener accepts and says nothing until the test ends.
func stallListener(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { <-done; c.Close() }()
		}
	}()
	t.Cleanup(func() { close(done); ln.Close() })
	return ln.Addr().String()
}

// midStream serves two packets, then does what then does.
func midStream(t *testing.T, then func(w http.ResponseWriter, done <-chan struct{})) string {
	body := stream{pkts: []pk{{iface: "x:e", ts: 2}, {iface: "x:e", ts: 4}}}.bytes(t)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", queryhttp.ContentType)
		w.Header().Set("Trailer", queryhttp.TrailerResult)
		w.Write(body)
		w.(http.Flusher).Flush()
		then(w, done)
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return strings.TrimPrefix(srv.URL, "http://")
}

func failures() []failing {
	return []failing{
		{"refused", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "bad token", http.StatusForbidden)
			}))
			t.Cleanup(srv.Close)
			return strings.TrimPrefix(srv.URL, "http://")
		}, OutcomeRefused, "bad token"},
		{"unreachable", func(t *testing.T) string {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			a := ln.Addr().String()
			ln.Close()
			return a
		}, OutcomeUnreachable, "connection refused"},
		{"silent", stallListener, OutcomeTimedOut, "sent nothing for"},
		{"stalls", func(t *testing.T) string {
			return midStream(t, func(w http.ResponseWriter, done <-chan struct{}) { <-done })
		}, OutcomeTimedOut, "sent nothing for"},
		{"cut", func(t *testing.T) string {
			return midStream(t, func(w http.ResponseWriter, done <-chan struct{}) {
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close()
			})
		}, OutcomeFailed, "cut off"},
		{"garbage", func(t *testing.T) string {
			return midStream(t, func(w http.ResponseWriter, done <-chan struct{}) {
				w.Write([]byte{6, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0})
			})
		}, OutcomeFailed, "not a query's pcapng"},
		{"lying", func(t *testing.T) string {
			return midStream(t, func(w http.ResponseWriter, done <-chan struct{}) {
				w.Header().Set(queryhttp.TrailerResult, `{"packets":9,"agents":1}`)
			})
		}, OutcomeFailed, "says 9 packets, its stream held 2"},
		{"no result", func(t *testing.T) string {
			return midStream(t, func(w http.ResponseWriter, done <-chan struct{}) {})
		}, OutcomeFailed, "without the server's result"},
	}
}

// TestFailures: a server that fails fails the query, naming it and
// why; with Partial the others' packets come, marked partial in the
// result and, for a server cut mid-stream, on its interfaces.
func TestFailures(t *testing.T) {
	good := stream{pkts: []pk{{iface: "g:e", ts: 1}, {iface: "g:e", ts: 3}, {iface: "g:e", ts: 9}}}
	for _, f := range failures() {
		t.Run(f.name, func(t *testing.T) {
			g := serve(t, good.bytes(t), 3)
			bad := f.start(t)
			for _, partial := range []bool{false, true} {
				cfg := configOf(g, bad)
				cfg.Timeout, cfg.Partial = 300*time.Millisecond, partial
				var out bytes.Buffer
				start := time.Now()
				res, err := Run(context.Background(), cfg, &out)
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("took %s", took)
				}
				s := res.Servers[1]
				if s.Outcome != f.outcome || !strings.Contains(s.Reason, f.reason) {
					t.Errorf("partial %v: server %+v, want %s: %s", partial, s, f.outcome, f.reason)
				}
				if !partial {
					if !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), f.reason) {
						t.Errorf("error %v: want ErrServer naming %s and %q", err, bad, f.reason)
					}
					if out.Len() > 0 {
						readBack(t, out.Bytes()) // valid pcapng
					}
					continue
				}
				if err != nil || !res.Partial {
					t.Fatalf("partial: %v, %+v", err, res)
				}
				pkts, shb, stats := readBack(t, out.Bytes())
				n := 0
				for _, p := range pkts {
					if p.name == "g:e" {
						n++
					}
				}
				marked := strings.Contains(strings.Join(shb, "\n"), "partial: server "+bad) ||
					slices.ContainsFunc(stats, func(s string) bool { return strings.Contains(s, "cut: server "+bad) })
				if s.Packets > 0 && !bytes.Contains(out.Bytes(), []byte("cut here: server "+bad)) {
					t.Errorf("partial: no packet comment says where %s was cut", bad)
				}
				if n != 3 || !marked {
					t.Errorf("partial: %d packets of the good server, section %q, statistics %q", n, shb, stats)
				}
			}
		})
	}
}

// TestAllFail: every server failing is ErrNoServer, Partial or not.
func TestAllFail(t *testing.T) {
	cfg := configOf(stallListener(t))
	cfg.Timeout, cfg.Partial = 200*time.Millisecond, true
	var out bytes.Buffer
	if _, err := Run(context.Background(), cfg, &out); !errors.Is(err, ErrNoServer) || out.Len() != 0 {
		t.Errorf("%v, %d bytes", err, out.Len())
	}
}

// TestOneServer: one server through the merge gives its packets, in
// its order (disorder kept, counted late), on its interfaces.
func TestOneServer(t *testing.T) {
	s := stream{pkts: []pk{{iface: "b:e", ts: 5}, {iface: "a:e", ts: 5}, {iface: "a:e", ts: 3}, {iface: "a:x", ts: 8, lt: 101}}}
	addr := serve(t, s.bytes(t), 4)
	var out bytes.Buffer
	res, err := Run(context.Background(), configOf(addr), &out)
	if err != nil {
		t.Fatal(err)
	}
	pkts, _, _ := readBack(t, out.Bytes())
	for i, p := range s.pkts {
		want := got{p.iface, "server " + addr, cmp.Or(p.lt, 1), p.ts, string(packetData(p, i))}
		if i >= len(pkts) || pkts[i] != want {
			t.Fatalf("packet %d: %+v, want %+v", i, pkts, want)
		}
	}
	if len(pkts) != 4 || res.Late != 1 {
		t.Errorf("%d packets, result %+v", len(pkts), res)
	}
}

// TestEach (correlate --from's merge, once correlate.MergeStreams): the
// servers' packets given to fn in Run's order (time, then agent name,
// then server), each server's interfaces numbered in the order of first
// packets, named as the server names them and described by the server,
// with their agent; a server whose answer is empty, not pcapng, or cut
// off fails it, naming the server; fn's error ends the merge as it is.
func TestEach(t *testing.T) {
	a := stream{pkts: []pk{{iface: "a:eth0", ts: 10}, {iface: "a:eth0", ts: 30}, {iface: "a:eth0", ts: 50}}}.bytes(t)
	b := stream{pkts: []pk{{iface: "b:eth0", ts: 10}, {iface: "b:eth1", ts: 20}, {iface: "b:eth0", ts: 60}}}.bytes(t)
	z := stream{pkts: []pk{{iface: "z:eth0", ts: 10}}}.bytes(t) // tied with a and b, before them in server order
	collect := func(fn func(*query.Packet) error, servers ...string) (string, error) {
		var got []string
		_, err := Each(context.Background(), configOf(servers...), func(p *query.Packet) error {
			got = append(got, fmt.Sprintf("%d:%s/%d:%s@%s", p.Timestamp, p.Agent, p.Iface, p.Interface.Name, p.Interface.Description))
			if fn != nil {
				return fn(p)
			}
			return nil
		})
		return strings.Join(got, " "), err
	}
	sa, sb, sz := serve(t, a, 3), serve(t, b, 3), serve(t, z, 1)
	got, err := collect(nil, sz, sa, sb)
	want := fmt.Sprintf("10:a/0:a:eth0@server %[2]s 10:b/1:b:eth0@server %[3]s 10:z/2:z:eth0@server %[1]s 20:b/3:b:eth1@server %[3]s "+
		"30:a/0:a:eth0@server %[2]s 50:a/0:a:eth0@server %[2]s 60:b/1:b:eth0@server %[3]s", sz, sa, sb)
	if err != nil || got != want {
		t.Errorf("merge:\n%s (%v)\nwant\n%s", got, err, want)
	}
	for _, bad := range []struct {
		name string
		body []byte
	}{{"empty", []byte{}}, {"not pcapng", []byte("not a pcapng at all")}, {"cut off", b[:len(b)-5]}} {
		addr := serve(t, bad.body, 3)
		if _, err := collect(nil, sa, addr); !errors.Is(err, ErrServer) || !strings.Contains(err.Error(), "server "+addr+": failed") {
			t.Errorf("%s second server: %v, want ErrServer naming %s", bad.name, err, addr)
		}
	}
	stop := errors.New("stop")
	if got, err := collect(func(*query.Packet) error { return stop }, sa, sb); !errors.Is(err, stop) || errors.Is(err, ErrServer) || strings.Count(got, "@") != 1 {
		t.Errorf("fn's error: %v after %q, want it as it is after one packet", err, got)
	}
}
