package wirecompare

import (
	"fmt"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Compressor is a block compressor under test, applied to a whole
// batch's records section (what a wire codec would compress; the batch
// header's rawlen gives the decompressed size). Encoders and decoders
// are made once and reused. Not safe for concurrent use.
type Compressor interface {
	Name() string
	// Compress appends the compressed src to dst[:0].
	Compress(dst, src []byte) ([]byte, error)
	// Decompress appends the decompressed src to dst[:0]; rawLen is the
	// decompressed size.
	Decompress(dst, src []byte, rawLen int) ([]byte, error)
}

// Compressors returns every compressor, in report order. dictSamples
// train the zstd dictionary (traffic of the same kind as what will be
// compressed, but not the same packets).
func Compressors(dictSamples [][]byte) ([]Compressor, error) {
	fastest, err := newZstd("zstd-fastest", zstd.SpeedFastest, nil)
	if err != nil {
		return nil, err
	}
	def, err := newZstd("zstd-default", zstd.SpeedDefault, nil)
	if err != nil {
		return nil, err
	}
	d, err := dict.BuildZstdDict(dictSamples, dict.Options{MaxDictSize: 64 << 10, HashBytes: 6, ZstdDictID: 1, ZstdLevel: zstd.SpeedDefault})
	if err != nil {
		return nil, fmt.Errorf("training the zstd dictionary: %w", err)
	}
	withDict, err := newZstd("zstd-dict", zstd.SpeedDefault, d)
	if err != nil {
		return nil, err
	}
	return []Compressor{none{}, &lz4Block{}, s2Block{}, snappyBlock{}, fastest, def, withDict}, nil
}

// DictSamples returns the packets of n records of traffic t from a seed
// other than the measured batches', for training a dictionary. Random
// bytes train nothing, so for Random the dictionary is Mixed traffic's,
// as a deployment's one dictionary would be.
func DictSamples(t Traffic, n int) ([][]byte, error) {
	if t == Random {
		t = Mixed
	}
	b, err := Generate(t, n, 1<<32+7)
	if err != nil {
		return nil, err
	}
	return mapSlice(b.Records, func(r Record) []byte { return r.Data }), nil
}

// RecordsSection returns b encoded as a wire batch, without the frame
// and batch headers: the bytes a codec would compress.
func RecordsSection(b *Batch) []byte {
	var c wireCodec
	c.Load(b)
	frame, _ := c.Encode()
	return frame[wire.HeaderSize+wire.BatchHeaderSize:]
}

type none struct{}

func (none) Name() string { return "none" }

func (none) Compress(dst, src []byte) ([]byte, error) { return append(dst[:0], src...), nil }

func (none) Decompress(dst, src []byte, _ int) ([]byte, error) { return append(dst[:0], src...), nil }

// lz4Block is the LZ4 block format (fast mode) of pierrec/lz4, with one
// reused Compressor (its hash table).
type lz4Block struct{ c lz4.Compressor }

func (*lz4Block) Name() string { return "lz4" }

func (l *lz4Block) Compress(dst, src []byte) ([]byte, error) {
	dst = grow(dst, lz4.CompressBlockBound(len(src)))
	n, err := l.c.CompressBlock(src, dst)
	return dst[:n], err
}

func (*lz4Block) Decompress(dst, src []byte, rawLen int) ([]byte, error) {
	dst = grow(dst, rawLen)
	n, err := lz4.UncompressBlock(src, dst)
	return dst[:n], err
}

// s2Block is klauspost/compress/s2's block format, default level.
type s2Block struct{}

func (s2Block) Name() string { return "s2" }

func (s2Block) Compress(dst, src []byte) ([]byte, error) {
	return s2.Encode(grow(dst, s2.MaxEncodedLen(len(src))), src), nil
}

func (s2Block) Decompress(dst, src []byte, rawLen int) ([]byte, error) {
	return s2.Decode(grow(dst, rawLen), src)
}

// snappyBlock is github.com/golang/snappy's block format.
type snappyBlock struct{}

func (snappyBlock) Name() string { return "snappy" }

func (snappyBlock) Compress(dst, src []byte) ([]byte, error) {
	return snappy.Encode(grow(dst, snappy.MaxEncodedLen(len(src))), src), nil
}

func (snappyBlock) Decompress(dst, src []byte, rawLen int) ([]byte, error) {
	return snappy.Decode(grow(dst, rawLen), src)
}

// zstdBlock is klauspost/compress/zstd's EncodeAll and DecodeAll on one
// encoder and one decoder, single-threaded, optionally with a
// dictionary.
type zstdBlock struct {
	name string
	enc  *zstd.Encoder
	dec  *zstd.Decoder
}

func newZstd(name string, level zstd.EncoderLevel, dict []byte) (*zstdBlock, error) {
	eo := []zstd.EOption{zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1)}
	do := []zstd.DOption{zstd.WithDecoderConcurrency(1)}
	if dict != nil {
		eo = append(eo, zstd.WithEncoderDict(dict))
		do = append(do, zstd.WithDecoderDicts(dict))
	}
	enc, err := zstd.NewWriter(nil, eo...)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, do...)
	if err != nil {
		return nil, err
	}
	return &zstdBlock{name: name, enc: enc, dec: dec}, nil
}

func (z *zstdBlock) Name() string { return z.name }

func (z *zstdBlock) Compress(dst, src []byte) ([]byte, error) {
	return z.enc.EncodeAll(src, dst[:0]), nil
}

func (z *zstdBlock) Decompress(dst, src []byte, _ int) ([]byte, error) {
	return z.dec.DecodeAll(src, dst[:0])
}

// grow returns dst with length n, reallocated only when its capacity is
// short.
func grow(dst []byte, n int) []byte {
	if cap(dst) < n {
		return make([]byte, n)
	}
	return dst[:n]
}
