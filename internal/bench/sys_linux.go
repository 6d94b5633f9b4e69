package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// raiseNoFile raises RLIMIT_NOFILE to at least need, the hard limit too
// when allowed (root, or CAP_SYS_RESOURCE), and returns the soft limit
// in force afterwards.
func raiseNoFile(need uint64) (uint64, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("getrlimit: %w", err)
	}
	if rl.Cur >= need {
		return rl.Cur, nil
	}
	want := rl
	want.Cur = need
	if want.Max < need {
		want.Max = need
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		// Not allowed to raise the hard limit: take what it allows.
		rl.Cur = rl.Max
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err2 != nil {
			return 0, fmt.Errorf("setrlimit: %w", err2)
		}
		return rl.Cur, fmt.Errorf("raising RLIMIT_NOFILE to %d: %w", need, err)
	}
	return want.Cur, nil
}

// cpuTimes returns the process's user and system CPU time so far.
func cpuTimes() (user, sys time.Duration, err error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), nil
}

// memStatus returns VmHWM (peak resident set) and VmRSS in bytes, from
// /proc/self/status.
func memStatus() (hwm, rss int64, err error) { return procMem("self") }

// procMem returns VmHWM and VmRSS in bytes of process pid ("self" or a
// number), from /proc/PID/status.
func procMem(pid string) (hwm, rss int64, err error) {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%s/status %s: %w", pid, k, err)
		}
		if k == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	return hwm, rss, sc.Err()
}

// treeHWM returns the largest VmHWM (peak resident set, bytes) of
// process pid and its descendants now, 0 for a process gone.
func treeHWM(pid int) int64 {
	id := strconv.Itoa(pid)
	hwm, _, _ := procMem(id)
	kids, _ := os.ReadFile("/proc/" + id + "/task/" + id + "/children")
	for k := range strings.FieldsSeq(string(kids)) {
		if n, err := strconv.Atoi(k); err == nil {
			hwm = max(hwm, treeHWM(n))
		}
	}
	return hwm
}

// exitIO waits until process pid has exited, without reaping it, and
// returns its /proc/PID/io counts then: a zombie's are final, and
// include the children it reaped. Zero if they cannot be read.
func exitIO(pid int) ProcIO {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return ProcIO{}
		}
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return ProcIO{}
	}
	var io ProcIO
	for line := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(line, ":")
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "rchar":
			io.RChar = n
		case "read_bytes":
			io.ReadBytes = n
		}
	}
	return io
}
