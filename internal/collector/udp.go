package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/sockopt"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// UDP transport timings.
const (
	// udpCommitDelay bounds how long a written batch waits for the next
	// commit (its write(2) to the file) while more datagrams arrive.
	udpCommitDelay = time.Millisecond
	// udpSweep is how often sessions are checked for the peer timeout.
	udpSweep = 250 * time.Millisecond
	// udpRcvBuf is the receive buffer asked for: bursts the collector
	// has not read yet wait here, and beyond it the kernel drops them.
	udpRcvBuf = 4 << 20
	// udpRejectGap spaces replies to refused hellos.
	udpRejectGap = 100 * time.Millisecond
	// udpLossLog spaces the warnings about a session's lost datagrams.
	udpLossLog = 10 * time.Second
)

// UDPCounters are the UDP transport's totals. Safe for concurrent use.
// Per agent counts are in UDPServer.AgentCounts.
type UDPCounters struct {
	Datagrams atomic.Uint64 // datagrams read and handled
	Unknown   atomic.Uint64 // from a source without a session (no hello yet, or it ended): dropped
	Malformed atomic.Uint64 // broken datagrams, or frames a session refused: the rest of the datagram dropped
	// Evicted counts incomplete batches dropped to stay within
	// Config.UDPReassemblyBytes (also counted Incomplete for their agent).
	Evicted atomic.Uint64
	// ReassemblyBytes is the reassembly memory in use now (a gauge).
	ReassemblyBytes atomic.Int64
}

// UDPAgentCounts are one agent name's UDP totals, over its sessions.
// Its JSON keys (in UDPAgentSummary) are the field names in snake_case.
type UDPAgentCounts struct {
	SeqCounts
	Malformed   uint64 `json:"malformed"`   // datagrams from its source dropped as malformed
	Pieces      uint64 `json:"pieces"`      // datagrams that carried a piece of a batch (also in Received)
	Reassembled uint64 `json:"reassembled"` // batches put back together from their pieces
	Incomplete  uint64 `json:"incomplete"`  // batches of which pieces arrived but not all in time (or over the reassembly limits): dropped
}

// Add adds o's counts to c.
func (c *UDPAgentCounts) Add(o UDPAgentCounts) {
	c.SeqCounts.Add(o.SeqCounts)
	c.Malformed += o.Malformed
	c.Pieces += o.Pieces
	c.Reassembled += o.Reassembled
	c.Incomplete += o.Incomplete
}

// UDPServer is the UDP transport of a Core. There is no connection and
// no acknowledgement: the agent's source address and port identify its
// session, which its Hello opens (the agent repeats it every second, so
// a restarted collector learns it again; a datagram from a source
// without a session is counted and dropped). Each datagram carries whole
// frames, at most one batch or piece of one (see wire.CheckDatagram);
// its sequence number tells lost, reordered and duplicated datagrams
// apart (seqWindow). Reordered ones are written too, nothing is resent.
// A batch sent in pieces is written once all of them arrived, within
// bounded memory (see reassembly.go).
//
// One goroutine, Serve's, reads every datagram and drives the sessions;
// a malformed datagram is counted, logged at most once a second and
// dropped, and costs only its own processing: nothing is allocated on
// what a peer claims. A session ends at the agent's Bye (its file
// closes), after PeerTimeout without a datagram (its file stays open for
// IdleClose), when a hello from the same source names another instance
// (the agent restarted), or when another connection of its agent name
// takes over.
//
// UDP is plaintext: Serve refuses to run without Config.Insecure. A
// Token, if configured, is still required in every Hello.
type UDPServer struct {
	core *Core
	log  *slog.Logger

	// Counters may be read at any time.
	Counters UDPCounters

	// mu guards peers, agents and every peer's state. It is taken
	// after agent.handover (a takeover kicks a session from begin) and
	// before Core.mu and the store's locks; Serve releases it around
	// begin.
	mu     sync.Mutex
	peers  map[netip.AddrPort]*udpPeer
	agents map[string]*UDPAgentCounts // sessions that ended, by agent name

	conn       *net.UDPConn
	lastReject time.Time
	unknownLog frontdoor.RateLog
	badLog     frontdoor.RateLog
	busyLog    frontdoor.RateLog
	dirty      []*udpPeer // written to since the last commit

	// Batches in progress from pieces, oldest first, and the bytes
	// they count against Config.UDPReassemblyBytes; rsFree keeps a few
	// for reuse.
	rsHead, rsTail *reassembly
	rsBytes        int64
	rsFree         []*reassembly
}

// udpPeer is one agent session: a source address and an instance.
type udpPeer struct {
	src       netip.AddrPort
	name      string
	instance  [16]byte
	sess      *session
	win       seqWindow
	malformed uint64
	last      time.Time // of the last datagram
	dirty     bool      // in UDPServer.dirty
	kicked    bool      // taken over before begin returned
	ended     bool
	warned    uint64    // lost datagrams when the last warning was logged
	warnedAt  time.Time // of the last warning

	rs                              []*reassembly // batches in progress from pieces, oldest first
	pieces, reassembled, incomplete uint64
}

// counts returns p's counts so far.
func (p *udpPeer) counts() UDPAgentCounts {
	return UDPAgentCounts{SeqCounts: p.win.SeqCounts, Malformed: p.malformed, Pieces: p.pieces,
		Reassembled: p.reassembled, Incomplete: p.incomplete}
}

// NewUDPServer returns a UDP transport for core. It can serve beside a
// Server (TCP) on the same Core.
func NewUDPServer(core *Core) *UDPServer {
	return &UDPServer{core: core, log: core.log.With("transport", "udp"),
		peers: map[netip.AddrPort]*udpPeer{}, agents: map[string]*UDPAgentCounts{}}
}

// Serve reads datagrams from conn until ctx ends, then closes conn,
// ends every session (committing what was written; their files are
// closed by Core.Close) and returns nil. Without Insecure in the Config
// it returns ErrUDPInsecure at once.
func (u *UDPServer) Serve(ctx context.Context, conn *net.UDPConn) error {
	if !u.core.cfg.Insecure {
		conn.Close()
		return ErrUDPInsecure
	}
	u.conn = conn
	u.log.Warn("INSECURE: UDP, no encryption: captured packets cross the network in clear text and any host that reaches this port can write as any agent name (or spoof an agent's address)",
		"token_required", u.core.cfg.Token != "")
	if rcv, _, err := sockopt.SetBuffers(conn, udpRcvBuf, 0); err != nil {
		u.log.Warn("UDP receive buffer not set", "err", err)
	} else if rcv > 0 && rcv < udpRcvBuf {
		u.log.Warn("UDP receive buffer smaller than asked (not root? raise net.core.rmem_max): bursts may be dropped by the kernel", "bytes", rcv, "asked", udpRcvBuf)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	err := u.loop(ctx)
	u.mu.Lock()
	for _, p := range u.peers {
		u.endPeer(p, false, "collector shutting down")
	}
	u.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (u *UDPServer) loop(ctx context.Context) error {
	buf := make([]byte, 64<<10) // more than any datagram
	var dirtySince time.Time
	lastSweep := time.Now()
	var readErrs frontdoor.RateLog
	for {
		deadline := lastSweep.Add(udpSweep)
		if !dirtySince.IsZero() {
			deadline = dirtySince.Add(udpCommitDelay)
		}
		u.conn.SetReadDeadline(deadline)
		n, src, err := u.conn.ReadFromUDPAddrPort(buf)
		now := time.Now()
		switch {
		case err == nil:
			if u.datagram(buf[:n], src, now) && dirtySince.IsZero() {
				dirtySince = now
			}
			u.Counters.Datagrams.Add(1)
		case isTimeout(err):
		case ctx.Err() != nil || errors.Is(err, net.ErrClosed):
			return err
		default:
			// ICMP errors and resource shortages pass; nothing here is
			// a reason to stop receiving.
			readErrs.Warn(u.log, "reading a datagram failed", "err", err)
			if frontdoor.IsResourceError(err) {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if !dirtySince.IsZero() && now.Sub(dirtySince) >= udpCommitDelay {
			u.commit()
			dirtySince = time.Time{}
		}
		if now.Sub(lastSweep) >= udpSweep {
			u.sweep(now)
			lastSweep = now
		}
	}
}

// datagram handles one datagram from src and reports whether it wrote
// something to commit.
func (u *UDPServer) datagram(d []byte, src netip.AddrPort, now time.Time) (wrote bool) {
	lim := u.core.limits()
	u.mu.Lock()
	defer u.mu.Unlock()
	p := u.peers[src]
	if _, err := wire.CheckDatagram(d, lim); err != nil {
		u.malformed(p, src, err)
		return false
	}
	for rest := d; len(rest) > 0; {
		h, payload, next, _ := wire.NextFrame(rest, lim) // checked above
		rest = next
		if p != nil && p.ended { // said goodbye earlier in this datagram
			p = nil
		}
		if h.Type == wire.TypeHello {
			if p = u.hello(p, src, payload, len(d), now); p == nil {
				return wrote
			}
			continue
		}
		if p == nil {
			if h.Type != wire.TypeBye { // a repeated goodbye is no news
				u.Counters.Unknown.Add(1)
				u.unknownLog.Warn(u.log, "datagram from a source without a session (no hello yet): dropped", "remote", src.String(), "frame", h.Type.String())
			}
			return wrote
		}
		p.last = now
		w, err := u.frame(p, h, payload)
		if err != nil {
			u.malformed(p, src, err)
			return wrote
		}
		wrote = wrote || w
	}
	return wrote
}

// frame handles one frame of p's session; wrote reports a batch written.
func (u *UDPServer) frame(p *udpPeer, h wire.Header, payload []byte) (wrote bool, err error) {
	switch h.Type {
	case wire.TypeBatch:
		b, err := wire.ParseBatch(h.Flags, payload, wire.BatchLimits{})
		if err != nil {
			return false, err
		}
		if b.Seq == 0 {
			return false, fmt.Errorf("batch sequence 0: %w", wire.ErrMalformed)
		}
		if !u.admit(p, b.Seq) {
			return false, nil
		}
		return u.write(p, &b, h.Flags, payload)
	case wire.TypePiece:
		maxTotal := min(u.core.limits().MaxPieceTotal(), uint32(min(u.core.cfg.UDPReassemblyBytes, math.MaxUint32)))
		pc, err := wire.ParsePiece(payload, maxTotal)
		if err != nil {
			return false, err
		}
		return u.piece(p, &pc)
	case wire.TypeIface:
		idx, ifc, err := wire.ParseIface(payload)
		if err != nil || int(idx) < len(p.sess.ifmap) {
			return false, err // a repeat of a known one is fine
		}
		return false, p.sess.addIface(idx, ifc)
	case wire.TypeStats:
		return false, p.sess.recordStats(payload)
	case wire.TypePing:
		return false, wire.ParsePing(payload)
	case wire.TypeBye:
		if err := wire.ParseBye(payload); err != nil {
			return false, err
		}
		u.endPeer(p, true, "goodbye")
		return false, nil
	}
	return false, fmt.Errorf("unexpected %s frame: %w", h.Type, wire.ErrUnknownType)
}

// write writes batch b of p's session and marks the session for the
// next commit. A storage error is logged and the batch lost (nothing
// is resent over UDP); any other error is the batch's.
func (u *UDPServer) write(p *udpPeer, b *wire.Batch, flags uint8, payload []byte) (wrote bool, err error) {
	if _, err := p.sess.write(b, flags, payload, false); err != nil {
		if errors.Is(err, ErrStorage) {
			// No resend over UDP: what was written since the last
			// commit is gone (counted as file errors); carry on.
			u.log.Error("storage error: batches since the last commit are lost", "agent", p.name, "err", err)
			return false, nil
		}
		return false, err
	}
	if !p.dirty {
		p.dirty = true
		u.dirty = append(u.dirty, p)
	}
	return true, nil
}

// hello handles a Hello from src, whose session (nil if none) is p, and
// returns the session the rest of the datagram belongs to (nil: drop
// it). A repeated hello declares interfaces added since; a hello of
// another instance or name ends p and begins a new session. u.mu is
// held, and released around Core.begin.
func (u *UDPServer) hello(p *udpPeer, src netip.AddrPort, payload []byte, size int, now time.Time) *udpPeer {
	hl, err := wire.ParseHello(payload)
	if err != nil {
		u.malformed(p, src, err)
		return nil
	}
	if p != nil && p.instance == hl.Instance && p.name == hl.Name {
		p.last = now
		for i := len(p.sess.ifmap); i < len(hl.Interfaces); i++ {
			if err := p.sess.addIface(uint32(i), hl.Interfaces[i]); err != nil {
				u.malformed(p, src, err)
				return nil
			}
		}
		return p
	}
	if p != nil {
		u.endPeer(p, false, "a new instance or agent name sends from its address")
	}
	log := u.log.With("remote", src.String(), "agent", hl.Name)
	if len(u.peers) >= u.core.cfg.MaxConns {
		u.core.Counters.OverLimit.Add(1)
		u.unknownLog.Warn(log, "UDP session limit reached (--max-conns): hello dropped", "max_conns", u.core.cfg.MaxConns)
		return nil
	}
	if err := u.core.authenticate(&hl, nil); err != nil {
		u.core.Counters.Rejected.Add(1)
		u.refuse(log, src, err, size, now)
		return nil
	}
	np := &udpPeer{src: src, name: hl.Name, instance: hl.Instance, last: now}
	u.mu.Unlock()
	sess, welcome, err := u.core.begin(&hl, Peer{Addr: src.String(), Transport: "udp"}, func() { u.kick(np) })
	u.mu.Lock()
	switch {
	case errors.Is(err, ErrBusy):
		u.busyLog.Warn(log, "hello dropped; the agent repeats it", "err", err)
		return nil
	case err != nil:
		u.refuse(log, src, err, size, now)
		return nil
	}
	np.sess, np.win = sess, newSeqWindow(welcome.LastSeq)
	if np.kicked { // taken over while u.mu was released
		u.endPeer(np, false, "replaced by a newer connection")
		return nil
	}
	if old := u.peers[src]; old != nil { // cannot be: one goroutine begins sessions
		u.endPeer(old, false, "replaced")
	}
	u.peers[src] = np
	log.Info("agent connected", "host", hl.Host, "interfaces", len(hl.Interfaces), "held_up_to_seq", welcome.LastSeq)
	return np
}

// refuse logs a refused hello and tells the agent why, in a Reject no
// larger than its hello (UDP sources can be forged: a reply must not
// amplify), at most one every udpRejectGap.
func (u *UDPServer) refuse(log *slog.Logger, src netip.AddrPort, reason error, size int, now time.Time) {
	u.badLog.Warn(log, "handshake rejected", "err", reason)
	if now.Sub(u.lastReject) < udpRejectGap {
		return
	}
	u.lastReject = now
	msg := reason.Error()
	if room := size - wire.HeaderSize - 2; len(msg) > room {
		msg = msg[:max(room, 0)]
	}
	u.conn.WriteToUDPAddrPort(wire.AppendReject(nil, msg), src)
}

// kick ends np for a takeover by another session of its agent name; it
// may run on any goroutine.
func (u *UDPServer) kick(np *udpPeer) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if np.sess == nil {
		np.kicked = true // begin has not returned to hello yet: it ends it
		return
	}
	u.endPeer(np, false, "replaced by a newer connection")
}

// endPeer commits and ends p's session and adds its counts, the gaps
// still open counted lost, to its agent's. u.mu is held.
func (u *UDPServer) endPeer(p *udpPeer, clean bool, why string) {
	if p.ended {
		return
	}
	p.ended = true
	if u.peers[p.src] == p {
		delete(u.peers, p.src)
	}
	if p.sess == nil {
		return
	}
	if _, err := p.sess.commit(); err != nil {
		u.log.Error("storage error at session end", "agent", p.name, "err", err)
	}
	u.dropAll(p)
	p.win.finish()
	c := p.counts()
	ac := u.agents[p.name]
	if ac == nil {
		ac = &UDPAgentCounts{}
		u.agents[p.name] = ac
	}
	ac.Add(c)
	p.sess.end(clean)
	u.log.Info("agent session ended", "agent", p.name, "remote", p.src.String(), "why", why,
		"datagrams", c.Received, "lost", c.Lost, "reordered", c.Reordered, "duplicates", c.Duplicates, "late", c.Late, "malformed", c.Malformed,
		"pieces", c.Pieces, "reassembled", c.Reassembled, "incomplete", c.Incomplete)
}

// malformed counts and logs a bad datagram or frame from src (p: its
// session, if any).
func (u *UDPServer) malformed(p *udpPeer, src netip.AddrPort, err error) {
	u.Counters.Malformed.Add(1)
	if p != nil && !p.ended {
		p.malformed++
	}
	u.badLog.Warn(u.log, "malformed datagram dropped", "remote", src.String(), "err", err)
}

// commit commits every session written to since the last commit.
func (u *UDPServer) commit() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.dirty {
		p.dirty = false
		if p.ended {
			continue
		}
		if _, err := p.sess.commit(); err != nil {
			u.log.Error("storage error: batches since the last commit are lost", "agent", p.name, "err", err)
		}
	}
	clear(u.dirty)
	u.dirty = u.dirty[:0]
}

// sweep ends sessions silent for the peer timeout, and warns about
// sessions that lost datagrams (at most every udpLossLog each).
func (u *UDPServer) sweep(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, p := range u.peers {
		if now.Sub(p.last) >= u.core.cfg.PeerTimeout {
			u.core.Counters.PeerTimeouts.Add(1)
			u.endPeer(p, false, "agent silent: peer timeout (its file stays open for the idle-close time)")
			continue
		}
		if c := p.win.SeqCounts; c.Lost > p.warned && now.Sub(p.warnedAt) >= udpLossLog {
			u.log.Warn("datagrams lost", "agent", p.name, "lost", c.Lost, "lost_since_last_warning", c.Lost-p.warned,
				"datagrams", c.Received, "reordered", c.Reordered, "duplicates", c.Duplicates, "late", c.Late)
			p.warned, p.warnedAt = c.Lost, now
		}
	}
}

// AgentCounts returns every agent's counts: those of ended sessions,
// plus the live ones so far (whose open gaps are not counted lost yet).
// Once Serve has returned they are final.
func (u *UDPServer) AgentCounts() map[string]UDPAgentCounts {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]UDPAgentCounts, len(u.agents))
	for name, c := range u.agents {
		out[name] = *c
	}
	for _, p := range u.peers {
		c := out[p.name]
		c.Add(p.counts())
		out[p.name] = c
	}
	return out
}

// admit puts datagram number seq in p's window. A duplicate (counted) or
// a late one is to be dropped: false. A new or reordered one is to be
// handled: true, after what left the window expired.
func (u *UDPServer) admit(p *udpPeer, seq uint64) bool {
	switch p.win.add(seq) {
	case seqDuplicate:
		u.core.Counters.Duplicates.Add(1)
		return false
	case seqLate:
		return false
	}
	u.expire(p)
	return true
}
