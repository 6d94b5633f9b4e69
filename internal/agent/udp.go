package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/sockopt"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// The UDP transport (Config.Transport "udp"): for links where the lowest
// latency matters more than delivery. Each sealed batch travels in one
// datagram that fits the MTU and is released from the queue once the
// kernel took it: no acknowledgement, no resend. The batch's sequence
// number (contiguous: the queue assigns it) lets the collector count
// lost, reordered and duplicated datagrams exactly.
//
// No datagram is larger than the MTU allows, so IP never fragments one
// (RFC 8900: a lost fragment loses the whole datagram, and orphaned
// fragments fill the receiver's reassembly memory). A batch larger than
// a datagram, which is one packet too big to fit alone, is cut into the
// fewest pieces that fit (wire.AppendPiece), each sent in a datagram of
// its own with a sequence number of its own: the batch takes as many
// consecutive numbers as it has pieces (queue.span), so the collector's
// count of lost numbers stays the count of lost datagrams. Every packet
// up to the snaplen travels whole, as a tcpdump user expects; the
// collector writes a batch sent in pieces once all of them arrived
// (counted: "batches sent in pieces", and their pieces).
//
// With several collectors (Config.Collectors) the agent sends to one at
// a time and moves on to the next in the list when the socket reports
// the current one unreachable: ECONNREFUSED (the host answered that no
// one listens on the port: the collector is down) or EHOSTUNREACH or
// ENETUNREACH, from the kernel's ICMP errors. A collector whose host is
// silent too (powered off, cut off) is not noticed: UDP has nothing that
// would tell. After a move it ignores such errors for a hold-down that
// starts at BackoffMin and doubles with every move, up to BackoffMax
// (±25% jitter), and starts again from BackoffMin once a collector was
// kept for BackoffMax after its hold-down: with every collector down the
// moves slow down to about one per BackoffMax. Batches sent while the errors come are lost (counted by
// the collector, which never saw them, as nothing: UDP keeps no queue).
//
// The agent has no connection to lose: it sends its Hello (name,
// instance, every interface) at start, every UDPHelloInterval and in
// front of a batch that needs an interface declared since, so a
// restarted collector knows it again within a second. It sends its
// stats every StatsInterval and, at the end, stats and a Bye (twice).
// A Reject from the collector stops it with the reason.

// UDPHelloInterval is how often a UDP agent repeats its Hello, which is
// also its heartbeat.
const UDPHelloInterval = time.Second

// udpDatagrams returns how many datagrams a batch frame of frame bytes
// takes when a datagram carries room bytes: one if it fits, else as
// many as its pieces.
func udpDatagrams(frame, room int) int {
	if frame <= room {
		return 1
	}
	return wire.PieceCount(frame, room-wire.PieceOverhead)
}

// udpSndBuf is the send buffer asked for: bursts wait there rather than
// fail with ENOBUFS.
const udpSndBuf = 4 << 20

// udpWriteTimeout bounds one send: a send buffer that does not drain in
// that long fails the datagram (counted) rather than block.
const udpWriteTimeout = time.Second

// udpLink is the UDP transport. Its counters are safe for concurrent
// use; the other fields belong to the sender goroutine (run).
type udpLink struct {
	a   *Agent
	mtu int // datagram payload bytes that fit the MTU

	datagrams  atomic.Uint64
	sendErrors atomic.Uint64
	pieced     atomic.Uint64 // batches sent in pieces
	pieces     atomic.Uint64 // their datagrams

	conn      *net.UDPConn
	warnedBuf bool // the capped send buffer was logged (once a run)
	cur       int  // index in a.collectors of the collector sent to
	declared  int  // interfaces the last hello listed
	st        wire.Stats
	ctl       []byte // control frames
	dgram     []byte // a hello and a batch together
	errLog    time.Time
	unreach   chan struct{} // signalled by a send that finds the collector unreachable; nil with one collector
}

// newUDPLink sizes datagrams for the largest header overhead of the
// collectors' address families (IPv6's when any is IPv6), so that a
// move to another collector changes no batch size.
func newUDPLink(a *Agent) *udpLink {
	v6 := false
	for _, ep := range a.collectors {
		v6 = v6 || ep.addr.Addr().Is6()
	}
	return &udpLink{a: a, mtu: a.cfg.MTU - wire.DatagramOverhead(v6)}
}

// batchLimits: a batch is one datagram, so the MTU sets its size; a
// packet too big for one grows its buffer (see builder.add) and the
// batch travels in pieces, each a datagram (see batch).
func (u *udpLink) batchLimits() (batchBytes, bufCap int) {
	return u.mtu, u.mtu + wire.RecordMaxOverhead
}

// prepareQueue charges every batch in memory its buffer's capacity, so
// that the queue's limit bounds real memory with batches of a datagram
// each, and gives a batch sent in pieces a sequence number per piece.
// Nothing is acknowledged, so there is no latency to observe.
func (u *udpLink) prepareQueue(q *queue) {
	q.minCharge = q.bufCap
	q.span = func(frame int) uint64 { return uint64(udpDatagrams(frame, u.mtu)) }
}

// ownTraffic excludes the datagrams to and from every collector. The
// agent keeps its datagrams within the MTU, but a smaller MTU on the
// path still fragments them, and the fragments after the first carry no
// ports (over IPv6 none matches "udp": the fragment header comes first),
// so fragments to and from the collector's address are excluded too.
func (u *udpLink) ownTraffic() string {
	return u.a.excludeCollectors(func(ap netip.AddrPort) string {
		host, port := ap.Addr(), ap.Port()
		if host.Is4() {
			return fmt.Sprintf("udp and host %s and (port %d or ip[6:2] & 0x1fff != 0)", host, port)
		}
		return fmt.Sprintf("host %s and (udp port %d or ip6[6] == 44)", host, port)
	})
}

// replayRate: over UDP MaxRate paces a file replay too, since nothing
// else slows it down.
func (u *udpLink) replayRate() float64 { return float64(u.a.cfg.MaxRate) }

func (u *udpLink) report(st *Stats) {
	st.Acked, st.BatchesAcked = 0, 0 // released once sent, never acknowledged
	st.UDP = true
	st.Datagrams, st.SendErrors = u.datagrams.Load(), u.sendErrors.Load()
	st.Pieced, st.Pieces = u.pieced.Load(), u.pieces.Load()
}

func (u *udpLink) warnInsecure(log *slog.Logger) {
	log.Warn("INSECURE: UDP, no encryption: captured packets cross the network in clear text, the collector is not authenticated, and what the network loses is lost (counted by the collector)")
}

// run sends the queue's batches over UDP until ctx ends, then says
// goodbye and returns nil; or returns an error wrapping ErrRejected
// when the collector refuses the agent.
func (u *udpLink) run(ctx context.Context) error {
	a := u.a
	rejected := make(chan error, 1) // only ever a reject
	unreach := make(chan struct{}, 1)
	if err := u.open(ctx, rejected, unreach); err != nil || u.conn == nil {
		return err
	}
	defer func() {
		if u.conn != nil {
			u.conn.Close()
		}
	}()
	u.hello()

	helloTick := time.NewTicker(UDPHelloInterval)
	defer helloTick.Stop()
	statsTick := time.NewTicker(a.cfg.StatsInterval)
	defer statsTick.Stop()
	cursor := a.q.stats().acked
	ready := make(chan struct{})
	close(ready)
	backoff := a.cfg.BackoffMin // of the hold-down after the next move
	var moved time.Time         // of the last move
	var hold time.Duration      // after it
	for {
		// One select for all: under a steady stream of batches the
		// hellos (a restarted collector needs them) and stats still go
		// out, and a reject ends the stream at once.
		b := a.q.next(cursor)
		next := a.q.pushed
		if b != nil {
			next = ready
		}
		select {
		case <-next:
			if b != nil {
				u.batch(b)
				cursor = b.seq
				a.q.ack(b.seq) // released: nothing will be resent
			}
		case <-helloTick.C:
			u.hello()
		case <-statsTick.C:
			u.stats()
		case <-unreach:
			since := time.Since(moved)
			if !moved.IsZero() && since < hold {
				continue // a stale signal, or the hold-down after the last move
			}
			if moved.IsZero() || since >= hold+a.cfg.BackoffMax {
				backoff = a.cfg.BackoffMin
			}
			from := a.collectors[u.cur].name
			u.conn.Close()
			u.cur = (u.cur + 1) % len(a.collectors)
			a.failovers.Add(1)
			a.log.Warn("collector unreachable, failing over to the next", "from", from, "to", a.collectors[u.cur].name)
			if err := u.open(ctx, rejected, unreach); err != nil || u.conn == nil {
				return err
			}
			moved = time.Now()
			hold = time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))
			backoff = min(2*backoff, a.cfg.BackoffMax)
			u.hello()
		case err := <-rejected:
			return err
		case <-ctx.Done():
			u.stats()
			// Twice: a lost goodbye leaves the file open until the
			// collector's peer timeout and idle close.
			u.send(wire.AppendBye(nil))
			u.send(wire.AppendBye(nil))
			return nil
		}
	}
}

// open makes u.conn, the socket to collector u.cur, and starts its
// reply reader, which sends a reject to rejected and, with more than one
// collector, signals unreach when the socket reports the collector
// unreachable. u.conn stays nil if ctx ended first.
func (u *udpLink) open(ctx context.Context, rejected chan<- error, unreach chan struct{}) error {
	a := u.a
	u.conn = nil
	ep := &a.collectors[u.cur]
	conn, err := a.udpDial(ctx, ep)
	if conn == nil {
		return err
	}
	u.conn = conn
	if _, snd, err := sockopt.SetBuffers(conn, 0, udpSndBuf); err != nil {
		a.log.Warn("UDP send buffer not set", "err", err)
	} else if snd > 0 && snd < udpSndBuf && !u.warnedBuf {
		u.warnedBuf = true
		a.log.Warn("UDP send buffer capped by net.core.wmem_max: bursts may fail with ENOBUFS (counted as send errors); forcing it needs CAP_NET_ADMIN, or raise net.core.wmem_max (docs/privileges.md)",
			"bytes", snd, "asked", udpSndBuf)
	}
	if len(a.collectors) == 1 {
		unreach = nil
	}
	u.unreach = unreach
	go func() {
		if err := a.udpReplies(conn, unreach); err != nil {
			rejected <- err
		}
	}()
	a.log.Info("sending to collector over UDP", "addr", ep.name, "mtu", a.cfg.MTU, "datagram_bytes", u.mtu)
	return nil
}

// unreachable reports whether err says the collector cannot be reached:
// its port is closed, or its host or network unreachable.
func unreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// udpDial makes the socket, connected to collector ep (no packet is
// sent: connecting a UDP socket only picks the route), retrying with
// backoff while there is no route. conn is nil once ctx ended.
func (a *Agent) udpDial(ctx context.Context, ep *endpoint) (*net.UDPConn, error) {
	backoff := a.cfg.BackoffMin
	for {
		conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(ep.addr))
		if err == nil {
			return conn, nil
		}
		a.log.Warn("cannot make a UDP socket to the collector", "addr", ep.name, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))):
		}
		backoff = min(2*backoff, a.cfg.BackoffMax)
	}
}

// udpReplies reads what the collector sends back, which is only ever a
// Reject; it returns that as an error wrapping ErrRejected, or nil once
// the socket is closed. An ICMP error that says the collector is
// unreachable signals unreach (nil: never); anything else is ignored.
func (a *Agent) udpReplies(conn *net.UDPConn, unreach chan struct{}) error {
	buf := make([]byte, 2048)
	for {
		n, err := conn.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			// ECONNREFUSED (no collector listening yet) and the like.
			if unreachable(err) {
				signal(unreach)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		h, p, _, err := wire.NextFrame(buf[:n], wire.Limits{})
		if err != nil || h.Type != wire.TypeReject {
			continue
		}
		reason, err := wire.ParseReject(p)
		if err != nil {
			reason = err.Error()
		}
		return fmt.Errorf("%w: %s", ErrRejected, reason)
	}
}

// send sends one datagram, counting it, or counting and logging (at
// most once a second) the error: a failed send is not fatal, its batch
// is lost like one the network drops.
func (u *udpLink) send(d []byte) bool {
	u.conn.SetWriteDeadline(time.Now().Add(udpWriteTimeout))
	if _, err := u.conn.Write(d); err != nil {
		if unreachable(err) {
			signal(u.unreach)
		}
		u.sendErrors.Add(1)
		if now := time.Now(); now.Sub(u.errLog) >= time.Second {
			u.errLog = now
			u.a.log.Warn("sending a datagram failed; its batch is lost", "err", err, "send_errors", u.sendErrors.Load())
		}
		return false
	}
	u.datagrams.Add(1)
	return true
}

// helloFrame returns a Hello listing every interface declared so far.
func (u *udpLink) helloFrame() []byte {
	a := u.a
	h := wire.Hello{Instance: a.instance, Codecs: 1<<wire.CodecNone | 1<<a.cfg.Compress.Wire(), Name: a.cfg.Name, Host: a.host,
		Token: a.cfg.Token, Interfaces: a.interfaces()}
	u.declared = len(h.Interfaces)
	u.ctl = wire.AppendHello(u.ctl[:0], &h)
	return u.ctl
}

func (u *udpLink) hello() { u.send(u.helloFrame()) }

func (u *udpLink) stats() {
	u.a.collectStats(&u.st)
	u.ctl = wire.AppendStats(u.ctl[:0], &u.st)
	u.send(u.ctl)
}

// batch sends batch b in one datagram, after a hello if it uses an
// interface declared since the last one: in the same datagram when both
// fit the MTU. A batch larger than a datagram goes in pieces, one
// datagram each, the hello (if any) alone before them.
func (u *udpLink) batch(b *batch) {
	d := b.buf
	if b.nIfaces > u.declared {
		h := u.helloFrame()
		if len(h)+len(d) <= u.mtu {
			u.dgram = append(append(u.dgram[:0], h...), d...)
			d = u.dgram
		} else {
			u.send(h)
		}
	}
	if len(d) <= u.mtu {
		if u.send(d) {
			u.a.sent.Add(b.packets)
			u.a.batchesSent.Add(1)
		}
		return
	}
	n := udpDatagrams(len(d), u.mtu)
	ok := true
	for i := range n {
		u.dgram = wire.AppendPiece(u.dgram[:0], b.seq, uint32(i), uint32(n), d)
		ok = u.send(u.dgram) && ok
	}
	u.pieced.Add(1)
	u.pieces.Add(uint64(n))
	if ok {
		u.a.sent.Add(b.packets)
		u.a.batchesSent.Add(1)
	}
}
