package filter

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/net/bpf"
)

// program is a classic BPF program as libpcap compiled it, checked
// (newProgram) and run (run) as libpcap's own interpreter runs a
// filter on a packet read from a file (pcap_offline_filter, tcpdump
// -r): BPF's len is the packet's original length, not the bytes
// captured; a load beyond the captured bytes, and a division by zero,
// reject the packet; an unconditional jump's offset is signed (libpcap
// compiles "protochain" as a loop). x/net/bpf's VM differs on the
// first and refuses the last.
type program []bpf.RawInstruction

// Classic BPF opcodes (linux/filter.h, pcap/bpf.h).
const (
	opLdWAbs  = 0x20
	opLdHAbs  = 0x28
	opLdBAbs  = 0x30
	opLdWInd  = 0x40
	opLdHInd  = 0x48
	opLdBInd  = 0x50
	opLdLen   = 0x80
	opLdxLen  = 0x81
	opLdImm   = 0x00
	opLdxImm  = 0x01
	opLdMem   = 0x60
	opLdxMem  = 0x61
	opLdxMsh  = 0xb1
	opSt      = 0x02
	opStx     = 0x03
	opJa      = 0x05
	opJgtK    = 0x25
	opJgeK    = 0x35
	opJeqK    = 0x15
	opJsetK   = 0x45
	opJgtX    = 0x2d
	opJgeX    = 0x3d
	opJeqX    = 0x1d
	opJsetX   = 0x4d
	opRetK    = 0x06
	opRetA    = 0x16
	opTax     = 0x07
	opTxa     = 0x87
	opAluNeg  = 0x84
	aluClass  = 0x04
	aluSrcX   = 0x08
	memWords  = 16
	maxInsns  = 4096 // BPF_MAXINSNS
	aluAdd    = 0x00
	aluSub    = 0x10
	aluMul    = 0x20
	aluDiv    = 0x30
	aluOr     = 0x40
	aluAnd    = 0x50
	aluLsh    = 0x60
	aluRsh    = 0x70
	aluMod    = 0x90
	aluXor    = 0xa0
	aluOpMask = 0xf0
)

// newProgram checks raw as libpcap's pcap_validate_filter does, so
// that run cannot index out of the program or its scratch memory: at
// most 4096 instructions, known opcodes, jumps (a backward
// unconditional one too) landing inside, scratch indexes below 16, no
// division by a constant zero, a return at the end.
func newProgram(raw []bpf.RawInstruction) (program, error) {
	if len(raw) == 0 || len(raw) > maxInsns {
		return nil, fmt.Errorf("%w: %d instructions, want 1..%d", ErrBadProgram, len(raw), maxInsns)
	}
	for i, in := range raw {
		ok := true
		switch in.Op {
		case opLdWAbs, opLdHAbs, opLdBAbs, opLdWInd, opLdHInd, opLdBInd,
			opLdLen, opLdxLen, opLdImm, opLdxImm, opLdxMsh, opRetK, opRetA,
			opTax, opTxa, opAluNeg:
		case opLdMem, opLdxMem, opSt, opStx:
			ok = in.K < memWords
		case opJa:
			t := int64(i) + 1 + int64(int32(in.K))
			ok = t >= 0 && t < int64(len(raw))
		case opJgtK, opJgeK, opJeqK, opJsetK, opJgtX, opJgeX, opJeqX, opJsetX:
			ok = i+1+int(max(in.Jt, in.Jf)) < len(raw)
		default:
			ok = in.Op&^(aluOpMask|aluSrcX) == aluClass && aluOp(in.Op)
			if ok && in.Op&aluSrcX == 0 && (in.Op&aluOpMask == aluDiv || in.Op&aluOpMask == aluMod) {
				ok = in.K != 0
			}
		}
		if !ok {
			return nil, fmt.Errorf("%w: instruction %d (%#04x %d %d %#x)", ErrBadProgram, i, in.Op, in.Jt, in.Jf, in.K)
		}
	}
	if last := raw[len(raw)-1].Op; last != opRetK && last != opRetA {
		return nil, fmt.Errorf("%w: it does not end with a return", ErrBadProgram)
	}
	return program(raw), nil
}

func aluOp(op uint16) bool {
	switch op & aluOpMask {
	case aluAdd, aluSub, aluMul, aluDiv, aluOr, aluAnd, aluLsh, aluRsh, aluMod, aluXor:
		return true
	}
	return false
}

// run runs p on pkt, the captured bytes of a packet wireLen bytes long
// on the wire, and returns what the program returns (0: rejected).
// It allocates nothing. A program that loops (only a backward jump
// can) is cut off, the packet rejected, after len(p)*(len(pkt)+16)
// instructions: libpcap's loops advance through the packet.
func (p program) run(pkt []byte, wireLen uint32) uint32 {
	var a, x uint32
	var mem [memWords]uint32
	buflen := uint32(len(pkt))
	budget := len(p) * (len(pkt) + 16)
	for pc := 0; ; pc++ {
		if budget--; budget < 0 {
			return 0
		}
		in := &p[pc]
		k := in.K
		switch in.Op {
		case opRetK:
			return k
		case opRetA:
			return a
		case opLdWAbs:
			if k > buflen || buflen-k < 4 {
				return 0
			}
			a = binary.BigEndian.Uint32(pkt[k:])
		case opLdHAbs:
			if k > buflen || buflen-k < 2 {
				return 0
			}
			a = uint32(binary.BigEndian.Uint16(pkt[k:]))
		case opLdBAbs:
			if k >= buflen {
				return 0
			}
			a = uint32(pkt[k])
		case opLdWInd:
			if k > buflen || x > buflen-k || buflen-k-x < 4 {
				return 0
			}
			a = binary.BigEndian.Uint32(pkt[k+x:])
		case opLdHInd:
			if k > buflen || x > buflen-k || buflen-k-x < 2 {
				return 0
			}
			a = uint32(binary.BigEndian.Uint16(pkt[k+x:]))
		case opLdBInd:
			if k >= buflen || x >= buflen-k {
				return 0
			}
			a = uint32(pkt[k+x])
		case opLdxMsh:
			if k >= buflen {
				return 0
			}
			x = uint32(pkt[k]&0xf) << 2
		case opLdLen:
			a = wireLen
		case opLdxLen:
			x = wireLen
		case opLdImm:
			a = k
		case opLdxImm:
			x = k
		case opLdMem:
			a = mem[k&(memWords-1)]
		case opLdxMem:
			x = mem[k&(memWords-1)]
		case opSt:
			mem[k&(memWords-1)] = a
		case opStx:
			mem[k&(memWords-1)] = x
		case opJa:
			pc += int(int32(k))
		case opJgtK:
			pc += jump(a > k, in)
		case opJgeK:
			pc += jump(a >= k, in)
		case opJeqK:
			pc += jump(a == k, in)
		case opJsetK:
			pc += jump(a&k != 0, in)
		case opJgtX:
			pc += jump(a > x, in)
		case opJgeX:
			pc += jump(a >= x, in)
		case opJeqX:
			pc += jump(a == x, in)
		case opJsetX:
			pc += jump(a&x != 0, in)
		case opTax:
			x = a
		case opTxa:
			a = x
		case opAluNeg:
			a = -a
		default:
			if in.Op&aluSrcX != 0 {
				k = x
			}
			var ok bool
			if a, ok = alu(in.Op&aluOpMask, a, k); !ok {
				return 0
			}
		}
	}
}

func jump(cond bool, in *bpf.RawInstruction) int {
	if cond {
		return int(in.Jt)
	}
	return int(in.Jf)
}

// alu applies an arithmetic operation as libpcap does: a division or
// remainder by zero rejects the packet (ok false), a shift by 32 or
// more gives 0.
func alu(op uint16, a, v uint32) (uint32, bool) {
	switch op {
	case aluAdd:
		return a + v, true
	case aluSub:
		return a - v, true
	case aluMul:
		return a * v, true
	case aluDiv:
		if v == 0 {
			return 0, false
		}
		return a / v, true
	case aluMod:
		if v == 0 {
			return 0, false
		}
		return a % v, true
	case aluOr:
		return a | v, true
	case aluAnd:
		return a & v, true
	case aluXor:
		return a ^ v, true
	case aluLsh:
		if v >= 32 {
			return 0, true
		}
		return a << v, true
	case aluRsh:
		if v >= 32 {
			return 0, true
		}
		return a >> v, true
	}
	return 0, false
}
