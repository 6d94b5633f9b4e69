package collector

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/doortest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestFrontDoor runs the front door suite on the agents' listener.
func TestFrontDoor(t *testing.T) {
	var instance int
	doortest.Run(t, doortest.Adapter{
		Start: func(t *testing.T, o doortest.Options) doortest.Door {
			ts := startServerOn(t, Config{TLS: o.TLS, Insecure: o.TLS == nil, Token: o.Token, MaxConns: o.MaxConns,
				MaxConnsPerSource: o.MaxPerSource, HandshakeTimeout: o.HandshakeTimeout}, o.Addr)
			_, port, _ := net.SplitHostPort(ts.addr)
			open := func() int64 {
				if d := ts.srv.Door(); d != nil {
					return d.Counters.Open.Load()
				}
				return 0
			}
			return doortest.Door{Addr: net.JoinHostPort("127.0.0.1", port), Open: open, Over: ts.core.Counters.OverLimit.Load}
		},
		Speak: func(t *testing.T, c net.Conn, tc *tls.Config, token string) error {
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if tc != nil {
				c = tls.Client(c, tc)
			}
			instance++
			h := helloN(doortest.Name, instance)
			h.Token = token
			c.Write(wire.AppendHello(nil, h)) // TLS 1.3: a refused certificate shows on the first read
			welcome, reason, err := (&agentConn{conn: c, fr: wire.NewFrameReader(c, wire.Limits{})}).reply()
			switch {
			case welcome:
				return nil
			case err != nil:
				return err
			}
			return fmt.Errorf("%w: %s", errRejected, reason)
		},
	})
}

var errRejected = errors.New("rejected")
