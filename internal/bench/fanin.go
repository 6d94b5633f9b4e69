package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// FaninConfig sets up Fanin. The zero value means the defaults of
// "pcapsync bench fanin".
type FaninConfig struct {
	Agents   int           // simulated agents; 0 means 10000
	Rate     int           // packets per second per agent, one per batch; 0 means 10
	Size     int           // bytes per packet; 0 means 100
	Duration time.Duration // sending time, after every agent is connected; 0 means 10s
	// Dir is the collector's output directory; "" means a temporary
	// directory, removed afterwards.
	Dir string
	// DialConcurrency bounds connections being set up at once (the
	// listen backlog is finite); 0 means 128.
	DialConcurrency int
	// Logger is the collector's; nil discards its log.
	Logger *slog.Logger
	// CPUProfile, if set, receives a CPU profile of the sending window.
	// Collector goroutines carry the pprof label side=collector, the
	// simulated agents side=agent ("go tool pprof -tags" splits them);
	// the Go runtime's own work (GC) carries none.
	CPUProfile io.Writer
	// CollectorCommand, if set, is the command line of a "pcapsync
	// collector" (binary and subcommand) that Fanin starts as a child
	// process (adding --listen, --dir, --insecure, --fsync never,
	// --max-conns, --max-conns-per-source, --summary json, --metrics and --pprof) instead of
	// running Core and Server in this process: each process then needs
	// one descriptor per agent for its sockets (the collector its files
	// too, within its --max-open-files), and the collector's CPU, memory
	// and profile are its own (CPUProfile comes from its /debug/pprof).
	CollectorCommand []string
}

func (c FaninConfig) withDefaults() FaninConfig {
	if c.Agents <= 0 {
		c.Agents = 10000
	}
	if c.Rate <= 0 {
		c.Rate = 10
	}
	if c.Size <= 0 {
		c.Size = 100
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = 128
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// FaninResult is what Fanin measured. CPU and memory are the whole
// process's: collector and simulated agents together.
type FaninResult struct {
	Agents    int           // agents asked for
	Connected int           // agents that completed the handshake
	Setup     time.Duration // time to connect every agent
	Window    time.Duration // sending time measured
	NoFile    uint64        // RLIMIT_NOFILE in force

	Sent        uint64 // packets written to the collector by the agents
	Written     uint64 // packets the collector wrote (Counters.Packets)
	Batches     uint64 // batches sent
	Acked       uint64 // batches acknowledged
	AgentErrors int    // agents whose connection failed during the run
	FirstError  error  // the first of them

	AckP50, AckP99, AckMax time.Duration // from a batch's write to its ack
	// FirstP50 and FirstP99 are of each agent's first batch only (the
	// collector opens the agent's file for it); SteadyP50 and SteadyP99
	// of the batches sent after the first second of sending.
	FirstP50, FirstP99, SteadyP50, SteadyP99 time.Duration
	CPUUser, CPUSys                          time.Duration // process CPU over the window
	PeakRSS                                  int64         // VmHWM at the end, bytes: setup included
	RSS                                      int64         // VmRSS at the end of the window, bytes
	PeakRSSSending                           int64         // VmHWM at the end of the window: setup and sending only
	Drain                                    time.Duration // from the end of sending to the last ack
	Stop                                     time.Duration // goodbyes and collector shutdown (files closed)
	CollectorErrors                          uint64        // collector protocol, file and peer-timeout errors

	// With CollectorCommand: the collector process's CPU over the window,
	// its VmHWM before it is stopped and VmRSS at the end of
	// the window; CPU and memory above are then the agents' alone.
	CollectorCPUUser, CollectorCPUSys time.Duration
	CollectorPeakRSS, CollectorRSS    int64
}

// CPUPercent returns the process's CPU time over the window as a
// percentage of one core.
func (r FaninResult) CPUPercent() float64 {
	return 100 * (r.CPUUser + r.CPUSys).Seconds() / r.Window.Seconds()
}

// fdSlack is the file descriptors Fanin keeps for the runtime, the
// listener and the collector's state file beyond three per agent.
const fdSlack = 256

// MaxAgents returns how many agents Fanin can run with nofile file
// descriptors.
func MaxAgents(nofile uint64) int {
	if nofile < fdSlack {
		return 0
	}
	return int((nofile - fdSlack) / 3)
}

// simAgent is one simulated agent: a TCP connection speaking the real
// protocol, a sender and a reader goroutine.
type simAgent struct {
	conn net.Conn
	fr   *wire.FrameReader

	mu    sync.Mutex
	sent  []time.Time // write time of batch seq i+1
	acked uint64
	lat   []time.Duration
	err   error
}

// Fanin runs one collector (Core and Server, plain TCP, no fsync, output
// to cfg.Dir) and cfg.Agents simulated agents in this process, each on
// its own loopback TCP connection: hello, then one batch of one packet
// every 1/Rate seconds (agents are spread evenly over the period), and
// acknowledgements read as they come. After cfg.Duration the agents stop,
// wait for their last acknowledgements and close; Fanin then stops the
// collector and compares the packets it wrote with those sent.
func Fanin(ctx context.Context, cfg FaninConfig) (FaninResult, error) {
	cfg = cfg.withDefaults()
	res := FaninResult{Agents: cfg.Agents}
	// Per agent: its socket, the collector's socket and its file; plus
	// slack for the runtime, listeners and logs. Only the agents' sockets
	// with the collector in its own process.
	need := uint64(3*cfg.Agents + fdSlack)
	if len(cfg.CollectorCommand) > 0 {
		need = uint64(cfg.Agents + fdSlack)
	}
	nofile, err := raiseNoFile(need)
	res.NoFile = nofile
	if err != nil && nofile < need {
		return res, fmt.Errorf("%d agents need %d file descriptors (a socket each side and a file per agent), RLIMIT_NOFILE allows %d, enough for %d agents; raise the hard limit (ulimit -Hn, or CAP_SYS_RESOURCE): %w", cfg.Agents, need, nofile, MaxAgents(nofile), err)
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pcapsync-fanin-"); err != nil {
			return res, err
		}
		defer os.RemoveAll(dir)
	}
	var coll faninCollector
	if len(cfg.CollectorCommand) > 0 {
		coll, err = startProcCollector(ctx, cfg.CollectorCommand, dir, cfg.Agents)
	} else {
		coll, err = startLocalCollector(cfg, dir)
	}
	if err != nil {
		return res, err
	}
	var collSum collector.Summary
	stopCollector := func() error {
		var err error
		collSum, err = coll.stop()
		return err
	}

	// Connect every agent; idle ones ping so the collector's peer
	// timeout does not end them while the others connect.
	agents := make([]*simAgent, cfg.Agents)
	start := &startSignal{ch: make(chan struct{})}
	var senders, readers sync.WaitGroup
	var batches, packets atomic.Uint64
	var failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(a *simAgent, err error) {
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
		failed.Add(1)
		errOnce.Do(func() { firstErr = err })
	}
	period := time.Second / time.Duration(cfg.Rate)
	perBatch := int(cfg.Duration/period) + 2
	t0 := time.Now()
	sem := make(chan struct{}, cfg.DialConcurrency)
	var dialErr error
	var dialMu sync.Mutex
	var dialing sync.WaitGroup
	for i := range agents {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		dialing.Add(1)
		go pprof.Do(ctx, pprof.Labels("side", "agent"), func(ctx context.Context) {
			defer func() { <-sem; dialing.Done() }()
			a, err := connectAgent(ctx, coll.addr(), i, perBatch)
			if err != nil {
				dialMu.Lock()
				if dialErr == nil {
					dialErr = fmt.Errorf("agent %d: %w", i, err)
				}
				dialMu.Unlock()
				return
			}
			agents[i] = a
			readers.Add(1)
			go func() { defer readers.Done(); a.read(fail) }()
			senders.Add(1)
			go func() {
				defer senders.Done()
				a.send(ctx, start, i, cfg, period, &batches, &packets, fail)
			}()
		})
	}
	dialing.Wait()
	res.Setup = time.Since(t0)
	for _, a := range agents {
		if a != nil {
			res.Connected++
		}
	}
	closeAll := func() {
		for _, a := range agents {
			if a != nil {
				a.conn.Close()
			}
		}
	}
	if dialErr != nil || ctx.Err() != nil {
		start.aborted = true
		close(start.ch)
		closeAll()
		senders.Wait()
		readers.Wait()
		stopCollector()
		return res, cmpErr(ctx.Err(), fmt.Errorf("connecting %d agents (%d connected): %w", cfg.Agents, res.Connected, dialErr))
	}

	// Send for the window.
	u0, s0, err := cpuTimes()
	if err != nil {
		return res, err
	}
	cu0, cs0, err := coll.cpu()
	if err != nil {
		return res, err
	}
	profiled := make(chan error, 1)
	switch {
	case cfg.CPUProfile == nil:
		profiled <- nil
	case len(cfg.CollectorCommand) > 0:
		go func() { profiled <- coll.profile(ctx, cfg.Duration, cfg.CPUProfile) }()
	default:
		if err := pprof.StartCPUProfile(cfg.CPUProfile); err != nil {
			return res, err
		}
	}
	begin := time.Now().Add(20 * time.Millisecond)
	start.at = begin
	close(start.ch)
	senders.Wait()
	res.Window = time.Since(begin)
	if cfg.CPUProfile != nil && len(cfg.CollectorCommand) == 0 {
		pprof.StopCPUProfile()
		profiled <- nil
	}
	u1, s1, err := cpuTimes()
	if err != nil {
		return res, err
	}
	res.CPUUser, res.CPUSys = u1-u0, s1-s0
	res.PeakRSSSending, res.RSS, _ = memStatus()
	if len(cfg.CollectorCommand) > 0 {
		cu1, cs1, err := coll.cpu()
		if err != nil {
			return res, err
		}
		res.CollectorCPUUser, res.CollectorCPUSys = cu1-cu0, cs1-cs0
		_, res.CollectorRSS = coll.mem()
	}
	res.Batches, res.Sent = batches.Load(), packets.Load()

	// Wait for the last acknowledgements, then say goodbye (FIN).
	t1 := time.Now()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var acked uint64
		for _, a := range agents {
			a.mu.Lock()
			acked += a.acked
			a.mu.Unlock()
		}
		res.Acked = acked
		if acked >= res.Batches {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Drain = time.Since(t1)
	perr := <-profiled
	t2 := time.Now()
	closeAll()
	readers.Wait()
	if len(cfg.CollectorCommand) > 0 {
		res.CollectorPeakRSS, _ = coll.mem() // before it exits: VmHWM goes with it
	}
	cerr := errors.Join(stopCollector(), perr)
	res.Stop = time.Since(t2)
	res.Written = collSum.Packets
	res.CollectorErrors = collSum.ProtocolErrors + collSum.FileErrors + collSum.PeerTimeouts
	res.PeakRSS, _, _ = memStatus()
	res.AgentErrors, res.FirstError = int(failed.Load()), firstErr

	var lat, first, steady []time.Duration
	settled := begin.Add(time.Second)
	for _, a := range agents {
		lat = append(lat, a.lat...)
		if len(a.lat) > 0 {
			first = append(first, a.lat[0])
		}
		for k, l := range a.lat {
			if !a.sent[k].Before(settled) {
				steady = append(steady, l)
			}
		}
	}
	for _, l := range [][]time.Duration{first, steady, lat} {
		slices.Sort(l)
	}
	res.AckP50, res.AckP99 = percentile(lat, 50), percentile(lat, 99)
	res.FirstP50, res.FirstP99 = percentile(first, 50), percentile(first, 99)
	res.SteadyP50, res.SteadyP99 = percentile(steady, 50), percentile(steady, 99)
	if len(lat) > 0 {
		res.AckMax = lat[len(lat)-1]
	}
	if cerr != nil {
		return res, fmt.Errorf("stopping the collector: %w", cerr)
	}
	return res, ctx.Err()
}

// startSignal starts every sender at once: at and aborted are set
// before ch is closed.
type startSignal struct {
	ch      chan struct{}
	at      time.Time
	aborted bool
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// connectAgent dials the collector and completes the handshake as agent
// number i.
func connectAgent(ctx context.Context, addr string, i, batches int) (*simAgent, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	h := wire.Hello{Name: fmt.Sprintf("sim%05d", i), Host: "bench",
		Interfaces: []wire.Interface{{Name: "sim0", LinkType: 1, SnapLen: 262144}}}
	rand.Read(h.Instance[:])
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write(wire.AppendHello(nil, &h)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	fr := wire.NewFrameReader(bufio.NewReaderSize(conn, 4096), wire.Limits{})
	hd, p, err := fr.Next()
	if err == nil {
		switch hd.Type {
		case wire.TypeWelcome:
			var w wire.Welcome
			if w, err = wire.ParseWelcome(p); err == nil && w.LastSeq != 0 {
				err = fmt.Errorf("welcome says seq %d is held for a new instance", w.LastSeq)
			}
		case wire.TypeReject:
			reason, _ := wire.ParseReject(p)
			err = fmt.Errorf("rejected: %s", reason)
		default:
			err = fmt.Errorf("got %s, want welcome", hd.Type)
		}
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return &simAgent{conn: conn, fr: fr, sent: make([]time.Time, 0, batches), lat: make([]time.Duration, 0, batches)}, nil
}

// send pings every second until the start time arrives, then sends one
// batch of one packet per period, starting at an offset spreading the
// agents evenly over the period, until the window ends.
func (a *simAgent) send(ctx context.Context, start *startSignal, i int, cfg FaninConfig, period time.Duration, batches, packets *atomic.Uint64, fail func(*simAgent, error)) {
	ping := wire.AppendPing(nil)
	idle := time.NewTicker(time.Second)
	var begin time.Time
wait:
	for {
		select {
		case <-start.ch:
			if start.aborted {
				idle.Stop()
				return
			}
			begin = start.at
			break wait
		case <-idle.C:
			if _, err := a.conn.Write(ping); err != nil {
				fail(a, fmt.Errorf("ping: %w", err))
				idle.Stop()
				return
			}
		}
	}
	idle.Stop()
	end := begin.Add(cfg.Duration)
	first := begin.Add(period * time.Duration(i%cfg.Agents) / time.Duration(cfg.Agents))
	time.Sleep(time.Until(first))
	tick := time.NewTicker(period)
	defer tick.Stop()
	data := make([]byte, cfg.Size)
	for j := range data {
		data[j] = byte(i + j)
	}
	var enc wire.BatchEncoder
	buf := make([]byte, 0, wire.HeaderSize+wire.BatchHeaderSize+wire.RecordMaxOverhead+cfg.Size)
	for seq := uint64(1); ; seq++ {
		now := time.Now()
		if !now.Before(end) || ctx.Err() != nil {
			return
		}
		enc.Reset(buf)
		enc.Append(now.UnixNano(), 0, 0, data)
		frame := enc.Finish(seq)
		a.mu.Lock()
		a.sent = append(a.sent, now)
		a.mu.Unlock()
		if _, err := a.conn.Write(frame); err != nil {
			fail(a, fmt.Errorf("batch %d: %w", seq, err))
			return
		}
		batches.Add(1)
		packets.Add(1)
		<-tick.C
	}
}

// read reads acknowledgements until the connection ends and records
// each batch's latency from its write to the ack that covers it.
func (a *simAgent) read(fail func(*simAgent, error)) {
	for {
		h, p, err := a.fr.Next()
		if err != nil {
			if err != io.EOF && !errors.Is(err, net.ErrClosed) {
				fail(a, fmt.Errorf("reading acks: %w", err))
			}
			return
		}
		if h.Type != wire.TypeAck {
			fail(a, fmt.Errorf("got %s, want ack", h.Type))
			return
		}
		seq, err := wire.ParseAck(p)
		if err != nil {
			fail(a, err)
			return
		}
		now := time.Now()
		a.mu.Lock()
		if seq > uint64(len(a.sent)) {
			a.mu.Unlock()
			fail(a, fmt.Errorf("ack for batch %d, only %d sent", seq, len(a.sent)))
			return
		}
		for ; a.acked < seq; a.acked++ {
			a.lat = append(a.lat, now.Sub(a.sent[a.acked]))
		}
		a.mu.Unlock()
	}
}
