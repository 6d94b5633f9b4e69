//go:build !linux

package bench

import "time"

func raiseNoFile(need uint64) (uint64, error)        { return 0, ErrNotLinux }
func cpuTimes() (user, sys time.Duration, err error) { return 0, 0, ErrNotLinux }
func memStatus() (hwm, rss int64, err error)         { return 0, 0, ErrNotLinux }
func procMem(string) (hwm, rss int64, err error)     { return 0, 0, ErrNotLinux }

func treeHWM(int) int64 { return 0 }

func exitIO(int) ProcIO { return ProcIO{} }
