package sockopt

import (
	"fmt"
	"net"
)

// SetBuffers sets the receive and send buffers of c to at least rcv and
// snd bytes where it can (0 leaves one as it is). As root (CAP_NET_ADMIN)
// on Linux it sets them beyond the system's limit (SO_RCVBUFFORCE,
// SO_SNDBUFFORCE); otherwise the kernel caps them at that limit. It
// returns the sizes in effect as the kernel reports them (Linux reports
// double what was asked, the share it keeps for its own bookkeeping
// included). An error means the sizes could not even be asked for.
func SetBuffers(c *net.UDPConn, rcv, snd int) (gotRcv, gotSnd int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, 0, fmt.Errorf("socket buffers: %w", err)
	}
	if rcv > 0 && !force(rc, true, rcv) {
		if err := c.SetReadBuffer(rcv); err != nil {
			return 0, 0, fmt.Errorf("setting the receive buffer: %w", err)
		}
	}
	if snd > 0 && !force(rc, false, snd) {
		if err := c.SetWriteBuffer(snd); err != nil {
			return 0, 0, fmt.Errorf("setting the send buffer: %w", err)
		}
	}
	gotRcv, gotSnd = sizes(rc)
	return gotRcv, gotSnd, nil
}
