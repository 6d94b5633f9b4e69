//go:build !linux

package liveness

import (
	"syscall"
	"time"
)

func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
