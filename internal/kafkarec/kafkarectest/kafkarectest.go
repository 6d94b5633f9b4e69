// Package kafkarectest makes the frames of test records: an agent's
// hello and numbered batches (for internal/kafkarec's and
// internal/kafkaio's tests; it imports neither).
package kafkarectest

import (
	"encoding/binary"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Hello returns the Hello frame of agent name, instance's session,
// with one Ethernet interface.
func Hello(name string, instance byte) []byte {
	h := wire.Hello{Name: name, Host: "h", Instance: [16]byte{instance, 1},
		Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}}
	return wire.AppendHello(nil, &h)
}

// Batch returns an encoder holding batch seq's n packets of 60 bytes
// on interface 0, each holding seq and its index, packet i at seq
// seconds plus i nanoseconds; Finish(seq) makes the frame.
func Batch(seq uint64, n int) *wire.BatchEncoder {
	e := &wire.BatchEncoder{}
	e.Reset(nil)
	pkt := make([]byte, 60)
	for i := range n {
		binary.BigEndian.PutUint64(pkt, seq)
		binary.BigEndian.PutUint32(pkt[8:], uint32(i))
		e.Append(int64(seq)*1e9+int64(i), 0, 60, pkt)
	}
	return e
}
