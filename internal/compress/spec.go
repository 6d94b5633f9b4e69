package compress

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Codec is a compression algorithm a Spec names. None, LZ4, S2 and Zstd
// have the numbers of their wire.Codec; Gzip and Auto have none.
type Codec uint8

// Codecs. Which a setting allows is its Use's.
const (
	None Codec = iota // no compression
	LZ4               // LZ4 blocks (batches)
	S2                // S2 blocks (batches, Redis entries)
	Zstd              // zstd frames (batches, Redis entries, files)
	Gzip              // gzip members (files)
	// Auto compresses a batch with S2 only where that saves at least
	// 1/AutoMinSaving, and tries again less often while it does not.
	Auto
	numCodecs
)

var codecNames = [numCodecs]string{"none", "lz4", "s2", "zstd", "gzip", "auto"}

// maxLevel is each codec's highest level; 0: the codec takes none.
var maxLevel = [numCodecs]int{Zstd: 22, Gzip: 9}

func (c Codec) String() string {
	if c < numCodecs {
		return codecNames[c]
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Spec is a compression setting: a codec and its level, written
// CODEC[:LEVEL] (none, lz4, s2, zstd[:1-22], gzip[:1-9], auto). The
// zero value is none. Every setting takes the same syntax and parses it
// with ParseSpec (or UnmarshalText); which codecs it allows is its
// Use's (Use.Check), checked by the Validate of the Config holding it.
type Spec struct {
	Codec Codec
	// Level is the codec's level (zstd 1..22, gzip 1..9); 0 means the
	// default of what uses it: the library's for batches and entries
	// (zstd about 3), for files zstd 1 and gzip 5 (the store's). Other
	// codecs take none.
	Level int
}

// ParseSpec parses CODEC[:LEVEL], any codec; "" is none.
func ParseSpec(s string) (Spec, error) {
	name, level, hasLevel := strings.Cut(s, ":")
	var sp Spec
	if name == "" {
		name = "none"
	}
	i := 0
	for i < int(numCodecs) && codecNames[i] != name {
		i++
	}
	if i == int(numCodecs) {
		return sp, fmt.Errorf("compression %q: want none, lz4, s2, zstd[:1-22], gzip[:1-9] or auto", s)
	}
	sp.Codec = Codec(i)
	if !hasLevel {
		return sp, nil
	}
	top := maxLevel[sp.Codec]
	if top == 0 {
		return sp, fmt.Errorf("compression %q: only zstd and gzip take a level", s)
	}
	n, err := strconv.Atoi(level)
	if err != nil || n < 1 || n > top {
		return sp, fmt.Errorf("compression %q: %s level must be 1..%d", s, name, top)
	}
	sp.Level = n
	return sp, nil
}

func (sp Spec) String() string {
	s := sp.Codec.String()
	if sp.Level != 0 {
		s += ":" + strconv.Itoa(sp.Level)
	}
	return s
}

// MarshalText returns sp as ParseSpec reads it, for flags and
// configuration files.
func (sp Spec) MarshalText() ([]byte, error) { return []byte(sp.String()), nil }

// UnmarshalText parses b as ParseSpec does.
func (sp *Spec) UnmarshalText(b []byte) error {
	v, err := ParseSpec(string(b))
	if err != nil {
		return err
	}
	*sp = v
	return nil
}

// Wire returns the wire codec of the batches sp compresses (S2 for
// Auto); CodecNone for None and for Gzip, which no batch carries.
func (sp Spec) Wire() wire.Codec {
	switch sp.Codec {
	case LZ4, S2, Zstd:
		return wire.Codec(sp.Codec)
	case Auto:
		return wire.CodecS2
	}
	return wire.CodecNone
}

// Use is what a Spec compresses, which decides the codecs it allows.
type Use uint8

// Uses.
const (
	// Batches: a batch's records on the wire (the agent's --compress):
	// none, lz4, s2, zstd[:1-22], auto.
	Batches Use = iota
	// Entries: a batch's records in a Redis stream entry (the
	// collector's --redis-compress): none, s2, zstd[:1-22].
	Entries
	// Files: the pcapng files the collector writes (--file-compress):
	// none, gzip[:1-9], zstd[:1-22].
	Files
)

var uses = [...]struct {
	what   string
	codecs []Codec
}{
	Batches: {"batch compression", []Codec{None, LZ4, S2, Zstd, Auto}},
	Entries: {"entry compression", []Codec{None, S2, Zstd}},
	Files:   {"file compression", []Codec{None, Gzip, Zstd}},
}

// Check reports whether u allows sp: its codec, and its level within
// the codec's range.
func (u Use) Check(sp Spec) error {
	if int(u) >= len(uses) {
		return fmt.Errorf("compression use %d unknown", u)
	}
	ok := false
	for _, c := range uses[u].codecs {
		ok = ok || c == sp.Codec
	}
	if ok && sp.Level >= 0 && sp.Level <= maxLevel[sp.Codec] {
		return nil
	}
	return fmt.Errorf("%s %s: want %s", uses[u].what, sp, u.choices())
}

// choices lists the codecs u allows, as ParseSpec reads them.
func (u Use) choices() string {
	var s []string
	for _, c := range uses[u].codecs {
		n := c.String()
		if maxLevel[c] != 0 {
			n += "[:1-" + strconv.Itoa(maxLevel[c]) + "]"
		}
		s = append(s, n)
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// Parse parses s with ParseSpec and checks it with Check.
func (u Use) Parse(s string) (Spec, error) {
	sp, err := ParseSpec(s)
	if err == nil {
		err = u.Check(sp)
	}
	return sp, err
}
