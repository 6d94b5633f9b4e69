package collector

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/observe"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Config configures a Core and its transports (Server, UDPServer).
// The zero value of every field but Store.Dir means its default.
type Config struct {
	// Store is where batches are written (store.Config: the output
	// root Dir, which is required, rotation, idle close, the fsync
	// policy, file compression, SyncLatency). Its Logger defaults to
	// Logger.
	Store store.Config
	// MaxFrame is the largest frame payload accepted, and the most a
	// compressed batch may decompress to. 0 means DefaultMaxFrame.
	MaxFrame uint32
	// ReadMemory bounds the memory of the frames being received over
	// TCP, all connections together: a connection reserves a buffer for
	// a whole frame (its length rounded up to a size class, at most a
	// quarter more) once the frame's header arrived, and gives it back
	// once the frame was handled. Over the budget a connection stops
	// reading until memory is free (TCP backpressure). At least MaxFrame.
	// 0 means DefaultReadMemory.
	ReadMemory int64
	// HandshakeTimeout bounds the time from accept to a valid Hello.
	// 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds how long Serve waits at the end for
	// sessions to commit and close, and Close for the repair of
	// unfinished files. 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// TLS, if set, is the Server's TLS configuration (see
	// pki.ServerConfig): every connection completes a TLS handshake
	// (1.2 at least) within HandshakeTimeout. When it requires and
	// verifies client certificates (ClientAuth
	// tls.RequireAndVerifyClientCert), an agent's name must also be the
	// Subject CN or a DNS name of its certificate.
	TLS *tls.Config
	// Feed, if set, sees every batch written (see Feed): live views.
	// An ingest collector (Sink) writes none and feeds nothing.
	Feed Feed
	// Sink, if set, makes this an ingest collector: frames go to the
	// sink (Kafka) instead of a store, and Store is not used (see Sink).
	Sink Sink
	// Token, if set, is a shared secret that every Hello must carry,
	// MinTokenLen to wire.MaxTokenLen bytes.
	Token string
	// Insecure allows plain TCP (TLS nil), also with a Token, and the
	// UDP transport, which is always plaintext (UDPServer). With TLS set
	// TCP keeps TLS, and Insecure admits only UDP. Without TLS or
	// Insecure, Server.Serve refuses to start: the zero Config is not an
	// open door.
	Insecure bool
	// MaxConns bounds the open connections, handshakes included; a new
	// connection over it is closed at once, logged and counted
	// (Counters.OverLimit). 0 means DefaultMaxConns.
	MaxConns int
	// MaxConnsPerSource bounds the open connections of one address, as
	// MaxConns all of them (Counters.OverLimit too). 0 means a quarter
	// of MaxConns.
	MaxConnsPerSource int
	// Heartbeat: a connection re-sends its last acknowledgement when it
	// has sent nothing for this long, so that the agent knows it is alive.
	// 0 means liveness.DefaultHeartbeat.
	Heartbeat time.Duration
	// PeerTimeout ends a session whose agent sent nothing (not even its
	// heartbeat) for this long, as a lost connection; it is also the
	// sockets' TCP_USER_TIMEOUT on Linux. 0 means
	// liveness.DefaultPeerTimeout.
	PeerTimeout time.Duration
	// Logger receives events (never one line per packet). nil means
	// slog.Default().
	Logger *slog.Logger

	// UDPReassemblyBytes bounds the memory of all batches the UDP
	// transport is putting back together from pieces (each counts its
	// whole frame from its first piece on); a new one over it drops the
	// oldest incomplete one (UDPCounters.Evicted). A batch frame larger
	// than it is refused. 0 means DefaultUDPReassemblyBytes.
	UDPReassemblyBytes int64

	// BatchWriteLatency, if set, observes the seconds each batch took to
	// check, decompress and write into its file's buffer (duplicates,
	// dropped unread, are not observed); Store.SyncLatency the seconds
	// of every fsync. Called on the hot path, once per batch: Observe
	// must be quick and safe for concurrent use (a prometheus.Histogram
	// fits).
	BatchWriteLatency observe.Observer
}

func (c *Config) withDefaults() Config {
	d := *c
	if d.MaxFrame == 0 {
		d.MaxFrame = DefaultMaxFrame
	}
	if d.ReadMemory == 0 {
		d.ReadMemory = DefaultReadMemory
	}
	if d.HandshakeTimeout == 0 {
		d.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if d.ShutdownTimeout == 0 {
		d.ShutdownTimeout = DefaultShutdownTimeout
	}
	if d.MaxConns == 0 {
		d.MaxConns = DefaultMaxConns
	}
	if d.Heartbeat == 0 {
		d.Heartbeat = liveness.DefaultHeartbeat
	}
	if d.PeerTimeout == 0 {
		d.PeerTimeout = liveness.DefaultPeerTimeout
	}
	if d.TLS != nil && d.TLS.MinVersion < tls.VersionTLS12 {
		d.TLS = d.TLS.Clone()
		d.TLS.MinVersion = tls.VersionTLS12
	}
	if d.UDPReassemblyBytes == 0 {
		d.UDPReassemblyBytes = DefaultUDPReassemblyBytes
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Store.Logger == nil {
		d.Store.Logger = d.Logger
	}
	return d
}

// Defaults of Config fields.
const (
	DefaultMaxFrame         = wire.DefaultMaxFrame
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultMaxConns         = 16384
)

// DefaultUDPReassemblyBytes is the default bound of the UDP transport's
// reassembly memory: a few batches of the largest packets in progress
// for every agent of a busy collector (a 1500-byte packet's batch takes
// about 1.5 KiB of it).
const DefaultUDPReassemblyBytes = 64 << 20

// DefaultReadMemory is the default ReadMemory: 25 frames of the default
// MaxFrame (16 MiB, in 20 MiB buffers), or 512 of the agents' default
// 1 MiB batches, being received at once; a quarter of a 2 GiB machine,
// little on a large one.
const DefaultReadMemory = 512 << 20

// MinTokenLen is the shortest shared token accepted.
const MinTokenLen = 16

// Validate reports the first unusable setting, the Store's included.
func (c *Config) Validate() error {
	if c.Sink == nil {
		if err := c.Store.Validate(); err != nil {
			return err
		}
	}
	switch {
	case c.MaxFrame != 0 && (c.MaxFrame < 64<<10 || c.MaxFrame > 1<<30):
		return fmt.Errorf("collector: max frame %d bytes out of range 64KiB..1GiB", c.MaxFrame)
	case c.ReadMemory < 0:
		return fmt.Errorf("collector: read memory %d bytes is negative", c.ReadMemory)
	case cmp.Or(c.ReadMemory, DefaultReadMemory) < int64(cmp.Or(c.MaxFrame, wire.DefaultMaxFrame)):
		return fmt.Errorf("collector: read memory %d bytes is below the max frame of %d: one frame must always fit", cmp.Or(c.ReadMemory, DefaultReadMemory), cmp.Or(c.MaxFrame, wire.DefaultMaxFrame))
	case c.HandshakeTimeout < 0 || c.ShutdownTimeout < 0 || c.Heartbeat < 0 || c.PeerTimeout < 0:
		return errors.New("collector: timeouts must not be negative")
	case c.UDPReassemblyBytes != 0 && (c.UDPReassemblyBytes < 64<<10 || c.UDPReassemblyBytes > 1<<40):
		return fmt.Errorf("collector: UDP reassembly memory %d bytes out of range 64KiB..1TiB", c.UDPReassemblyBytes)
	case c.MaxConns < 0:
		return fmt.Errorf("collector: max conns %d is negative", c.MaxConns)
	case c.MaxConnsPerSource < 0:
		return fmt.Errorf("collector: max conns per source %d is negative", c.MaxConnsPerSource)
	case c.Token != "" && (len(c.Token) < MinTokenLen || len(c.Token) > wire.MaxTokenLen):
		return fmt.Errorf("collector: token of %d bytes, want %d to %d", len(c.Token), MinTokenLen, wire.MaxTokenLen)
	case c.Token != "" && c.TLS == nil && !c.Insecure:
		return errors.New("collector: a token without TLS would cross the network in clear text: configure TLS, or set Insecure")
	}
	hb, pt := cmp.Or(c.Heartbeat, liveness.DefaultHeartbeat), cmp.Or(c.PeerTimeout, liveness.DefaultPeerTimeout)
	if hb >= pt {
		return fmt.Errorf("collector: heartbeat %s must be shorter than the peer timeout %s", hb, pt)
	}
	return nil
}
