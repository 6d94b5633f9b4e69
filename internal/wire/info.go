package wire

import (
	"fmt"
)

// Info (agent -> collector, over TCP; type 11): what the agent says
// about itself, sent once right after a Welcome whose codecs word has
// FeatureInfo set, and never otherwise (an older collector rejects the
// type as unknown):
//
//	n u8 | n x (tag u8 | value str8)
//
// Tags are InfoVersion; a reader skips tags it does not know, so later
// facts join without a new type or version. Each tag appears at most
// once, n is at most MaxInfoFields and every value is printable ASCII
// (0x20..0x7e): it ends up in JSON, logs and the console.

// FeatureInfo is the bit of a Welcome's codecs word that says the
// collector takes an Info frame. Bits 16..31 of that word are features,
// not codecs: codecs are 4 bits (0..15), and agents before this bit
// test only their own codec's bit, so they ignore it.
const FeatureInfo uint32 = 1 << 31

// Info tags.
const (
	InfoVersion uint8 = 1 // the agent's software version, e.g. "1.4.0" or "(devel) 0123abcd4567"
)

// Limits on an Info payload.
const (
	MaxInfoFields = 16
	// MaxVersionLen bounds Info.Version; a longer one is cut on send.
	MaxVersionLen = 128
)

// Info is an agent's description of itself. The zero value (nothing
// known) is what an agent that sends no Info frame leaves.
type Info struct {
	Version string // "" when unknown
}

// AppendInfo appends an Info frame: only the fields that are set, each
// cut to its limit and with bytes outside printable ASCII replaced by
// '?', so that what it appends always parses.
func AppendInfo(dst []byte, in *Info) []byte {
	return appendFrame(dst, TypeInfo, func(b []byte) []byte {
		if in.Version == "" {
			return append(b, 0)
		}
		v := []byte(in.Version[:min(len(in.Version), MaxVersionLen)])
		for i, c := range v {
			if !printable(c) {
				v[i] = '?'
			}
		}
		b = append(b, 1, InfoVersion, byte(len(v)))
		return append(b, v...)
	})
}

// ParseInfo decodes an Info payload. It refuses too many fields, a tag
// given twice, a value that is not printable ASCII and a version over
// MaxVersionLen; unknown tags are skipped.
func ParseInfo(p []byte) (Info, error) {
	var in Info
	d := decoder{b: p}
	n := d.bytes(1)
	if n == nil {
		return in, fmt.Errorf("info: %w", d.err)
	}
	if n[0] > MaxInfoFields {
		return in, fmt.Errorf("info: %d fields over limit %d: %w", n[0], MaxInfoFields, ErrTooLarge)
	}
	var seen [256]bool
	for range int(n[0]) {
		tag := d.bytes(1)
		v := d.str8()
		if d.err != nil {
			break
		}
		if seen[tag[0]] {
			return Info{}, fmt.Errorf("info: tag %d given twice: %w", tag[0], ErrMalformed)
		}
		seen[tag[0]] = true
		for i := range len(v) {
			if !printable(v[i]) {
				return Info{}, fmt.Errorf("info: tag %d: byte 0x%02x at %d is not printable ASCII: %w", tag[0], v[i], i, ErrMalformed)
			}
		}
		if tag[0] == InfoVersion {
			if len(v) > MaxVersionLen {
				return Info{}, fmt.Errorf("info: version of %d bytes over limit %d: %w", len(v), MaxVersionLen, ErrTooLarge)
			}
			in.Version = v
		}
	}
	if err := d.done(); err != nil {
		return Info{}, fmt.Errorf("info: %w", err)
	}
	return in, nil
}

func printable(c byte) bool { return c >= 0x20 && c <= 0x7e }
