package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync/atomic"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// fileSource replays a pcap or pcapng file as fast as the queue drains.
// A packet longer than its link type allows in pcapng readers
// (pcapfile.MaxCapLen) is cut to that length, its original length kept,
// and counted (Summary.LinkTruncated).
type fileSource struct {
	a       *Agent
	path    string
	f       io.Closer
	r       *pcapfile.Reader
	m       *mapping // the file, mapped (f is m); nil: read through f
	ifmap   []int    // file interface index -> agent interface index
	maxCap  []uint32 // file interface index -> pcapfile.MaxCapLen of its link type
	read    atomic.Uint64
	bytes   atomic.Uint64
	stopped atomic.Bool
}

func (a *Agent) openFile(path string) (*fileSource, error) {
	// Opened once: a FIFO or a pipe cannot be opened again.
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if m := mapFile(osf); m != nil {
		r, err := pcapfile.NewMappedReader(m.data, m.rest(), nil)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("agent: reading %s: %w", path, err)
		}
		return &fileSource{a: a, path: path, f: m, r: r, m: m}, nil
	}
	f, err := pcapfile.OpenFile(osf) // compressed files too
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	r, err := pcapfile.NewReader(f, nil)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("agent: reading %s: %w", path, err)
	}
	return &fileSource{a: a, path: path, f: f, r: r}, nil
}

// declare maps file interfaces up to index i to agent interfaces. A
// pcapng interface without a name is called "<file>#<index>"; the one
// interface of a classic pcap file "<file>". A file of more interfaces
// than an agent may declare is an error.
func (s *fileSource) declare(i int) error {
	ifs := s.r.Interfaces()
	for n := len(s.ifmap); n <= i && n < len(ifs); n++ {
		name := ifs[n].Name
		if name == "" {
			name = filepath.Base(s.path)
			if len(ifs) > 1 || n > 0 {
				name += "#" + strconv.Itoa(n)
			}
		}
		maxCap := pcapfile.MaxCapLen(uint32(ifs[n].LinkType))
		snap := ifs[n].SnapLen
		if snap == 0 || snap > maxCap {
			snap = maxCap
		}
		idx, err := s.a.addIface(wire.Interface{Name: name, LinkType: ifs[n].LinkType, SnapLen: snap})
		if err != nil {
			return fmt.Errorf("reading %s: %w", s.path, err)
		}
		s.ifmap = append(s.ifmap, idx)
		s.maxCap = append(s.maxCap, maxCap)
	}
	return nil
}

func (s *fileSource) run() (err error) {
	defer s.f.Close()
	bd := s.a.newBuilder(true)
	defer bd.seal()
	if s.m != nil {
		// A mapped file cut short while it is read faults (SIGBUS) on
		// the pages past its new end: the read stops with an error
		// instead of the process. Only this goroutine touches the
		// mapping, and a packet faulting as it is appended is not
		// appended (wire.BatchEncoder.Append copies it first).
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if v := recover(); v != nil {
				if f, ok := v.(interface{ Addr() uintptr }); ok && s.m.holds(f.Addr()) {
					err = fmt.Errorf("reading %s: the file was cut short while it was read (a fault at offset %d of its mapping)", s.path, s.m.offset(f.Addr()))
					return
				}
				panic(v)
			}
		}()
	}
	pace := pacer{rate: s.a.tr.replayRate()}
	// The counters are published every 64 packets and at the end, not
	// per packet: an atomic add is a full barrier.
	var read, bytes uint64
	publish := func() {
		s.read.Add(read)
		s.bytes.Add(bytes)
		read, bytes = 0, 0
	}
	defer publish()
	var p pcapfile.Packet
	for !s.stopped.Load() {
		pace.wait()
		err := s.r.ReadInto(&p)
		if err != nil {
			if err == io.EOF {
				return nil
			}
			if s.m != nil && s.m.cut() {
				return fmt.Errorf("reading %s: the file was cut short while it was read: %w", s.path, err)
			}
			return fmt.Errorf("reading %s: %w", s.path, err)
		}
		if s.m != nil && p.Timestamp == 0 && len(p.Data) == 0 && s.m.cut() {
			// The zeros of a mapped page past the file's new end read as
			// an empty classic pcap record: not a packet.
			return fmt.Errorf("reading %s: the file was cut short while it was read", s.path)
		}
		if p.Interface >= len(s.ifmap) {
			if err := s.declare(p.Interface); err != nil {
				return err
			}
		}
		if uint32(len(p.Data)) > s.maxCap[p.Interface] {
			// Longer than readers accept for its link type: cut it, like
			// a snaplen.
			p.OrigLen = max(p.OrigLen, uint32(len(p.Data)))
			p.Data = p.Data[:s.maxCap[p.Interface]]
			s.a.linkTruncated.Add(1)
		}
		bd.add(p.Timestamp, s.ifmap[p.Interface], p.OrigLen, p.Data, 0)
		read++
		bytes += uint64(len(p.Data))
		if read == 64 {
			publish()
			if s.m != nil {
				s.m.release(s.r.Offset())
			}
		}
	}
	return nil
}

func (s *fileSource) stop() { s.stopped.Store(true) }

func (s *fileSource) rateDrops() uint64 { return 0 }

func (s *fileSource) capturedBytes() uint64 { return s.bytes.Load() }

// stats reports the packets read as one entry for interface 0 (a replay
// has no kernel counters). It runs on the sender's goroutine, so it asks
// the agent's locked interface list, not s.ifmap.
func (s *fileSource) stats(st *wire.Stats) {
	n := s.read.Load()
	if len(s.a.interfaces()) > 0 {
		st.Interfaces = append(st.Interfaces, wire.IfaceStats{Index: 0, Received: n, Captured: n})
	}
}
