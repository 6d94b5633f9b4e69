package queryhttp

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/pcapsync/pcapsync/internal/testutil/doortest"
)

// TestFrontDoor runs the front door suite on a query listener.
func TestFrontDoor(t *testing.T) {
	doortest.Run(t, doortest.Adapter{
		Start: func(t *testing.T, o doortest.Options) doortest.Door {
			s := startServer(t, Config{Listen: o.Addr, Dir: writeFixture(t, 10, "a1"), TLS: o.TLS, Token: o.Token,
				MaxConns: o.MaxConns, HandshakeTimeout: o.HandshakeTimeout})
			_, port, _ := net.SplitHostPort(s.Addr())
			c := s.Conns()
			return doortest.Door{Addr: net.JoinHostPort("127.0.0.1", port), Open: c.Open.Load,
				Over: func() uint64 { return c.OverLimit.Load() + c.OverSource.Load() }}
		},
		Speak: func(t *testing.T, c net.Conn, tc *tls.Config, token string) error {
			auth := ""
			if token != "" {
				auth = "Bearer " + token
			}
			return doortest.SpeakHTTP(c, tc, "/query", auth)
		},
	})
}
