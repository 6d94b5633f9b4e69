//go:build !linux

package bench

import (
	"errors"
	"time"
)

var errNotLinux = errors.New("only measured on Linux")

func raiseNoFile(need uint64) (uint64, error)        { return 0, errNotLinux }
func cpuTimes() (user, sys time.Duration, err error) { return 0, 0, errNotLinux }
func memStatus() (hwm, rss int64, err error)         { return 0, 0, errNotLinux }
func procMem(string) (hwm, rss int64, err error)     { return 0, 0, errNotLinux }

func treeHWM(int) int64 { return 0 }

func exitIO(int) ProcIO { return ProcIO{} }
