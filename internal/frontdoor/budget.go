package frontdoor

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/pcapsync/pcapsync/internal/fielderr"
)

// Reserve is what Budget keeps beside the store's files and the
// listeners' connections: the listening sockets, the state file,
// directories being synced, repair, Redis, the runtime. It is the
// store's DefaultFileReserve.
const Reserve = 256

// NoFileLimit returns the process's RLIMIT_NOFILE (the soft limit, which
// Go raises to the hard one at start), or 1024 if it cannot be read.
func NoFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return rl.Cur
}

// Share is one listener setting's part of a Budget.
type Share struct {
	// Field names the setting in errors (fielderr.Key("serve.Query.MaxConns")).
	Field fielderr.Key
	// Cap is the setting: a positive value is kept, 0 is derived by
	// Budget and set.
	Cap *int
	// Listeners is how many listeners the setting caps each (the
	// tap's); 0 means 1.
	Listeners int
	// Divisor: a derived Cap is the descriptors left for connections
	// divided by Divisor (and by Listeners), at most Max, at least 1.
	// The share with Divisor 0 (the agents') gets what the others
	// leave.
	Divisor, Max int
}

// Budget derives the zero caps of shares from nofile descriptors
// (RLIMIT_NOFILE) less Reserve and less files (the store's open-file
// budget, the setting filesField): the connections of every listener at
// their caps, the store's files and Reserve together never need more
// than nofile. It returns an error wrapping ErrConfig when they would,
// naming the settings (fielderr).
func Budget(nofile uint64, files int, filesField fielderr.Key, shares []Share) error {
	left := int64(min(nofile, 1<<40)) - Reserve - int64(max(files, 0))
	rest := left
	var remainder *Share
	for i := range shares {
		s := &shares[i]
		n := int64(max(s.Listeners, 1))
		if *s.Cap == 0 && s.Divisor > 0 {
			c := max(left/int64(s.Divisor)/n, 1)
			if s.Max > 0 {
				c = min(c, int64(s.Max))
			}
			*s.Cap = int(c)
		}
		if *s.Cap == 0 {
			remainder = s
			continue
		}
		rest -= int64(*s.Cap) * n
	}
	if remainder != nil {
		*remainder.Cap = int(max(min(rest, 1<<30), 1))
		rest -= int64(*remainder.Cap)
	}
	if rest >= 0 {
		return nil
	}
	var parts []string
	for _, s := range shares {
		parts = append(parts, fmt.Sprintf("%s %d", s.Field, *s.Cap))
	}
	return fielderr.Errorf("%w: connection caps (%s, per listener) and %d files of the store (%s) need %d descriptors, RLIMIT_NOFILE is %d (%d kept for the rest): lower them or raise the limit (LimitNOFILE=, ulimit -n)",
		ErrConfig, strings.Join(parts, ", "), max(files, 0), filesField, int64(nofile)-rest, nofile, Reserve)
}
