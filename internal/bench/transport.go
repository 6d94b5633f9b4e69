package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// TransportConfig sets up Transport. The zero value means the defaults
// of "pcapsync bench transport".
type TransportConfig struct {
	// Duration is how long the sender sends, per mode and round; 0
	// means 1s.
	Duration time.Duration
	// Rounds is how many times every mode runs (alternating); 0 means 3.
	Rounds int
	// TCPBatches are the messages per frame of the batched TCP modes;
	// nil means 16, 128 and 1024.
	TCPBatches []int
	// MessageSize is the size of one message, the data of one record; 0
	// means 85.
	MessageSize int
	// UDPPayload is the largest UDP payload of a batched datagram; 0
	// means 1432 (an MTU of 1500 less IPv4 and UDP headers, and room for
	// options, as in the write-up this follows).
	UDPPayload int
}

func (c TransportConfig) withDefaults() TransportConfig {
	if c.Duration <= 0 {
		c.Duration = time.Second
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.TCPBatches == nil {
		c.TCPBatches = []int{16, 128, 1024}
	}
	if c.MessageSize <= 0 {
		c.MessageSize = 85
	}
	if c.UDPPayload <= 0 {
		c.UDPPayload = 1432
	}
	return c
}

// TransportRound is one run of one mode.
type TransportRound struct {
	Sent, Received             uint64 // messages
	FramesSent, FramesReceived uint64 // frames (TCP writes or UDP datagrams)
	SendErrors                 uint64 // failed sendto calls (UDP), not counted as sent
	Elapsed                    time.Duration
}

// RecvPerSec is the messages received per second of the round: from the
// first write to the last frame read.
func (r TransportRound) RecvPerSec() float64 { return float64(r.Received) / r.Elapsed.Seconds() }

// TransportResult is one mode over all rounds.
type TransportResult struct {
	Proto      string // "tcp" or "udp"
	PerFrame   int    // messages per frame
	FrameBytes int    // bytes of one frame: frame header, batch header, records
	Rounds     []TransportRound
}

// Median returns the median messages received per second over the rounds.
func (r TransportResult) Median() float64 {
	xs := make([]float64, len(r.Rounds))
	for i, rd := range r.Rounds {
		xs[i] = rd.RecvPerSec()
	}
	return median(xs)
}

// Totals sums the rounds.
func (r TransportResult) Totals() (t TransportRound) {
	for _, rd := range r.Rounds {
		t.Sent += rd.Sent
		t.Received += rd.Received
		t.FramesSent += rd.FramesSent
		t.FramesReceived += rd.FramesReceived
		t.SendErrors += rd.SendErrors
		t.Elapsed += rd.Elapsed
	}
	return t
}

// Lost returns the messages sent and not received over all rounds.
func (r TransportResult) Lost() uint64 {
	t := r.Totals()
	if t.Received > t.Sent {
		return 0
	}
	return t.Sent - t.Received
}

// Transport measures messages per second over loopback TCP and UDP,
// one message per frame against many, with the receiver in this
// process. The results come in the order: TCP one per frame, TCP with
// each of cfg.TCPBatches, UDP one per datagram, UDP datagrams filled up
// to cfg.UDPPayload. Traffic goes to 127.0.0.1 only.
func Transport(ctx context.Context, cfg TransportConfig) ([]TransportResult, error) {
	cfg = cfg.withDefaults()
	var res []TransportResult
	var frames [][]byte
	add := func(proto string, n int) {
		f := makeFrame(n, cfg.MessageSize)
		res = append(res, TransportResult{Proto: proto, PerFrame: n, FrameBytes: len(f)})
		frames = append(frames, f)
	}
	add("tcp", 1)
	for _, n := range cfg.TCPBatches {
		if n < 1 {
			return nil, fmt.Errorf("bench: %d messages per frame", n)
		}
		add("tcp", n)
	}
	add("udp", 1)
	n := fitRecords(cfg.UDPPayload, cfg.MessageSize)
	if n < 1 {
		return nil, fmt.Errorf("bench: a %d-byte message does not fit in a %d-byte datagram", cfg.MessageSize, cfg.UDPPayload)
	}
	add("udp", n)
	for range cfg.Rounds {
		for i := range res {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			var rd TransportRound
			var err error
			if res[i].Proto == "tcp" {
				rd, err = runTCP(ctx, frames[i], res[i].PerFrame, cfg.Duration)
			} else {
				rd, err = runUDP(ctx, frames[i], res[i].PerFrame, cfg.Duration)
			}
			if err != nil {
				return res, fmt.Errorf("%s, %d per frame: %w", res[i].Proto, res[i].PerFrame, err)
			}
			res[i].Rounds = append(res[i].Rounds, rd)
		}
	}
	return res, nil
}

// makeFrame returns a batch frame of n records of size bytes each,
// timestamps 1 ns apart (one-byte deltas, as for live traffic).
func makeFrame(n, size int) []byte {
	msg := make([]byte, size)
	for i := range msg {
		msg[i] = byte(i)
	}
	var e wire.BatchEncoder
	e.Reset(make([]byte, 0, wire.HeaderSize+wire.BatchHeaderSize+n*(size+wire.RecordMaxOverhead)))
	ts := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC).UnixNano()
	for i := range n {
		e.Append(ts+int64(i), 0, 0, msg)
	}
	return e.Finish(1)
}

// fitRecords returns how many size-byte messages fit in one frame of at
// most limit bytes.
func fitRecords(limit, size int) int {
	n := 0
	for len(makeFrame(n+1, size)) <= limit {
		n++
	}
	return n
}

// countFrame checks one batch frame's payload and returns its records.
func countFrame(h wire.Header, p []byte) (uint64, error) {
	if h.Type != wire.TypeBatch {
		return 0, fmt.Errorf("got a %s frame, want batch: %w", h.Type, wire.ErrUnknownType)
	}
	b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{Unchecked: true})
	if err != nil {
		return 0, err
	}
	return uint64(b.Count), nil
}

type recvResult struct {
	msgs, frames uint64
	last         time.Time
	err          error
}

// runTCP sends frame over one loopback TCP connection for d, one write
// per frame, and reads it back as a stream of frames.
func runTCP(ctx context.Context, frame []byte, perFrame int, d time.Duration) (TransportRound, error) {
	var rd TransportRound
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rd, err
	}
	defer ln.Close()
	ch := make(chan recvResult, 1)
	go func() {
		var r recvResult
		defer func() { ch <- r }()
		c, err := ln.Accept()
		if err != nil {
			r.err = err
			return
		}
		defer c.Close()
		fr := wire.NewFrameReader(bufio.NewReaderSize(c, 256<<10), wire.Limits{})
		for {
			h, p, err := fr.Next()
			if err != nil {
				if err != io.EOF {
					r.err = err
				}
				return
			}
			n, err := countFrame(h, p)
			if err != nil {
				r.err = err
				return
			}
			r.msgs += n
			r.frames++
			r.last = time.Now()
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return rd, err
	}
	start := time.Now()
	end := start.Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		if _, err := c.Write(frame); err != nil {
			c.Close()
			return rd, err
		}
		rd.FramesSent++
	}
	rd.Sent = rd.FramesSent * uint64(perFrame)
	if err := c.Close(); err != nil {
		return rd, err
	}
	r := <-ch
	rd.Received, rd.FramesReceived, rd.Elapsed = r.msgs, r.frames, r.last.Sub(start)
	return rd, r.err
}

// runUDP sends frame as one datagram per sendto for d and reads the
// datagrams back, one frame each. Losses are counted, not retried.
func runUDP(ctx context.Context, frame []byte, perFrame int, d time.Duration) (TransportRound, error) {
	var rd TransportRound
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	rc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		return rd, err
	}
	defer rc.Close()
	rc.SetReadBuffer(4 << 20) // best effort: capped by net.core.rmem_max
	dst := rc.LocalAddr().(*net.UDPAddr).AddrPort()
	sc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		return rd, err
	}
	defer sc.Close()
	ch := make(chan recvResult, 1)
	go func() {
		var r recvResult
		defer func() { ch <- r }()
		buf := make([]byte, 64<<10)
		var hdr [wire.HeaderSize]byte
		for {
			n, _, err := rc.ReadFromUDPAddrPort(buf)
			if err != nil {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					r.err = err
				}
				return
			}
			if n < wire.HeaderSize {
				r.err = fmt.Errorf("datagram of %d bytes: %w", n, wire.ErrTruncated)
				return
			}
			copy(hdr[:], buf)
			h, err := wire.ParseHeader(&hdr, wire.Limits{})
			if err == nil && int(h.Length) != n-wire.HeaderSize {
				err = fmt.Errorf("datagram of %d bytes holds a frame of %d: %w", n, wire.HeaderSize+h.Length, wire.ErrMalformed)
			}
			var k uint64
			if err == nil {
				k, err = countFrame(h, buf[wire.HeaderSize:n])
			}
			if err != nil {
				r.err = err
				return
			}
			r.msgs += k
			r.frames++
			r.last = time.Now()
		}
	}()
	start := time.Now()
	end := start.Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		if _, err := sc.WriteToUDPAddrPort(frame, dst); err != nil {
			rd.SendErrors++ // ENOBUFS and the like: the datagram was not sent
			continue
		}
		rd.FramesSent++
	}
	rd.Sent = rd.FramesSent * uint64(perFrame)
	// What is still queued is read within a few ms; then stop the reader.
	time.Sleep(200 * time.Millisecond)
	rc.SetReadDeadline(time.Now())
	r := <-ch
	rd.Received, rd.FramesReceived = r.msgs, r.frames
	if r.frames > 0 {
		rd.Elapsed = r.last.Sub(start)
	} else {
		rd.Elapsed = time.Since(start)
	}
	return rd, r.err
}
