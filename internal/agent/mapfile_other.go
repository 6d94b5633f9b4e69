//go:build !linux

package agent

import (
	"io"
	"os"
)

// mapFile maps files only on Linux; elsewhere a replay reads its file.
func mapFile(*os.File) *mapping { return nil }

type mapping struct{ data []byte }

func (*mapping) rest() io.Reader { return nil }

func (*mapping) cut() bool { return false }

func (*mapping) holds(uintptr) bool { return false }

func (*mapping) offset(uintptr) int64 { return 0 }

func (*mapping) release(int64) {}

func (*mapping) Close() error { return nil }
