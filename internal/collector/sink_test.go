package collector

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// fakeSink holds what it was sent until the test completes it.
type fakeSink struct {
	mu     sync.Mutex
	frames [][]byte
	hellos [][]byte
	infos  [][]byte
	dones  []func(error)
	max    uint32
}

func (f *fakeSink) Send(agent string, hello, info, frame []byte, done func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Kept as given: the slices are the sink's until done (Sink.Send),
	// so later frames must not have changed them when the test looks.
	f.frames = append(f.frames, frame)
	f.hellos = append(f.hellos, hello)
	f.infos = append(f.infos, info)
	f.dones = append(f.dones, done)
}

func (f *fakeSink) MaxFrame(string, []byte) uint32 { return f.max }

// TestSinkSession: an ingest collector hands each batch over unchanged,
// with a hello without the token; it acknowledges a batch only once it
// and every one before it are durable, in order; a failure ends the
// session and nothing after it is acknowledged; the frame limit
// follows the sink's.
func TestSinkSession(t *testing.T) {
	sink := &fakeSink{max: 1 << 20}
	c, err := NewCore(Config{Sink: sink, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := hello("web1", 1)
	h.Token = "a-secret-token-of-16"
	kicked := 0
	s, w, err := c.begin(h, Peer{}, func() { kicked++ })
	if err != nil || w.LastSeq != 0 || w.MaxFrame != 1<<20-wire.HeaderSize {
		t.Fatalf("begin: %v %+v: want LastSeq 0 and the sink's frame limit", err, w)
	}
	var acks []uint64
	s.onAck = func(seq uint64) { acks = append(acks, seq) }
	payloads := make([][]byte, 3)
	for i := range payloads {
		payloads[i] = batchPayload(uint64(i+1), 10*i, 10)
		if _, err := s.batch(0, payloads[i]); err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	for i, f := range sink.frames {
		if string(f[wire.HeaderSize:]) != string(payloads[i]) {
			t.Fatalf("frame %d is not the batch as sent", i)
		}
		hl, err := wire.ParseHello(sink.hellos[i][wire.HeaderSize:])
		if err != nil || hl.Name != "web1" || hl.Token != "" || len(hl.Interfaces) != len(h.Interfaces) {
			t.Fatalf("hello of frame %d: %+v %v: want the session's, without its token", i, hl, err)
		}
	}
	sink.dones[1](nil) // batch 2 durable before batch 1: nothing to acknowledge yet
	if seq, err := s.commit(); seq != 0 || err != nil || len(acks) != 0 {
		t.Fatalf("after batch 2 only: commit %d %v, acks %v; want nothing acknowledged", seq, err, acks)
	}
	sink.dones[0](nil)
	if seq, _ := s.commit(); seq != 2 || len(acks) != 1 || acks[0] != 2 {
		t.Fatalf("after batches 1 and 2: commit %d, acks %v; want 2", seq, acks)
	}
	if got := c.Counters.Batches.Load(); got != 2 {
		t.Errorf("%d batches counted, want the 2 durable", got)
	}
	sink.dones[2](errors.New("broker gone"))
	if seq, err := s.commit(); seq != 2 || !errors.Is(err, ErrSink) || kicked != 1 {
		t.Fatalf("after a failure: commit %d %v, kicked %d; want 2, ErrSink, the session ended", seq, err, kicked)
	}
	if _, err := s.batch(0, batchPayload(4, 30, 10)); !errors.Is(err, ErrSink) {
		t.Errorf("a batch after the failure: %v, want ErrSink", err)
	}
	s.end(false)
}

// TestSinkInfo: an ingest collector hands its agent's Info frame on
// with every frame after it (kafkarec.InfoHeader), none before one and
// none for an Info without a version.
func TestSinkInfo(t *testing.T) {
	sink := &fakeSink{}
	c, err := NewCore(Config{Sink: sink, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _, err := c.begin(hello("web1", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.end(true)
	payload := func(f []byte) []byte { return f[wire.HeaderSize:] }
	steps := []struct {
		info []byte // the Info frame the agent sends before the batch; nil: none
		want string // the version of the info the sink gets with the batch; "-" none
	}{
		{nil, "-"},
		{wire.AppendInfo(nil, &wire.Info{}), "-"},
		{wire.AppendInfo(nil, &wire.Info{Version: "1.4.0"}), "1.4.0"},
		{nil, "1.4.0"},
	}
	for i, st := range steps {
		if st.info != nil {
			if err := s.info(payload(st.info)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.batch(0, batchPayload(uint64(i+1), 10*i, 10)); err != nil {
			t.Fatal(err)
		}
		got := "-"
		if in := sink.infos[i]; in != nil {
			v, err := wire.ParseInfo(payload(in))
			if err != nil {
				t.Fatalf("batch %d: the info handed on does not parse: %v", i+1, err)
			}
			got = v.Version
		}
		if got != st.want {
			t.Errorf("batch %d: info %q handed on, want %q", i+1, got, st.want)
		}
	}
	for _, done := range sink.dones {
		done(nil)
	}
}

// TestSinkDoesNotDecompress: an ingest collector hands a compressed
// batch on without decompressing it (the writer does, once, on its way
// to the file): one whose compressed records are corrupt but whose
// checksum holds is sent, not counted as corrupt; what its frame shows
// is still refused: a declared size past MaxFrame (a bomb), and a raw
// batch's malformed records.
func TestSinkDoesNotDecompress(t *testing.T) {
	sink := &instantSink{}
	c, err := NewCore(Config{Sink: sink, MaxFrame: 64 << 10, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _, err := c.begin(hello("z1", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.end(true)
	flags, p := compressedPayload(t, compress.Spec{Codec: compress.Zstd}, 1, 0, 10)
	p = p[:len(p)-5] // the frame's end is missing
	binaryCRC(p)
	if _, err := s.batch(flags, p); err != nil {
		t.Fatalf("corrupt zstd with a good checksum: %v, want it sent as it came", err)
	}
	if len(sink.frames) != 1 || string(sink.frames[0][wire.HeaderSize:]) != string(p) {
		t.Fatalf("%d frames sent, want the batch as it came", len(sink.frames))
	}
	var e wire.BatchEncoder
	e.Reset(nil)
	e.Append(1, 0, 1<<20, make([]byte, 1<<20))
	bomb := e.FinishCompressed(append(wire.CompressedFrame(nil), s2.Encode(nil, e.Records())...), 2, wire.CodecS2)[wire.HeaderSize:]
	if _, err := s.batch(uint8(wire.CodecS2), bomb); !errors.Is(err, compress.ErrTooLarge) {
		t.Fatalf("bomb: %v, want ErrTooLarge", err)
	}
	raw := batchPayload(3, 0, 10)
	raw[len(raw)-1] ^= 0xff // the data length in the trailer
	binaryCRC(raw)
	if _, err := s.batch(0, raw); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("malformed raw batch: %v, want ErrMalformed", err)
	}
	k := &c.Counters
	if len(sink.frames) != 1 || k.BadCompress.Load() != 0 || k.TooLargeRaw.Load() != 1 || k.Compressed.Load() != 2 {
		t.Errorf("%d frames sent, counters: corrupt %d, too large %d, compressed %d; want 1, 0, 1, 2",
			len(sink.frames), k.BadCompress.Load(), k.TooLargeRaw.Load(), k.Compressed.Load())
	}
}
