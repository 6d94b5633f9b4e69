package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// memoryCgroup is a memory cgroup the bench made for itself and its
// children.
type memoryCgroup struct {
	dir    string // the cgroup's directory
	parent string // the directory of the cgroup the bench came from
}

// cgroupRoot is where cgroup file systems are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// enterMemoryCgroup makes a memory cgroup limited to limit bytes (the
// page cache of the files its processes read and write is charged to
// it) and moves this process into it, so that every process it starts
// runs there. Leave moves the process back and removes the cgroup. It
// uses cgroup v2 where it holds the memory controller, else v1's memory
// hierarchy; both need root.
func enterMemoryCgroup(limit int64) (*memoryCgroup, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("a memory cgroup %w", ErrNeedsRoot)
	}
	name := fmt.Sprintf("pcapsync-bench-%d", os.Getpid())
	var cg memoryCgroup
	var limitFile string
	if ctl, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil && strings.Contains(" "+string(ctl), " memory") {
		cg = memoryCgroup{dir: filepath.Join(cgroupRoot, name), parent: filepath.Join(cgroupRoot, ownCgroup("", "0"))}
		limitFile = "memory.max"
	} else if _, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.limit_in_bytes")); err == nil {
		cg = memoryCgroup{dir: filepath.Join(cgroupRoot, "memory", name), parent: filepath.Join(cgroupRoot, "memory", ownCgroup("memory", ""))}
		limitFile = "memory.limit_in_bytes"
	} else {
		return nil, fmt.Errorf("no memory cgroup controller under %s", cgroupRoot)
	}
	if err := os.Mkdir(cg.dir, 0o755); err != nil {
		return nil, fmt.Errorf("making a memory cgroup: %w", err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	err := os.WriteFile(filepath.Join(cg.dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0)
	if err == nil {
		err = os.WriteFile(filepath.Join(cg.dir, "cgroup.procs"), pid, 0)
	}
	if err != nil {
		os.Remove(cg.dir)
		return nil, fmt.Errorf("memory cgroup %s: %w", cg.dir, err)
	}
	return &cg, nil
}

// leave moves this process back to the cgroup it came from and removes
// the cgroup (its processes have exited: the bench waited for them).
func (cg *memoryCgroup) leave() error {
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(cg.parent, "cgroup.procs"), pid, 0); err != nil {
		return fmt.Errorf("leaving memory cgroup %s: %w", cg.dir, err)
	}
	if err := os.Remove(cg.dir); err != nil {
		return fmt.Errorf("removing memory cgroup %s: %w", cg.dir, err)
	}
	return nil
}

// ownCgroup returns this process's cgroup path in the v1 hierarchy of
// controller (controller "") or in the v2 one (id "0"), from
// /proc/self/cgroup ("ID:CONTROLLERS:PATH" per line); "/" if not found.
func ownCgroup(controller, id string) string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "/"
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if id != "" && f[0] == id && f[1] == "" {
			return f[2]
		}
		if controller != "" && slices.Contains(strings.Split(f[1], ","), controller) {
			return f[2]
		}
	}
	return "/"
}
