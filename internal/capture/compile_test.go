//go:build cgo

package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// joined is n primitives made by f, joined with sep.
func joined(n int, sep string, f func(i int) string) string {
	s := make([]string, n)
	for i := range s {
		s[i] = f(i)
	}
	return strings.Join(s, sep)
}

func TestCheckFilter(t *testing.T) {
	portranges := func(n int) string {
		return joined(n, " or ", func(i int) string { return fmt.Sprintf("portrange %d-%d", i+1, i+100) })
	}
	for _, tc := range []struct {
		name, expr string
		terms      int
		want       string // "" accepted
	}{
		{"empty", "", 1, ""},
		{"one", "udp port 53", 1, ""},
		{"implicit repeats", "port 53 or 123 and not 5", 3, ""},
		{"symbols, no blanks", "port 1||port 2&&(port 3)", 3, ""},
		{"any case", "tcp AND port 1 Or port 2", 3, ""},
		{"words containing operators", "host orange and ether host andes", 2, ""},
		{"bitwise and arithmetic are no terms", "ip[0] & 0xf | 1 > 5 - 1", 1, ""},
		{"at the limit", portranges(MaxFilterTerms), MaxFilterTerms, ""},
		{"one term more", portranges(MaxFilterTerms + 1), MaxFilterTerms + 1, "filter beyond the limits: 49 terms (primitives joined by and/or), at most 48"},
		{"400 hosts", joined(400, " or ", func(i int) string { return fmt.Sprintf("host 10.0.%d.%d", i/256, i%256) }), 400,
			"filter beyond the limits: 7376 bytes, at most 4096"},
		{"too long", "udp" + strings.Repeat(" ", MaxFilterLen-2), 1, "filter beyond the limits: 4097 bytes, at most 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := filterTerms(tc.expr); n != tc.terms {
				t.Errorf("%d terms, want %d", n, tc.terms)
			}
			err := CheckFilter(tc.expr)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrFilterLimit) || err.Error() != tc.want):
				t.Errorf("err %v, want %q matching ErrFilterLimit", err, tc.want)
			}
		})
	}
}

// TestCompileFilterContext: a compile waiting for another leaves when
// its context ends, having compiled nothing; one whose context ends
// while libpcap compiles returns at once, the compile going on to its
// end and the next one waiting for it.
func TestCompileFilterContext(t *testing.T) {
	compileGate <- struct{}{} // another compile is running
	before := FilterCompiles()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := CompileFilterContext(ctx, LinkTypeEthernet, 0, "udp")
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "waiting for the filter compiler") {
		t.Errorf("cancelled while waiting: %v", err)
	}
	<-compileGate
	if n := FilterCompiles() - before; n != 0 {
		t.Errorf("%d compiles ran for a cancelled wait", n)
	}

	// A slow compile (a few seconds: far beyond the limits) whose
	// context ends: the call returns, the compiler stays busy.
	slow := joined(128, " or ", func(i int) string { return fmt.Sprintf("portrange %d-%d", i+1, i+100) })
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		_, err := CompileFilterContext(ctx, LinkTypeEthernet, 0, slow)
		errc <- err
	}()
	for FilterCompiles() == before { // libpcap has it
		select {
		case err := <-errc:
			t.Fatalf("returned before compiling: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "compiling filter") {
		t.Errorf("cancelled while compiling: %v", err)
	}
	short, stop := context.WithTimeout(context.Background(), time.Millisecond)
	defer stop()
	if _, err := CompileFilterContext(short, LinkTypeEthernet, 0, "udp"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("behind the abandoned compile: %v, want a deadline exceeded", err)
	}
	if _, err := CompileFilter(LinkTypeEthernet, 0, "udp"); err != nil { // waits for it
		t.Error(err)
	}
}
