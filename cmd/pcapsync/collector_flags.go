package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/units"
)

// disabledSize is a pflag.Value for a size whose zero field means the
// package's default def and whose negative field disables it: the
// flag's 0 is "disabled".
type disabledSize struct {
	n   *int64
	def int64
}

func (f disabledSize) String() string {
	switch {
	case f.n == nil:
		return "0"
	case *f.n == 0:
		return strconv.FormatInt(f.def, 10)
	case *f.n < 0:
		return "0"
	}
	return strconv.FormatInt(*f.n, 10)
}

func (disabledSize) Type() string { return "size" }

func (f disabledSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*f.n = cmpDisabled(n)
	return nil
}

// disabledDuration is disabledSize for a duration.
type disabledDuration struct {
	d   *time.Duration
	def time.Duration
}

func (f disabledDuration) String() string {
	switch {
	case f.d == nil:
		return "0s"
	case *f.d == 0:
		return f.def.String()
	case *f.d < 0:
		return "0s"
	}
	return f.d.String()
}

func (disabledDuration) Type() string { return "duration" }

func (f disabledDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*f.d = time.Duration(cmpDisabled(int64(d)))
	return nil
}

// cmpDisabled maps a user's 0 ("disable") to the Config's negative.
func cmpDisabled(v int64) int64 {
	if v == 0 {
		return -1
	}
	return v
}

// fsyncFlag is a pflag.Value for store.Config.Fsync (store.ParseFsync).
type fsyncFlag struct{ d *time.Duration }

func (f fsyncFlag) String() string {
	if f.d == nil {
		return ""
	}
	return store.FormatFsync(*f.d)
}

func (fsyncFlag) Type() string { return "policy" }

func (f fsyncFlag) Set(s string) error {
	d, err := store.ParseFsync(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// retainFreeFlag is a pflag.Value for the free-space rule of a
// store.RetainConfig: "PCT%" or a size; 0 turns it off.
type retainFreeFlag struct{ rc *store.RetainConfig }

func (f retainFreeFlag) String() string {
	if f.rc == nil {
		return ""
	}
	return store.FormatRetainFree(*f.rc)
}

func (retainFreeFlag) Type() string { return "pct|size" }

func (f retainFreeFlag) Set(s string) error {
	var pct float64
	var n int64
	var err error
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		pct, err = strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || pct < 0 || pct > store.MaxRetainFreePercent {
			return fmt.Errorf("%q: want a percentage from 0%% to %d%% or a size like 20G", s, store.MaxRetainFreePercent)
		}
	} else if n, err = parseSize(s); err != nil {
		return fmt.Errorf("want a percentage like 10%% or a size like 20G: %w", err)
	}
	f.rc.FreePercent, f.rc.FreeBytes = pct, n
	if pct == 0 && n == 0 {
		f.rc.FreePercent, f.rc.FreeBytes = -1, -1
	}
	return nil
}

// uint32SizeFlag is a pflag.Value for a size held in a uint32 whose zero
// means the package's default def.
type uint32SizeFlag struct {
	n   *uint32
	def uint32
}

func (f uint32SizeFlag) String() string {
	switch {
	case f.n == nil:
		return "0"
	case *f.n == 0:
		return strconv.FormatUint(uint64(f.def), 10)
	}
	return strconv.FormatUint(uint64(*f.n), 10)
}

func (uint32SizeFlag) Type() string { return "size" }

func (f uint32SizeFlag) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n > math.MaxUint32 {
		return fmt.Errorf("size %q is %w", s, units.ErrRange)
	}
	*f.n = uint32(n)
	return nil
}
