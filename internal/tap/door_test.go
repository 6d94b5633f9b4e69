package tap

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/doortest"
)

// TestFrontDoor runs the front door suite on a tap listener.
func TestFrontDoor(t *testing.T) {
	var tp *Tap
	doortest.Run(t, doortest.Adapter{
		Start: func(t *testing.T, o doortest.Options) doortest.Door {
			cfg := Config{TLS: o.TLS, Token: o.Token, MaxConns: o.MaxConns, HandshakeTimeout: o.HandshakeTimeout,
				RequestWait: o.HandshakeTimeout, Logger: slog.New(slog.DiscardHandler)}
			tp = runTapOn(t, cfg, o.Addr)
			door := tp.Doors()[0]
			_, port, _ := net.SplitHostPort(door.Addr().String())
			return doortest.Door{Addr: net.JoinHostPort("127.0.0.1", port), Open: door.Counters.Open.Load,
				Over: func() uint64 { return door.Counters.OverLimit.Load() + door.Counters.OverSource.Load() }}
		},
		Speak: func(t *testing.T, c net.Conn, tc *tls.Config, token string) error {
			clients, rejected := tp.Counters.Clients.Load(), tp.Counters.Rejected.Load()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if tc != nil {
				c = tls.Client(c, tc)
			}
			req := Proto
			if token != "" {
				req += " token=" + token
			}
			if _, err := io.WriteString(c, req+"\n"); err != nil {
				return err
			}
			var outcome error
			testutil.EventuallyTrue(t, 10*time.Second, "the client served or refused", func() bool {
				switch {
				case tp.Counters.Clients.Load() > clients:
					outcome = nil
				case tp.Counters.Rejected.Load() > rejected:
					outcome = errors.New("refused")
				default:
					return false
				}
				return true
			})
			if outcome != nil {
				line, err := bufio.NewReader(c).ReadString('\n')
				if !strings.HasPrefix(line, Proto+" ERROR") {
					return fmt.Errorf("%w without an error line: %q, %v", outcome, line, err)
				}
				return fmt.Errorf("%w: %s", outcome, strings.TrimSpace(line))
			}
			return nil
		},
		NoPlainHandshakeTimeout: "a silent plain tap client gets its listener's default selection after RequestWait (Wireshark's TCP@)",
	})
}
