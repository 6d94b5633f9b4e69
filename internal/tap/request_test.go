package tap

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRequest(t *testing.T) {
	for _, tt := range []struct {
		line string
		want Request
		bad  string // substring of the error, "" for none
	}{
		{line: "PCAPSYNC-TAP/1\n"},
		{line: "PCAPSYNC-TAP/1 agent=web1\n", want: Request{Agent: "web1"}},
		{line: "PCAPSYNC-TAP/1 agent=* iface=eth0\r\n", want: Request{Agent: "*", Iface: "eth0"}},
		{line: "PCAPSYNC-TAP/1  agent=web1   token=a%20b%25c filter=udp port 53 and host 10.0.0.1 \n",
			want: Request{Agent: "web1", Token: "a b%c", Filter: "udp port 53 and host 10.0.0.1"}},
		{line: "PCAPSYNC-TAP/1 filter=agent=x token=y", want: Request{Filter: "agent=x token=y"}},
		{line: "PCAPSYNC-TAP/1 iface=eth0:1", want: Request{Iface: "eth0:1"}},
		{line: "", bad: "does not start"},
		{line: "GET / HTTP/1.1\r\n", bad: "does not start"},
		{line: "PCAPSYNC-TAP/10 agent=a", bad: "does not start"},
		{line: "PCAPSYNC-TAP/1 agent", bad: "not KEY=VALUE"},
		{line: "PCAPSYNC-TAP/1 agent=", bad: "empty agent"},
		{line: "PCAPSYNC-TAP/1 agent=a agent=b", bad: "twice"},
		{line: "PCAPSYNC-TAP/1 agent=../etc", bad: "agent"},
		{line: "PCAPSYNC-TAP/1 agnet=web1", bad: "unknown key"},
		{line: "PCAPSYNC-TAP/1 token=%zz", bad: "token"},
		{line: "PCAPSYNC-TAP/1 filter=  ", bad: "empty filter"},
		{line: "PCAPSYNC-TAP/1 filter=" + strings.Repeat("x", MaxRequest), bad: "longer than"},
	} {
		got, err := ParseRequest(tt.line)
		switch {
		case tt.bad == "" && err != nil:
			t.Errorf("ParseRequest(%q): %v", tt.line, err)
		case tt.bad != "" && (err == nil || !strings.Contains(err.Error(), tt.bad) || !errors.Is(err, ErrBadRequest)):
			t.Errorf("ParseRequest(%q) = %+v, %v; want an ErrBadRequest about %q", tt.line, got, err, tt.bad)
		case tt.bad == "" && got != tt.want:
			t.Errorf("ParseRequest(%q) = %+v, want %+v", tt.line, got, tt.want)
		}
	}
}

func TestFormatRequestRoundTrip(t *testing.T) {
	for _, r := range []Request{
		{},
		{Agent: "web1", Iface: "eth 0", Token: "tok%en with spaces\t", Filter: "udp  port\t53"},
		{Agent: AllAgents, Filter: "tcp"},
	} {
		line := FormatRequest(r)
		if !strings.HasSuffix(line, "\n") || strings.Count(line, "\n") != 1 {
			t.Fatalf("FormatRequest(%+v) = %q: want one line", r, line)
		}
		got, err := ParseRequest(line)
		r.Filter = strings.Join(strings.Fields(r.Filter), " ")
		if err != nil || got != r {
			t.Errorf("ParseRequest(FormatRequest(%+v)) = %+v, %v", r, got, err)
		}
	}
}

func TestApply(t *testing.T) {
	def := Selection{Agent: "web1", Iface: "eth0"}
	for _, tt := range []struct {
		r    Request
		want Selection
	}{
		{Request{}, def},
		{Request{Token: "x"}, def},
		{Request{Agent: "web2"}, Selection{Agent: "web2"}},
		{Request{Agent: AllAgents}, Selection{}},
		{Request{Iface: "eth1"}, Selection{Agent: "web1", Iface: "eth1"}},
		{Request{Agent: "web2", Iface: "lo", Filter: "tcp"}, Selection{Agent: "web2", Iface: "lo", Filter: "tcp"}},
	} {
		if got := tt.r.Apply(def); got != tt.want {
			t.Errorf("%+v.Apply(%+v) = %+v, want %+v", tt.r, def, got, tt.want)
		}
	}
}

func TestErrorLine(t *testing.T) {
	if got := ErrorLine("bad\nthing  here"); got != "PCAPSYNC-TAP/1 ERROR bad thing here\n" {
		t.Errorf("ErrorLine = %q", got)
	}
}
