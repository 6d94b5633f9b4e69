//go:build unix

package freeport

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestReserve: the ports handed out are in range, distinct while held
// (in this process and in another), and bindable; a released port can
// be handed out again.
func TestReserve(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") != "" {
		// The child: hold 50 ports and print them.
		var ps []string
		for range 50 {
			p, _, err := Reserve()
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, strconv.Itoa(p))
		}
		os.Stdout.WriteString(strings.Join(ps, " ") + "\n")
		return
	}
	held := map[int]bool{}
	var releases []func()
	for range 200 {
		p, release, err := Reserve()
		if err != nil {
			t.Fatal(err)
		}
		if p < First || p > Last || held[p] {
			t.Fatalf("port %d: out of range or handed out twice", p)
		}
		held[p] = true
		releases = append(releases, release)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
	// Another process, while these are held, gets none of them.
	cmd := exec.Command(os.Args[0], "-test.run=^TestReserve$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	fields := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	if len(fields) != 50 {
		t.Fatalf("child printed %q", out)
	}
	for _, f := range fields {
		if p, _ := strconv.Atoi(f); held[p] {
			t.Errorf("the child got port %d, held here", p)
		}
	}
	for _, r := range releases {
		r()
	}
	// A port bound by a process that does not lock is not free.
	p := Port(t)
	ln, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if free(p) {
		t.Errorf("port %d bound for UDP, taken as free", p)
	}
}
