package query

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestEach: Each gives the packets Run writes, in Run's order, each
// with its agent and interface; stops at Count as Run does; an error
// from the function stops the query and comes back as is.
func TestEach(t *testing.T) {
	dir, _ := threeAgents(t)
	for _, cfg := range []Config{
		{Dir: dir},
		{Dir: dir, Filter: "udp port 5001 or udp port 5002", Since: ts(2_000), Until: ts(90_000)},
		{Dir: dir, Agents: []string{"b*", "c3"}, Ifaces: []string{"eth1"}, Count: 17},
		{Dir: dir, NoIndex: true, ReorderMem: 256 << 10},
	} {
		out, want, err := runQuery(t, cfg)
		if err != nil {
			t.Fatalf("%+v: Run: %v", cfg, err)
		}
		pkts, _, _ := readOutput(t, out)
		if len(pkts) == 0 {
			t.Fatalf("%+v: Run wrote no packets: a test that cannot fail", cfg)
		}
		p, err := Prepare(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var gave []got
		ifaces := map[int]string{}
		res, err := p.Each(context.Background(), func(pk *Packet) error {
			name := pk.Interface.Name
			if n, ok := ifaces[pk.Iface]; ok && n != name {
				t.Errorf("Iface %d is %q and %q", pk.Iface, n, name)
			}
			ifaces[pk.Iface] = name
			if agent := name[:len(pk.Agent)]; agent != pk.Agent || name[len(pk.Agent)] != ':' {
				t.Errorf("agent %q, interface %q", pk.Agent, name)
			}
			gave = append(gave, got{TS: pk.Timestamp, Iface: name, Orig: pk.OrigLen, Data: bytes.Clone(pk.Data)})
			return nil
		})
		if err != nil {
			t.Fatalf("%+v: Each: %v", cfg, err)
		}
		if len(gave) != len(pkts) {
			t.Fatalf("%+v: Each gave %d packets, Run wrote %d", cfg, len(gave), len(pkts))
		}
		for i := range pkts {
			if gave[i].TS != pkts[i].TS || gave[i].Iface != pkts[i].Iface || gave[i].Orig != pkts[i].Orig || !bytes.Equal(gave[i].Data, pkts[i].Data) {
				t.Fatalf("%+v: packet %d: Each %+v, Run %+v", cfg, i, gave[i], pkts[i])
			}
		}
		if res.Packets != want.Packets || res.Stopped != want.Stopped || res.FilesRead != want.FilesRead || res.Bytes != 0 {
			t.Errorf("%+v: Each's result %+v, Run's %+v", cfg, res, want)
		}
	}

	stop := errors.New("enough")
	p, err := Prepare(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	res, err := p.Each(context.Background(), func(*Packet) error {
		if n++; n == 5 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 5 || res.Packets != 4 {
		t.Errorf("stopped at the 5th: %v after %d calls, %d packets counted", err, n, res.Packets)
	}
}

// TestRunEach: RunEach writes what Run writes, byte for byte, and gives
// each packet written, in the output's order, Iface its interface in
// the pcapng, with and without threads; MaxBytes stops both alike.
func TestRunEach(t *testing.T) {
	dir, _ := threeAgents(t)
	for _, cfg := range []Config{
		{Dir: dir},
		{Dir: dir, Filter: "udp port 5001 or udp port 5002", Since: ts(2_000), Until: ts(90_000), Threads: 3},
		{Dir: dir, Agents: []string{"b*", "c3"}, Ifaces: []string{"eth1"}, Count: 17, Threads: 1},
		{Dir: dir, MaxBytes: 3000, Threads: 2},
	} {
		out, want, err := runQuery(t, cfg)
		if err != nil {
			t.Fatalf("%+v: Run: %v", cfg, err)
		}
		pkts, ifaces, _ := readOutput(t, out)
		if len(pkts) == 0 {
			t.Fatalf("%+v: Run wrote no packets: a test that cannot fail", cfg)
		}
		p, err := Prepare(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var gave []got
		var buf bytes.Buffer
		res, err := p.RunEach(context.Background(), &buf, func(pk *Packet) error {
			if name := ifaces[pk.Iface].Name; name != pk.Interface.Name {
				t.Errorf("Iface %d is %q in the pcapng, %q given", pk.Iface, name, pk.Interface.Name)
			}
			gave = append(gave, got{TS: pk.Timestamp, Iface: pk.Interface.Name, Orig: pk.OrigLen, Data: bytes.Clone(pk.Data)})
			return nil
		})
		if err != nil {
			t.Fatalf("%+v: RunEach: %v", cfg, err)
		}
		if !bytes.Equal(buf.Bytes(), out) || res.Packets != want.Packets || res.Bytes != want.Bytes {
			t.Errorf("%+v: RunEach wrote %d bytes (%s), Run %d (%s)", cfg, buf.Len(), res, len(out), want)
		}
		if len(gave) != len(pkts) {
			t.Fatalf("%+v: RunEach gave %d packets, Run wrote %d", cfg, len(gave), len(pkts))
		}
		for i := range pkts {
			if gave[i].TS != pkts[i].TS || gave[i].Iface != pkts[i].Iface || gave[i].Orig != pkts[i].Orig || !bytes.Equal(gave[i].Data, pkts[i].Data) {
				t.Fatalf("%+v: packet %d: RunEach %+v, Run %+v", cfg, i, gave[i], pkts[i])
			}
		}
	}
}
