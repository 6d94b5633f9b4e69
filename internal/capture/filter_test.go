//go:build cgo

package capture

import (
	"errors"
	"testing"

	"golang.org/x/net/bpf"
)

func TestCompileFilter(t *testing.T) {
	ret := func(k uint32) bpf.RawInstruction { return bpf.RawInstruction{Op: 0x06, K: k} }
	tests := []struct {
		name     string
		linkType uint16
		snapLen  int
		expr     string
		wantErr  error
		wantMsg  string
		check    func(t *testing.T, prog []bpf.RawInstruction)
	}{
		{name: "empty accepts everything", linkType: LinkTypeEthernet, snapLen: 1500, check: func(t *testing.T, prog []bpf.RawInstruction) {
			if len(prog) != 1 || prog[0] != ret(1500) {
				t.Errorf("got %v, want [ret #1500]", prog)
			}
		}},
		{name: "snaplen 0 is the default", linkType: LinkTypeEthernet, check: func(t *testing.T, prog []bpf.RawInstruction) {
			if len(prog) != 1 || prog[0] != ret(DefaultSnapLen) {
				t.Errorf("got %v, want [ret #%d]", prog, DefaultSnapLen)
			}
		}},
		{name: "ethernet udp", linkType: LinkTypeEthernet, snapLen: 100, expr: "udp", check: func(t *testing.T, prog []bpf.RawInstruction) {
			// Ethernet programs start by loading the EtherType at offset 12.
			if len(prog) < 3 || prog[0] != (bpf.RawInstruction{Op: 0x28, K: 12}) || prog[len(prog)-2] != ret(100) {
				t.Errorf("got %v, want an Ethernet program returning 100", prog)
			}
		}},
		{name: "raw ip udp", linkType: LinkTypeRaw, snapLen: 100, expr: "udp", check: func(t *testing.T, prog []bpf.RawInstruction) {
			// Raw IP programs start with the IP version nibble at offset 0.
			if len(prog) < 3 || prog[0] != (bpf.RawInstruction{Op: 0x30, K: 0}) {
				t.Errorf("got %v, want a raw-IP program", prog)
			}
		}},
		{name: "syntax error", linkType: LinkTypeEthernet, expr: "tcp prt 80", wantErr: ErrBadFilter,
			wantMsg: `capture: compiling filter "tcp prt 80": can't parse filter expression: syntax error`},
		// libpcap would compile "udp" alone, or "" (everything).
		{name: "NUL cuts nothing", linkType: LinkTypeEthernet, expr: "udp\x00 and garbage", wantErr: ErrBadFilter,
			wantMsg: `capture: compiling filter "udp\x00 and garbage": a NUL byte at offset 3`},
		{name: "NUL alone", linkType: LinkTypeEthernet, expr: "\x00", wantErr: ErrBadFilter,
			wantMsg: `capture: compiling filter "\x00": a NUL byte at offset 0`},
		{name: "bad snaplen", linkType: LinkTypeEthernet, snapLen: -1, wantErr: ErrInvalidConfig,
			wantMsg: "capture: snaplen -1 out of range 1..262144"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog, err := CompileFilter(tt.linkType, tt.snapLen, tt.expr)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("CompileFilter() = %v, want %v", err, tt.wantErr)
				}
				if err.Error() != tt.wantMsg {
					t.Errorf("CompileFilter() = %q, want %q", err, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatalf("CompileFilter(): %v", err)
			}
			tt.check(t, prog)
		})
	}
}
