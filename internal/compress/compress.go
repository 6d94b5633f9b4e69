// Package compress compresses and decompresses the records section of
// wire batches with the codecs of wire.Codec: LZ4 blocks
// (github.com/pierrec/lz4/v4), S2 blocks and zstd frames
// (github.com/klauspost/compress). Coders are made once and reused;
// nothing is created per batch.
//
// An Encoder belongs to one goroutine. A Decoder is safe for concurrent
// use (the collector shares one) and never produces more than the
// uncompressed length the batch declares, itself capped by a limit: a
// batch that would expand past it is rejected (ErrTooLarge) before the
// output is allocated.
//
// Spec is every compression setting of pcapsync, whatever it
// compresses: batches on the wire, Redis stream entries, the
// collector's files (whose gzip and zstd writers are the store's). One
// syntax, CODEC[:LEVEL], parsed by ParseSpec; a Use says which codecs a
// setting allows (Use.Check).
package compress

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// AutoMinSaving is the fraction of a batch auto compression must save
// for the compressed form to be sent: 1/8.
const AutoMinSaving = 8

// MaxEncodedLen is the most bytes Compress can append for n input bytes
// with any codec: size the buffers for it and Compress never allocates.
func MaxEncodedLen(n int) int {
	return max(s2.MaxEncodedLen(n), lz4.CompressBlockBound(n), n+n/128+1024)
}

// Encoder compresses batches with one Spec. Not safe for concurrent use.
type Encoder struct {
	spec  Spec
	codec wire.Codec // spec.Wire()
	auto  bool       // spec.Codec == Auto
	lz4   *lz4.Compressor
	zstd  *zstd.Encoder

	skip, backoff int // auto: batches left to send raw, and the next wait
}

// NewEncoder returns an encoder for sp, a codec of batches (Batches
// or Entries: not Gzip).
func NewEncoder(sp Spec) (*Encoder, error) {
	e := &Encoder{spec: sp, codec: sp.Wire(), auto: sp.Codec == Auto}
	switch sp.Codec {
	case None, S2, Auto:
	case LZ4:
		e.lz4 = new(lz4.Compressor)
	case Zstd:
		lvl := zstd.SpeedDefault
		if sp.Level != 0 {
			lvl = zstd.EncoderLevelFromZstd(sp.Level)
		}
		var err error
		e.zstd, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), zstd.WithZeroFrames(true))
		if err != nil {
			return nil, fmt.Errorf("zstd encoder: %w", err)
		}
	default:
		return nil, fmt.Errorf("compression %s: no codec of batches: %w", sp, wire.ErrFlags)
	}
	return e, nil
}

// Compress appends src compressed to dst and returns it with the codec
// used. It returns wire.CodecNone and dst unchanged when the batch is to
// go uncompressed: always for CodecNone, for auto when compressing does
// not pay, and when a codec cannot shrink src at all. dst should have
// room for MaxEncodedLen(len(src)) more bytes.
// Callers count what they send (the agent and the Redis feed keep their
// own counters).
func (e *Encoder) Compress(dst, src []byte) ([]byte, wire.Codec) {
	if e.codec == wire.CodecNone || len(src) == 0 {
		return dst, wire.CodecNone
	}
	if e.auto && e.skip > 0 {
		e.skip--
		return dst, wire.CodecNone
	}
	var out []byte
	switch e.codec {
	case wire.CodecS2:
		need := s2.MaxEncodedLen(len(src))
		if need < 0 {
			return dst, wire.CodecNone
		}
		out = grow(dst, need)
		// s2.Encode writes into its dst argument when len >= need.
		n := len(s2.Encode(out[len(dst):len(dst)+need], src))
		out = out[:len(dst)+n]
	case wire.CodecLZ4:
		need := lz4.CompressBlockBound(len(src))
		out = grow(dst, need)
		n, err := e.lz4.CompressBlock(src, out[len(dst):len(dst)+need])
		if err != nil || n == 0 { // 0: incompressible
			return dst, wire.CodecNone
		}
		out = out[:len(dst)+n]
	case wire.CodecZstd:
		out = e.zstd.EncodeAll(src, dst)
	}
	size := len(out) - len(dst)
	if e.auto {
		if size > len(src)-len(src)/AutoMinSaving {
			// Not worth it: send this one raw and try again after 1, 2,
			// 4 ... 64 batches, so incompressible traffic costs little.
			e.backoff = min(max(2*e.backoff, 1), 64)
			e.skip = e.backoff
			return dst, wire.CodecNone
		}
		e.backoff = 0
	}
	if size >= len(src) {
		return dst, wire.CodecNone
	}
	return out, e.codec
}

// grow returns b with room for n more bytes beyond len(b).
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b
	}
	nb := make([]byte, len(b), len(b)+n)
	copy(nb, b)
	return nb
}

// Decoder decompresses batches. Safe for concurrent use.
type Decoder struct {
	limit int
	zstd  *zstd.Decoder
}

// NewDecoder returns a decoder that refuses to produce more than limit
// bytes for one batch. concurrency bounds simultaneous zstd decodes.
func NewDecoder(limit, concurrency int) (*Decoder, error) {
	z, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(max(concurrency, 1)),
		zstd.WithDecoderMaxMemory(uint64(limit)), zstd.IgnoreChecksum(true))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return &Decoder{limit: limit, zstd: z}, nil
}

// Close releases the zstd decoder's goroutines.
func (d *Decoder) Close() { d.zstd.Close() }

// Decompress decodes src, compressed with codec, which must decompress
// to exactly rawLen bytes, into dst[:0] (grown to rawLen if needed, and
// only after rawLen was checked against the limit) and returns it.
func (d *Decoder) Decompress(dst []byte, codec wire.Codec, src []byte, rawLen int) ([]byte, error) {
	if rawLen > d.limit {
		return dst[:0], fmt.Errorf("%s batch declares %d bytes uncompressed, limit %d: %w", codec, rawLen, d.limit, ErrTooLarge)
	}
	if cap(dst) < rawLen {
		dst = make([]byte, 0, rawLen)
	}
	out := dst[:rawLen]
	switch codec {
	case wire.CodecNone:
		if len(src) != rawLen {
			return dst[:0], fmt.Errorf("raw batch of %d bytes declares %d: %w", len(src), rawLen, ErrCorrupt)
		}
		copy(out, src)
	case wire.CodecS2:
		n, err := s2.DecodedLen(src)
		switch {
		case err != nil:
			return dst[:0], fmt.Errorf("s2: %w: %w", ErrCorrupt, err)
		case n != rawLen:
			return dst[:0], fmt.Errorf("s2 block decodes to %d bytes, batch declares %d: %w", n, rawLen, tooLargeOr(n, rawLen))
		}
		got, err := s2.Decode(out, src)
		if err != nil {
			return dst[:0], fmt.Errorf("s2: %w: %w", ErrCorrupt, err)
		}
		if len(got) != rawLen || &got[0] != &out[0] {
			return dst[:0], fmt.Errorf("s2 block decoded to %d bytes, batch declares %d: %w", len(got), rawLen, ErrCorrupt)
		}
	case wire.CodecLZ4:
		n, err := lz4.UncompressBlock(src, out)
		if err != nil {
			// The block needs more room than declared: a lie or a bomb.
			return dst[:0], fmt.Errorf("lz4: %w: %w", ErrCorrupt, err)
		}
		if n != rawLen {
			return dst[:0], fmt.Errorf("lz4 block decoded to %d bytes, batch declares %d: %w", n, rawLen, ErrCorrupt)
		}
	case wire.CodecZstd:
		var h zstd.Header
		if err := h.Decode(src); err != nil {
			return dst[:0], fmt.Errorf("zstd frame header: %w: %w", ErrCorrupt, err)
		}
		if h.HasFCS && h.FrameContentSize != uint64(rawLen) {
			return dst[:0], fmt.Errorf("zstd frame declares %d bytes, batch declares %d: %w", h.FrameContentSize, rawLen, tooLargeOr(int(min(h.FrameContentSize, 1<<62)), rawLen))
		}
		got, err := d.zstd.DecodeAll(src, out[:0])
		if err != nil {
			if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
				return dst[:0], fmt.Errorf("zstd: %w: %w", ErrTooLarge, err)
			}
			return dst[:0], fmt.Errorf("zstd: %w: %w", ErrCorrupt, err)
		}
		if len(got) != rawLen || rawLen > 0 && &got[0] != &out[0] {
			return dst[:0], fmt.Errorf("zstd frame decoded to %d bytes, batch declares %d: %w", len(got), rawLen, ErrCorrupt)
		}
	default:
		return dst[:0], fmt.Errorf("compression: %s: %w", codec, wire.ErrFlags)
	}
	return out, nil
}

// tooLargeOr classifies a length mismatch: more than declared is a
// (would-be) bomb, less is corruption.
func tooLargeOr(got, declared int) error {
	if got > declared {
		return ErrTooLarge
	}
	return ErrCorrupt
}
