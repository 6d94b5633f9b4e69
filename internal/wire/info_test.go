package wire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestInfoRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", ""},
		{"1.4.0", "1.4.0"},
		{"(devel) 0123abcd4567+dirty", "(devel) 0123abcd4567+dirty"},
		{"bad\x00\nbyte\xff", "bad??byte?"},
		{strings.Repeat("v", MaxVersionLen+40), strings.Repeat("v", MaxVersionLen)},
	} {
		f := AppendInfo(nil, &Info{Version: tc.in})
		h, err := ParseHeader((*[HeaderSize]byte)(f), Limits{})
		if err != nil || h.Type != TypeInfo || int(h.Length) != len(f)-HeaderSize {
			t.Fatalf("%q: header %+v, %v", tc.in, h, err)
		}
		got, err := ParseInfo(f[HeaderSize:])
		if err != nil || got.Version != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got.Version, err, tc.want)
		}
	}
}

func TestParseInfoHostile(t *testing.T) {
	field := func(tag byte, v string) []byte { return append([]byte{tag, byte(len(v))}, v...) }
	cat := func(n byte, fs ...[]byte) []byte { return append([]byte{n}, bytes.Join(fs, nil)...) }
	for _, tc := range []struct {
		name    string
		p       []byte
		want    error
		version string
	}{
		{"empty payload", nil, ErrTruncated, ""},
		{"no fields", []byte{0}, nil, ""},
		{"unknown tag skipped", cat(2, field(9, "x"), field(InfoVersion, "1.0")), nil, "1.0"},
		{"count over limit", cat(MaxInfoFields + 1), ErrTooLarge, ""},
		{"count past the end", cat(3, field(InfoVersion, "1.0")), ErrTruncated, ""},
		{"value past the end", []byte{1, InfoVersion, 200, 'a'}, ErrTruncated, ""},
		{"tag without value", []byte{1, InfoVersion}, ErrTruncated, ""},
		{"trailing bytes", append(cat(1, field(InfoVersion, "1.0")), 0), ErrMalformed, ""},
		{"tag twice", cat(2, field(InfoVersion, "1"), field(InfoVersion, "2")), ErrMalformed, ""},
		{"control byte", cat(1, field(InfoVersion, "1\n")), ErrMalformed, ""},
		{"non-ASCII", cat(1, field(InfoVersion, "1\xc3\xa9")), ErrMalformed, ""},
		{"unknown tag, bad byte", cat(1, field(7, "\x00")), ErrMalformed, ""},
		{"version over limit", cat(1, field(InfoVersion, strings.Repeat("v", MaxVersionLen+1))), ErrTooLarge, ""},
	} {
		got, err := ParseInfo(tc.p)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if got.Version != tc.version {
			t.Errorf("%s: version %q, want %q", tc.name, got.Version, tc.version)
		}
	}
}

// TestFeatureInfoNotACodec: the feature bit lies outside the codecs a
// batch's 4 flag bits can name, so no agent takes it for a codec.
func TestFeatureInfoNotACodec(t *testing.T) {
	for c := range Codec(16) {
		if FeatureInfo&(1<<c) != 0 {
			t.Fatalf("FeatureInfo overlaps codec %d", c)
		}
	}
}
