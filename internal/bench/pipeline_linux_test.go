package bench

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

// TestPipelineMemoryLimit runs the comparison in a memory cgroup (root
// only) and checks the cgroup is gone afterwards and the run is labelled.
func TestPipelineMemoryLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv(requireEnv) == "1" {
			t.Fatal("needs root for a memory cgroup")
		}
		t.Skip("needs root for a memory cgroup")
	}
	cg, err := enterMemoryCgroup(1 << 30)
	if err != nil {
		t.Skipf("this machine gives no memory cgroup: %v", err)
	}
	if err := cg.leave(); err != nil {
		t.Fatal(err)
	}
	before, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "pcapsync-bench-*"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := PipelineConfig{Exe: pcapsyncExe(t), Packets: 20000, Mixes: []gen.Mix{gen.MixIMIX}, Rounds: 1,
		CollectorArgs: []string{"--retain-free", "0"}, VsCollectorArgs: []string{"--rotate-size", "2M", "--retain-size", "8M"}, MemoryLimit: 256 << 20}
	res, err := Pipeline(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || len(res[0].Methods) != 3 || len(res[0].Methods[1].Runs) != 1 || res[0].Methods[2].Name != MethodFloor {
		t.Fatalf("results %+v", res)
	}
	after, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "pcapsync-bench-*"))
	after2, _ := filepath.Glob(filepath.Join(cgroupRoot, "pcapsync-bench-*"))
	if len(after)+len(after2) != len(before) {
		t.Errorf("memory cgroups left: %q %q", after, after2)
	}
	var out bytes.Buffer
	if err := WritePipeline(&out, cfg, res, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "memory cgroup of 268 435 456 bytes") {
		t.Errorf("the report does not say the run was in a memory cgroup:\n%s", out.String())
	}
}

// TestMemoryCgroupReturns: leaving the memory cgroup puts this process
// back into the cgroup it was in.
func TestMemoryCgroupReturns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a memory cgroup")
	}
	before, _ := os.ReadFile("/proc/self/cgroup")
	cg, err := enterMemoryCgroup(1 << 30)
	if err != nil {
		t.Skipf("this machine gives no memory cgroup: %v", err)
	}
	inside, _ := os.ReadFile("/proc/self/cgroup")
	if err := cg.leave(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile("/proc/self/cgroup")
	if !strings.Contains(string(inside), "pcapsync-bench-") {
		t.Errorf("inside the cgroup, /proc/self/cgroup says:\n%s", inside)
	}
	if string(after) != string(before) {
		t.Errorf("after leaving, /proc/self/cgroup:\n%s\nwant, as before:\n%s", after, before)
	}
}

// TestFreeLoopbackAddr: the address is on loopback, free (it can be
// listened on), and below the ephemeral range, where no outgoing
// connection takes it meanwhile.
func TestFreeLoopbackAddr(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip(err)
	}
	low, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		addr, err := freeLoopbackAddr()
		if err != nil {
			t.Fatal(err)
		}
		host, port, _ := net.SplitHostPort(addr)
		if n, _ := strconv.Atoi(port); host != "127.0.0.1" || n < 1024 || (low > 2024 && n >= low) {
			t.Fatalf("%s: want 127.0.0.1 and a port in [1024, %d)", addr, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s is not free: %v", addr, err)
		}
		l.Close()
	}
}
