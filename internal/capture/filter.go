//go:build cgo

package capture

// This is the only file that needs cgo and libpcap: filter compilation is
// quarantined here. Without cgo, filter_nocgo.go takes its place.

/*
#cgo LDFLAGS: -lpcap
#include <pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// compile_file compiles expr as tcpdump -r does for a pcap file whose
// 24-byte header is hdr: pcap_fopen_offline on the header in memory,
// then pcap_compile with optimization and netmask 0. On failure errbuf
// holds libpcap's message.
static int compile_file(char *hdr, size_t hdrlen, const char *expr, struct bpf_program *prog, char *errbuf) {
	FILE *f = fmemopen(hdr, hdrlen, "rb");
	if (f == NULL) {
		snprintf(errbuf, PCAP_ERRBUF_SIZE, "fmemopen failed");
		return -1;
	}
	pcap_t *p = pcap_fopen_offline(f, errbuf);
	if (p == NULL) {
		fclose(f);
		return -1;
	}
	int rc = pcap_compile(p, prog, expr, 1, 0);
	if (rc != 0) {
		snprintf(errbuf, PCAP_ERRBUF_SIZE, "%s", pcap_geterr(p));
	}
	pcap_close(p);
	return rc;
}
*/
import "C"

import (
	"encoding/binary"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcap"
	"golang.org/x/net/bpf"
)

// compile compiles expr with libpcap for the given DLT_* value.
func compile(dlt uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	ins, err := pcap.CompileBPFFilter(layers.LinkType(dlt), snapLen, expr)
	if err != nil {
		return nil, &filterError{expr: expr, msg: err.Error()}
	}
	out := make([]bpf.RawInstruction, len(ins))
	for i, in := range ins {
		out[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}

// compileFile compiles expr with libpcap as for a pcap file of the
// given LINKTYPE_* value (libpcap maps it to its DLT_*), in this host's
// byte order or (swapped) the other.
func compileFile(linkType uint16, swapped bool, expr string) ([]bpf.RawInstruction, error) {
	// The header in C memory: fmemopen keeps the pointer.
	hdr := (*[24]byte)(C.calloc(1, 24))
	defer C.free(unsafe.Pointer(hdr))
	var order binary.ByteOrder = binary.NativeEndian
	if swapped {
		if binary.NativeEndian.Uint16([]byte{0, 1}) == 1 {
			order = binary.LittleEndian
		} else {
			order = binary.BigEndian
		}
	}
	order.PutUint32(hdr[0:], 0xa1b2c3d4)
	order.PutUint16(hdr[4:], 2)
	order.PutUint16(hdr[6:], 4)
	order.PutUint32(hdr[16:], MaxSnapLen)
	order.PutUint32(hdr[20:], uint32(linkType))
	cexpr := C.CString(expr)
	defer C.free(unsafe.Pointer(cexpr))
	errbuf := (*C.char)(C.calloc(1, C.PCAP_ERRBUF_SIZE+1))
	defer C.free(unsafe.Pointer(errbuf))
	var prog C.struct_bpf_program
	if C.compile_file((*C.char)(unsafe.Pointer(hdr)), 24, cexpr, &prog, errbuf) != 0 {
		return nil, &filterError{expr: expr, msg: C.GoString(errbuf)}
	}
	defer C.pcap_freecode(&prog)
	ins := unsafe.Slice(prog.bf_insns, int(prog.bf_len))
	out := make([]bpf.RawInstruction, len(ins))
	for i, in := range ins {
		out[i] = bpf.RawInstruction{Op: uint16(in.code), Jt: uint8(in.jt), Jf: uint8(in.jf), K: uint32(in.k)}
	}
	return out, nil
}
