package agent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/compress"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Summary is what an agent did: the counters of its closing line,
// which String renders as that line (without the "pcapsync agent: "
// prefix). Its JSON form is one object whose keys are the field names
// in snake_case, every key always present (the UDP ones zero over TCP).
type Summary struct {
	Read        uint64 `json:"read"`         // packets read from the sources
	Sent        uint64 `json:"sent"`         // packets handed to a connection at least once
	Acked       uint64 `json:"acked"`        // packets of this run the collector acknowledged (not Recovered)
	Dropped     uint64 `json:"dropped"`      // packets dropped because the queue (or spool) was full
	RateDrops   uint64 `json:"rate_drops"`   // packets dropped by the rate limit (--max-rate)
	KernelDrops uint64 `json:"kernel_drops"` // packets the kernel dropped (live capture)
	Unacked     uint64 `json:"unacked"`      // packets still queued at exit, recovered ones included
	// Recovered: packets of the batches a previous run left in the
	// spool, loaded by this run (sent again unless the collector's
	// welcome says it holds them): each is acknowledged in this run or
	// still in Unacked at exit, never in Acked (the run that read it
	// counted it, as acknowledged or as unacknowledged at its exit).
	Recovered  uint64 `json:"recovered"`
	Reconnects uint64 `json:"reconnects"` // connection attempts after the first (TCP); with Kafka: rounds of producing again after a record failed
	Failovers  uint64 `json:"failovers"`  // moves to the next collector address (Config.Collectors)

	// LinkTruncated counts packets cut to the longest captured length
	// readers accept for their link type (pcapfile.MaxCapLen), their
	// original length kept.
	LinkTruncated uint64 `json:"link_truncated"`

	// Records bytes before and after compression (equal without it).
	RawBytes  uint64 `json:"raw_bytes"`
	WireBytes uint64 `json:"wire_bytes"`

	// UDP only (nothing is acknowledged there: Acked stays 0).
	UDP        bool   `json:"udp"`         // the transport was UDP
	Datagrams  uint64 `json:"datagrams"`   // datagrams sent
	SendErrors uint64 `json:"send_errors"` // datagrams the kernel refused (ENOBUFS, ...): their batches are lost
	Pieced     uint64 `json:"pieced"`      // batches larger than a datagram (one packet too big for one), sent in pieces
	Pieces     uint64 `json:"pieces"`      // datagrams those pieces took (each also counted in Datagrams)
}

// String renders s as the agent's closing line: the counters always
// there, then the failovers, the link truncations and the compression if
// any, then the UDP counters over UDP.
func (s Summary) String() string {
	str := fmt.Sprintf("packets read %d, sent %d, acknowledged %d, dropped by agent %d, dropped by kernel %d, unacknowledged %d, reconnects %d, dropped by rate limit %d",
		s.Read, s.Sent, s.Acked, s.Dropped, s.KernelDrops, s.Unacked, s.Reconnects, s.RateDrops)
	if s.Recovered > 0 {
		str += fmt.Sprintf(", recovered from the spool %d", s.Recovered)
	}
	if s.Failovers > 0 {
		str += fmt.Sprintf(", failovers to the next collector %d", s.Failovers)
	}
	if s.LinkTruncated > 0 {
		str += fmt.Sprintf(", truncated to the link type's limit %d", s.LinkTruncated)
	}
	if s.RawBytes != s.WireBytes && s.WireBytes > 0 {
		str += fmt.Sprintf(", compressed %d to %d bytes (ratio %.2f)", s.RawBytes, s.WireBytes, float64(s.RawBytes)/float64(s.WireBytes))
	}
	if s.UDP {
		str += fmt.Sprintf(", datagrams sent %d, send errors %d, batches sent in pieces %d (pieces %d)",
			s.Datagrams, s.SendErrors, s.Pieced, s.Pieces)
	}
	return str
}

// Agent is one running agent. Create it with New, then call Run once.
type Agent struct {
	cfg        Config
	log        *slog.Logger
	collectors []endpoint // Config.Collectors, resolved; none with Kafka
	instance   [16]byte
	host       string
	q          *queue

	ifMu   sync.Mutex
	ifaces []wire.Interface // declared so far; append-only

	sources []source

	sent       atomic.Uint64 // packets sent at least once
	firstSent  atomic.Uint64 // highest sequence ever sent
	reconnects atomic.Uint64
	failovers  atomic.Uint64

	batchesSent, batchesResent atomic.Uint64 // batch writes: first ones, and again after a reconnect
	connected                  atomic.Bool   // a TCP session with the collector is up
	start                      time.Time     // for the queue's clock

	rawBytes, wireBytes atomic.Uint64 // records sections before and after compression
	linkTruncated       atomic.Uint64 // packets cut to pcapfile.MaxCapLen

	tr transport // chosen in New
}

// source is a packet source: the file replay or one live interface.
type source interface {
	// run reads until the input ends or stop is called, sealing batches
	// into the queue; it returns nil at a clean end.
	run() error
	stop()
	// stats adds this source's interface counters to st.
	stats(st *wire.Stats)
	// rateDrops counts packets the rate limit dropped.
	rateDrops() uint64
	// capturedBytes counts the bytes of the packets read.
	capturedBytes() uint64
}

// endpoint is one collector of Config.Collectors.
type endpoint struct {
	name string         // HOST:PORT as configured, for logs
	addr netip.AddrPort // resolved by New
	tls  *tls.Config    // nil without TLS; its ServerName is this collector's
}

// resolveCollectors resolves every collector address once and gives
// each its TLS configuration: Config.TLS, verifying the host part of
// its address unless TLS.ServerName is set. Two entries that resolve to
// the same address and port are an error.
func resolveCollectors(c *Config) ([]endpoint, error) {
	eps := make([]endpoint, 0, len(c.Collectors))
	for _, s := range c.Collectors {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			ta, rerr := net.ResolveTCPAddr("tcp", s)
			if rerr != nil {
				return nil, fmt.Errorf("agent: collector address %q: %w", s, rerr)
			}
			ap = ta.AddrPort()
		}
		ep := endpoint{name: s, addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
		for _, o := range eps {
			if o.addr == ep.addr {
				return nil, fielderr.Errorf("agent: collector addresses %q and %q are both %s ({agent.Collectors})", o.name, s, ep.addr)
			}
		}
		if c.TLS != nil {
			ep.tls = c.TLS.Clone()
			ep.tls.MinVersion = max(ep.tls.MinVersion, tls.VersionTLS12)
			if host, _, err := net.SplitHostPort(s); err == nil && ep.tls.ServerName == "" {
				ep.tls.ServerName = host
			}
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// New checks cfg, resolves the collectors and opens every source, so
// that a bad address, interface, filter or file is reported before
// anything runs.
func New(cfg Config) (*Agent, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	eps, err := resolveCollectors(&c)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: c, log: c.Logger.With("agent", c.Name), collectors: eps, start: time.Now()}
	if cfg.Name == "" && c.TLS != nil {
		if leaf := clientLeaf(c.TLS); leaf != nil {
			a.log.Info("agent name taken from the client certificate (--name not given)", "name", c.Name, "cn", leaf.Subject.CommonName)
		}
	}
	if cfg.Name == "" && c.Kafka != nil && c.Kafka.CertFile != "" {
		a.log.Info("agent name taken from the Kafka client certificate (--name not given)", "name", c.Name, "cert", c.Kafka.CertFile)
	}
	a.host, _ = os.Hostname()
	a.instance = newInstance()
	switch {
	case c.Kafka != nil:
		k, err := newKafkaSender(a)
		if err != nil {
			return nil, err
		}
		a.tr = k
	case c.Transport == TransportUDP:
		a.tr = newUDPLink(a)
	default:
		a.tr = &tcpSender{a: a}
	}
	a.tr.warnInsecure(a.log)
	var bufCap int
	a.cfg.BatchBytes, bufCap = a.tr.batchLimits()
	if c.Compress.Codec != compress.None {
		// A compressed batch is built in a second pool buffer, which
		// must hold the worst case of the codec.
		bufCap = wire.HeaderSize + wire.BatchHeaderSize + compress.MaxEncodedLen(bufCap)
	}
	a.q = newQueue(c.QueueBytes, bufCap)
	a.q.ahead = a.replayAheadLimit(bufCap)
	a.tr.prepareQueue(a.q)
	var recovered []*batch
	if c.Spool != "" {
		sp, id, rec, err := openSpool(c.Spool, c.SpoolBytes, c.ReadFile == "", a.log)
		if err != nil {
			return nil, err
		}
		a.q.spool, a.instance, recovered = sp, id, rec
	}
	if c.ReadFile != "" {
		s, err := a.openFile(c.ReadFile)
		if err != nil {
			return nil, err
		}
		a.sources = append(a.sources, s)
	} else {
		if err := a.openLive(); err != nil {
			return nil, err
		}
	}
	if len(recovered) > 0 {
		// Live interfaces are declared in the same order on every run,
		// so the recovered batches' interface indexes still hold.
		a.q.recover(recovered, len(a.interfaces()))
		// The newest segment survives a clean stop with its batches
		// acknowledged: only those above the saved mark are news.
		if un := a.q.spool.unacked(recovered); len(un) > 0 {
			a.log.Info("spool: resending batches of the previous run", "batches", len(un),
				"first_seq", un[0].seq, "last_seq", un[len(un)-1].seq)
		}
	}
	return a, nil
}

func newInstance() (id [16]byte) {
	rand.Read(id[:])
	return id
}

func (a *Agent) closeSources() {
	for _, s := range a.sources {
		s.stop()
	}
}

// addIface declares an interface and returns its index.
func (a *Agent) addIface(ifc wire.Interface) (int, error) {
	a.ifMu.Lock()
	defer a.ifMu.Unlock()
	if len(a.ifaces) >= wire.MaxInterfaces {
		return 0, fmt.Errorf("interface %q: an agent declares at most %d interfaces", ifc.Name, wire.MaxInterfaces)
	}
	a.ifaces = append(a.ifaces, ifc)
	return len(a.ifaces) - 1, nil
}

// hello returns the agent's Hello with every interface declared so
// far, and Config.Token.
func (a *Agent) hello() wire.Hello {
	return wire.Hello{Instance: a.instance, Codecs: 1<<wire.CodecNone | 1<<a.cfg.Compress.Wire(), Name: a.cfg.Name, Host: a.host,
		Token: a.cfg.Token, Interfaces: a.interfaces()}
}

func (a *Agent) interfaces() []wire.Interface {
	a.ifMu.Lock()
	defer a.ifMu.Unlock()
	return a.ifaces[:len(a.ifaces):len(a.ifaces)]
}

// Run streams until the sources end (a file is fully read) and every
// batch is acknowledged, or until ctx ends: then it stops the sources,
// waits up to ShutdownTimeout for the last acknowledgements and returns.
// The error is nil for both; it reports a failed source (after what it
// read before the failure was delivered) or a rejection by the collector.
func (a *Agent) Run(ctx context.Context) (Summary, error) {
	sendCtx, stopSend := context.WithCancel(context.Background())
	senderDone := make(chan error, 1)
	go func() { senderDone <- a.tr.run(sendCtx) }()

	var srcErr error
	var srcWG sync.WaitGroup
	var errMu sync.Mutex
	for _, s := range a.sources {
		srcWG.Add(1)
		go func() {
			defer srcWG.Done()
			if err := s.run(); err != nil {
				errMu.Lock()
				srcErr = errors.Join(srcErr, err)
				errMu.Unlock()
			}
		}()
	}
	srcDone := make(chan struct{})
	go func() { srcWG.Wait(); close(srcDone) }()

	var fatal error
	interrupted := false
	select {
	case <-srcDone:
	case <-ctx.Done():
		interrupted = true
	case fatal = <-senderDone:
	}
	a.closeSources()
	if fatal != nil {
		a.q.close()
	}
	<-srcDone
	if srcErr != nil {
		a.log.Error("source failed; delivering what was read before it", "err", srcErr)
	}

	if fatal == nil {
		// Wait for the last acknowledgements: unbounded after a clean end
		// of input (a replay exits once everything is acknowledged), bounded
		// by ShutdownTimeout after a stop signal, and cut short by one.
		var deadline <-chan time.Time
		stopped := ctx.Done()
		arm := func() {
			deadline = time.NewTimer(a.cfg.ShutdownTimeout).C
			stopped = nil
		}
		if interrupted {
			arm()
		}
	wait:
		for a.q.stats().pending > 0 {
			select {
			case <-a.q.freed:
			case fatal = <-senderDone:
				break wait
			case <-stopped:
				arm()
			case <-deadline:
				a.log.Warn("shutdown timeout: batches still unacknowledged", "batches", a.q.stats().pending)
				break wait
			}
		}
	}
	stopSend()
	if fatal == nil {
		fatal = <-senderDone
	}
	a.q.close()
	sum := a.summary()
	if a.q.spool != nil {
		a.q.spool.saveAcked(a.q.stats().acked)
		a.q.spool.close()
	}
	return sum, errors.Join(fatal, srcErr)
}

func (a *Agent) summary() Summary { return a.counters().Summary }

// counters returns the Summary and the batch counters of Stats, as the
// transport reports them; not the interfaces.
func (a *Agent) counters() Stats {
	qs := a.q.stats()
	var ws wire.Stats
	for _, s := range a.sources {
		s.stats(&ws)
	}
	sum := Summary{Sent: a.sent.Load(), Acked: qs.ackedPackets, Dropped: qs.dropped,
		Unacked: qs.queuedPackets - qs.ackedPackets + qs.recoveredPackets - qs.recoveredAcked, Recovered: qs.recoveredPackets, Reconnects: a.reconnects.Load(), Failovers: a.failovers.Load(),
		RawBytes: a.rawBytes.Load(), WireBytes: a.wireBytes.Load(), LinkTruncated: a.linkTruncated.Load()}
	for _, is := range ws.Interfaces {
		sum.Read += is.Captured
		sum.KernelDrops += is.KernelDrops
	}
	for _, s := range a.sources {
		sum.RateDrops += s.rateDrops()
	}
	st := Stats{Summary: sum, BatchesSent: a.batchesSent.Load(), BatchesResent: a.batchesResent.Load(),
		Connected: a.connected.Load(), BatchesAcked: qs.ackedBatches, UnackedBatches: qs.pending, UnackedBytes: qs.frameBytes,
		SealedPackets: qs.sealedPackets}
	a.tr.report(&st)
	return st
}

// collectStats fills st with the current loss counters.
func (a *Agent) collectStats(st *wire.Stats) {
	st.Time = time.Now().UnixNano()
	st.AgentDrops = a.q.stats().dropped
	st.Interfaces = st.Interfaces[:0]
	for _, s := range a.sources {
		s.stats(st)
		st.AgentDrops += s.rateDrops()
	}
}

// builder packs one source's packets into batches.
type builder struct {
	a     *Agent
	b     *batch
	enc   wire.BatchEncoder
	cz    *compress.Encoder // nil: no compression
	block bool              // wait for queue room instead of dropping (file replay)
	nIf   int               // interfaces the current batch needs declared

	firstTS   int64     // timestamp of the batch's first packet
	firstWall time.Time // when it was appended
}

func (a *Agent) newBuilder(block bool) *builder {
	bd := &builder{a: a, b: a.q.get(), block: block}
	bd.enc.Unchecked = a.cfg.unchecked()
	bd.enc.Reset(bd.b.buf[:0])
	if a.cfg.Compress.Codec != compress.None {
		// Validate accepted the spec, so this cannot fail.
		bd.cz, _ = compress.NewEncoder(a.cfg.Compress)
	}
	return bd
}

// add appends a packet, sealing the batch first if it would overflow.
// With age > 0 it also seals once the batch spans age of packet time.
func (bd *builder) add(ts int64, ifIndex int, origLen uint32, data []byte, age time.Duration) {
	if bd.enc.Count() > 0 && bd.enc.Len()+len(data)+wire.RecordMaxOverhead > bd.a.cfg.BatchBytes {
		bd.seal()
	}
	if bd.enc.Count() == 0 {
		bd.firstTS = ts
		if age > 0 {
			bd.firstWall = time.Now()
		}
	}
	bd.enc.Append(ts, uint32(ifIndex), origLen, data)
	bd.nIf = max(bd.nIf, ifIndex+1)
	if age > 0 && ts-bd.firstTS >= int64(age) || bd.enc.Len() > bd.a.cfg.BatchBytes {
		bd.seal() // old enough, or one packet larger than a batch: alone
	}
}

// sealIfOlder seals a non-empty batch whose first packet was appended
// at least age ago (by the wall clock: for when no packets arrive).
func (bd *builder) sealIfOlder(age time.Duration) {
	if bd.enc.Count() > 0 && time.Since(bd.firstWall) >= age {
		bd.seal()
	}
}

// seal hands the current batch to the queue (or drops it when the
// queue is full and the builder may not block) and starts a new one.
func (bd *builder) seal() {
	n := bd.enc.Count()
	if n == 0 {
		return
	}
	if bd.cz != nil {
		// Compress into a second buffer; the first builds the next batch.
		records := bd.enc.Records()
		alt := bd.a.q.get()
		frame, codec := bd.cz.Compress(wire.CompressedFrame(alt.buf), records)
		bd.a.rawBytes.Add(uint64(len(records)))
		if codec != wire.CodecNone {
			bd.a.wireBytes.Add(uint64(len(frame) - wire.HeaderSize - wire.BatchHeaderSize))
			alt.buf = frame
			if !bd.a.q.push(alt, &bd.enc, codec, n, bd.nIf, bd.block) {
				bd.a.q.put(alt)
			}
			bd.enc.Reset(bd.b.buf[:0])
			return
		}
		bd.a.wireBytes.Add(uint64(len(records)))
		bd.a.q.put(alt)
	} else {
		bd.a.rawBytes.Add(uint64(len(bd.enc.Records())))
		bd.a.wireBytes.Add(uint64(len(bd.enc.Records())))
	}
	if bd.a.q.push(bd.b, &bd.enc, wire.CodecNone, n, bd.nIf, bd.block) {
		bd.b = bd.a.q.get()
	}
	bd.enc.Reset(bd.b.buf[:0])
}
