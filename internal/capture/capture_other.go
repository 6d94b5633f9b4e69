//go:build !linux

package capture

import "golang.org/x/net/bpf"

// ring is a stand-in: there is no AF_PACKET outside Linux.
type ring struct{}

func interfaceType(string) (uint16, error) { return 0, ErrNotSupported }

func largestFrame(string) int { return LargestFrame }

func openRing(settings, uint16, []bpf.RawInstruction) (*ring, rawStats, error) {
	return nil, rawStats{}, ErrNotSupported
}

func (*ring) read(*Packet) error       { return ErrNotSupported }
func (*ring) ready() bool              { return false }
func (*ring) stats() (rawStats, error) { return rawStats{}, ErrNotSupported }
func (*ring) close() error             { return nil }
