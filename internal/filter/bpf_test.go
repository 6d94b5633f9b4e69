package filter

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/bpf"
)

func asm(t testing.TB, ins ...bpf.Instruction) []bpf.RawInstruction {
	t.Helper()
	raw, err := bpf.Assemble(ins)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestProgramRun: the interpreter runs as libpcap's bpf_filter.c.
func TestProgramRun(t *testing.T) {
	ret1 := bpf.RetConstant{Val: 1}
	loop := []bpf.RawInstruction{ // A counts to 3 through a backward jump
		{Op: opLdImm, K: 0},
		{Op: aluClass | aluAdd, K: 1},
		{Op: opJgeK, Jt: 1, K: 3},
		{Op: opJa, K: uint32(0xfffffffd)}, // -3
		{Op: opRetA},
	}
	for _, c := range []struct {
		name    string
		prog    []bpf.RawInstruction
		pkt     int
		wireLen uint32
		want    uint32
	}{
		{"len is the original length", asm(t, bpf.LoadExtension{Num: bpf.ExtLen}, bpf.RetA{}), 96, 1500, 1500},
		{"ldx len", []bpf.RawInstruction{{Op: opLdxLen}, {Op: opTxa}, {Op: opRetA}}, 10, 60, 60},
		{"word within", asm(t, bpf.LoadAbsolute{Off: 6, Size: 4}, ret1), 10, 10, 1},
		{"word past the captured bytes", asm(t, bpf.LoadAbsolute{Off: 8, Size: 4}, ret1), 10, 1500, 0},
		{"last byte", asm(t, bpf.LoadAbsolute{Off: 9, Size: 1}, ret1), 10, 10, 1},
		{"byte past", asm(t, bpf.LoadAbsolute{Off: 10, Size: 1}, ret1), 10, 1500, 0},
		{"indirect that wraps", asm(t, bpf.LoadConstant{Dst: bpf.RegX, Val: 0xffffffff}, bpf.LoadIndirect{Off: 2, Size: 1}, ret1), 10, 10, 0},
		{"indirect half", asm(t, bpf.LoadConstant{Dst: bpf.RegX, Val: 7}, bpf.LoadIndirect{Off: 1, Size: 2}, ret1), 10, 10, 1},
		{"indirect half past", asm(t, bpf.LoadConstant{Dst: bpf.RegX, Val: 8}, bpf.LoadIndirect{Off: 1, Size: 2}, ret1), 10, 10, 0},
		{"msh", asm(t, bpf.LoadMemShift{Off: 0}, bpf.TXA{}, bpf.RetA{}), 10, 10, 0x14},
		{"msh past", asm(t, bpf.LoadMemShift{Off: 10}, ret1), 10, 10, 0},
		{"division by X zero", asm(t, bpf.LoadConstant{Val: 5}, bpf.ALUOpX{Op: bpf.ALUOpDiv}, ret1), 10, 10, 0},
		{"remainder by X zero", asm(t, bpf.LoadConstant{Val: 5}, bpf.ALUOpX{Op: bpf.ALUOpMod}, ret1), 10, 10, 0},
		{"shift by 32", asm(t, bpf.LoadConstant{Val: 5}, bpf.LoadConstant{Dst: bpf.RegX, Val: 32}, bpf.ALUOpX{Op: bpf.ALUOpShiftLeft}, bpf.RetA{}), 10, 10, 0},
		{"negate", asm(t, bpf.LoadConstant{Val: 1}, bpf.NegateA{}, bpf.RetA{}), 10, 10, 0xffffffff},
		{"scratch", asm(t, bpf.LoadConstant{Val: 9}, bpf.StoreScratch{Src: bpf.RegA, N: 15}, bpf.LoadConstant{Val: 0}, bpf.LoadScratch{Dst: bpf.RegA, N: 15}, bpf.RetA{}), 0, 0, 9},
		{"backward jump", loop, 0, 0, 3},
		{"a loop cut off", []bpf.RawInstruction{{Op: opJa, K: 0xffffffff}, {Op: opRetK, K: 1}}, 10, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := newProgram(c.prog)
			if err != nil {
				t.Fatal(err)
			}
			pkt := make([]byte, c.pkt)
			if c.pkt > 0 {
				pkt[0] = 0x45
			}
			if got := p.run(pkt, c.wireLen); got != c.want {
				t.Errorf("run = %#x, want %#x", got, c.want)
			}
		})
	}
}

// TestNewProgramRefuses: a program run could index out of (itself, its
// scratch memory) or that does not end is refused.
func TestNewProgramRefuses(t *testing.T) {
	ret := bpf.RawInstruction{Op: opRetK, K: 1}
	for name, prog := range map[string][]bpf.RawInstruction{
		"empty":                {},
		"too long":             make([]bpf.RawInstruction, maxInsns+1),
		"no return at the end": {{Op: opLdImm}},
		"jump past the end":    {{Op: opJeqK, Jt: 1}, ret},
		"ja past the end":      {{Op: opJa, K: 1}, ret},
		"ja before the start":  {{Op: opJa, K: 0xfffffffe}, ret},
		"scratch 16":           {{Op: opSt, K: 16}, ret},
		"division by 0":        {{Op: aluClass | aluDiv, K: 0}, ret},
		"unknown opcode":       {{Op: 0xff}, ret},
		"unknown alu":          {{Op: aluClass | 0xb0}, ret},
	} {
		if _, err := newProgram(prog); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestMatchAllocs: matching allocates nothing once compiled.
func TestMatchAllocs(t *testing.T) {
	f, err := New("udp port 53 or less 100")
	if err != nil {
		t.Fatal(err)
	}
	pkt := make([]byte, 200)
	binary.BigEndian.PutUint16(pkt[12:], 0x0800)
	pkt[14] = 0x45
	if n := testing.AllocsPerRun(100, func() { f.Match(1, pkt, 1500) }); n != 0 {
		t.Errorf("%v allocations per match, want 0", n)
	}
}

// TestNewLinkTypes: a filter libpcap compiles for some link type
// pcapsync meets is accepted, one it refuses for all is refused with
// its message for Ethernet.
func TestNewLinkTypes(t *testing.T) {
	for _, f := range []string{"inbound", "outbound", "ifindex 3", "wlan type data", "ip broadcast", "ip6 protochain 17"} {
		if _, err := New(f); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
	_, err := New("port 70000")
	if err == nil || err.Error() != `capture: compiling filter "port 70000": illegal port number 70000 > 65535` {
		t.Errorf("port 70000: %v", err)
	}
}

// FuzzProgram: on the programs x/net/bpf's VM also runs (no backward
// jump, no extension) and a packet captured whole, the interpreter
// gives the VM's result; on any program it accepts, it returns.
func FuzzProgram(f *testing.F) {
	enc := func(ins []bpf.RawInstruction) []byte {
		var b []byte
		for _, in := range ins {
			b = binary.LittleEndian.AppendUint16(b, in.Op)
			b = append(b, in.Jt, in.Jf)
			b = binary.LittleEndian.AppendUint32(b, in.K)
		}
		return b
	}
	f.Add(enc(asm(f, bpf.LoadAbsolute{Off: 12, Size: 2}, bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x800, SkipFalse: 1}, bpf.RetConstant{Val: 1}, bpf.RetConstant{Val: 0})), make([]byte, 20))
	f.Add(enc(asm(f, bpf.LoadMemShift{Off: 14}, bpf.LoadIndirect{Off: 16, Size: 2}, bpf.ALUOpX{Op: bpf.ALUOpDiv}, bpf.RetA{})), []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, code, pkt []byte) {
		var raw []bpf.RawInstruction
		for len(code) >= 8 && len(raw) < 64 {
			raw = append(raw, bpf.RawInstruction{Op: binary.LittleEndian.Uint16(code), Jt: code[2], Jf: code[3], K: binary.LittleEndian.Uint32(code[4:])})
			code = code[8:]
		}
		p, err := newProgram(raw)
		if err != nil {
			return
		}
		got := p.run(pkt, uint32(len(pkt)))
		ins, ok := bpf.Disassemble(raw)
		if !ok {
			return
		}
		for _, in := range ins {
			if _, ext := in.(bpf.LoadExtension); ext {
				return
			}
		}
		vm, err := bpf.NewVM(ins)
		if err != nil {
			return
		}
		want, err := vm.Run(pkt)
		if err != nil {
			return
		}
		if got != uint32(want) {
			t.Fatalf("program %v on % x: %d, x/net/bpf %d", ins, pkt, got, want)
		}
	})
}

// BenchmarkMatch: a filter on Ethernet packets, in this interpreter and
// in x/net/bpf's VM (what ran before), side by side.
func BenchmarkMatch(b *testing.B) {
	const expr = "udp port 53 or (tcp and host 10.1.2.3) or less 100"
	f, err := New(expr)
	if err != nil {
		b.Fatal(err)
	}
	pkt := make([]byte, 590)
	binary.BigEndian.PutUint16(pkt[12:], 0x0800)
	pkt[14], pkt[23] = 0x45, 6
	copy(pkt[26:], []byte{10, 1, 2, 4, 10, 1, 2, 5})
	b.Run("pcapsync", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f.Match(1, pkt, uint32(len(pkt)))
		}
	})
	b.Run("x-net-bpf", func(b *testing.B) {
		ins, _ := bpf.Disassemble(f.progs[progKey{linkType: 1}])
		vm, err := bpf.NewVM(ins)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			vm.Run(pkt)
		}
	})
}
