//go:build linux

package e2e

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// badName is the one agent name, besides the good agent's, that the bad
// clients may get accepted; it must never receive a packet.
const badName = "ok-bad"

// badCase is a client that speaks wrongly to the collector.
type badCase struct {
	name string
	// hello is the agent name to shake hands with first ("" for none);
	// the collector must answer with a Welcome.
	hello string
	// send writes the bad input.
	send func(c *net.TCPConn) error
	// reason must appear in the collector's log line about this
	// connection.
	reason string
}

var badCases = []badCase{
	{
		name:   "garbage",
		send:   func(c *net.TCPConn) error { return write(c, []byte("GET / HTTP/1.1\r\n\r\n")) },
		reason: "bad magic",
	},
	{
		name:   "truncated-frame",
		send:   sendTruncated,
		reason: "unexpected EOF",
	},
	{
		name:   "truncated-frame-after-hello",
		hello:  badName,
		send:   sendTruncated,
		reason: "unexpected EOF",
	},
	{
		name:   "4GiB-frame",
		send:   sendHuge,
		reason: "length exceeds limit",
	},
	{
		name:   "4GiB-frame-after-hello",
		hello:  badName,
		send:   sendHuge,
		reason: "length exceeds limit",
	},
	{
		name:   "path-in-agent-name",
		send:   sendEvilHello,
		reason: "bad agent name",
	},
	{
		name:   "corrupt-batch-checksum",
		hello:  badName,
		send:   sendCorruptBatch,
		reason: "checksum",
	},
}

func write(c *net.TCPConn, b []byte) error {
	_, err := c.Write(b)
	return err
}

// sendTruncated sends a batch frame header claiming 1000 bytes, then 10
// bytes, then ends its side of the stream.
func sendTruncated(c *net.TCPConn) error {
	b := wire.AppendHeader(nil, wire.TypeBatch, uint8(wire.CodecNone), 1000)
	b = append(b, make([]byte, 10)...)
	if err := write(c, b); err != nil {
		return err
	}
	return c.CloseWrite()
}

// sendHuge sends a batch frame header claiming 4 GiB - 1 and nothing more.
func sendHuge(c *net.TCPConn) error {
	return write(c, wire.AppendHeader(nil, wire.TypeBatch, uint8(wire.CodecNone), 0xFFFFFFFF))
}

// sendEvilHello introduces itself as "../evil" and requires a Reject
// that names it.
func sendEvilHello(c *net.TCPConn) error {
	const evil = "../evil"
	h, p, err := hello(c, evil)
	if err != nil {
		return err
	}
	if h.Type != wire.TypeReject {
		return fmt.Errorf("hello %q answered with a %s frame, want reject", evil, h.Type)
	}
	reason, err := wire.ParseReject(p)
	if err != nil {
		return err
	}
	if !strings.Contains(reason, evil) {
		return fmt.Errorf("reject reason %q does not mention the name %q", reason, evil)
	}
	return nil
}

// sendCorruptBatch sends a well-formed batch with one byte of its
// packet data flipped, so its CRC no longer matches.
func sendCorruptBatch(c *net.TCPConn) error {
	var enc wire.BatchEncoder
	enc.Reset(nil)
	buf := make([]byte, 576)
	for seq := range uint64(4) {
		enc.Append(time.Now().UnixNano(), 0, 576, gen.Frame(buf, gen.LinkTypeEthernet, 99, seq))
	}
	b := enc.Finish(1)
	b[len(b)-100] ^= 0x20
	return write(c, b)
}

// hello sends a Hello for name (one Ethernet interface) and returns the
// collector's answer.
func hello(c net.Conn, name string) (wire.Header, []byte, error) {
	h := wire.Hello{Codecs: 1 << wire.CodecNone, Name: name, Host: "e2e-bad-client",
		Interfaces: []wire.Interface{{Name: "eth0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535}}}
	rand.Read(h.Instance[:])
	if _, err := c.Write(wire.AppendHello(nil, &h)); err != nil {
		return wire.Header{}, nil, fmt.Errorf("sending hello: %w", err)
	}
	hdr, p, err := wire.NewFrameReader(c, wire.Limits{}).Next()
	if err != nil {
		return hdr, nil, fmt.Errorf("reading the answer to hello %q: %w", name, err)
	}
	return hdr, p, nil
}

// runBadCase connects, runs bc and checks that the collector closes the
// connection and logs bc.reason for it.
func runBadCase(addr string, coll *proc, bc badCase) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	c := conn.(*net.TCPConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if bc.hello != "" {
		h, _, err := hello(c, bc.hello)
		if err != nil {
			return err
		}
		if h.Type != wire.TypeWelcome {
			return fmt.Errorf("hello %q answered with a %s frame, want welcome", bc.hello, h.Type)
		}
	}
	if err := bc.send(c); err != nil {
		return fmt.Errorf("sending: %w", err)
	}
	// The collector must close the connection: whatever else it sends
	// (a Reject), the stream ends.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("waiting for the collector to close the connection: %w", err)
	}
	remote := "remote=" + c.LocalAddr().String()
	return testutil.Poll(3*time.Second, func() error {
		var lines []string
		for line := range strings.Lines(coll.stderr.String()) {
			if strings.Contains(line, remote+" ") || strings.HasSuffix(strings.TrimSpace(line), remote) {
				if strings.Contains(line, bc.reason) {
					return nil
				}
				lines = append(lines, line)
			}
		}
		return fmt.Errorf("collector logged no line with %q for %s; its lines for it:\n%s", bc.reason, remote, strings.Join(lines, ""))
	})
}

// TestBadInput has raw TCP clients send garbage, truncated, oversized and
// corrupt frames and a path-traversing agent name while a good agent
// replays: each bad connection is closed with a logged reason, the good
// agent's output is complete, the collector keeps running, and nothing
// is written but the good agent's directory (and perhaps an empty one for
// the accepted bad name), never anything outside the output directory.
func TestBadInput(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		count  = 100_000
		stream = 7
		good   = "good7"
	)
	in := filepath.Join(t.TempDir(), "good.pcap")
	writeGenFile(t, in, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: 7})

	parent := t.TempDir()
	dir := filepath.Join(parent, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir)
	agent := startReplay(t, ctx, addr, good, in)
	coll.waitSessions(1, 10*time.Second)

	// Cases run concurrently with the agent and with each other, except
	// those that use badName: a second session of one name replaces the
	// first, so they take turns.
	errs := make(chan error, len(badCases))
	var wg sync.WaitGroup
	var turns sync.Mutex
	for _, bc := range badCases {
		wg.Go(func() {
			if bc.hello != "" {
				turns.Lock()
				defer turns.Unlock()
			}
			if err := runBadCase(addr, coll, bc); err != nil {
				errs <- fmt.Errorf("%s: %w", bc.name, err)
			}
		})
	}
	expectNoReconnects(t, agent, finishReplay(t, agent, count, 45*time.Second))
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	if coll.exited() {
		t.Fatalf("collector exited (%v)", coll.cmd.ProcessState)
	}
	// It still shakes hands.
	if conn, err := net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
		t.Errorf("collector no longer accepts connections: %v", err)
	} else {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if h, _, err := hello(conn, badName); err != nil || h.Type != wire.TypeWelcome {
			t.Errorf("after the bad clients, a good hello got %s, %v; want a welcome", h.Type, err)
		}
		conn.Close()
	}
	coll.stop(20 * time.Second)
	s := coll.collectorSummary()
	t.Logf("collector: %+v", s)
	if s.Rejected < 4 || s.ProtocolErrors < 2 {
		t.Errorf("collector counted %d rejected handshakes and %d protocol errors, want at least 4 and 2", s.Rejected, s.ProtocolErrors)
	}

	r := checkAgentDir(t, filepath.Join(dir, good))
	r.expectExactlyOnce(t, good, map[uint32]uint64{stream: count})
	for _, name := range agentDirs(t, dir) {
		switch name {
		case good:
		case badName:
			if r := checkAgentDir(t, filepath.Join(dir, badName)); r.Packets != 0 {
				t.Errorf("%s holds %d packets from bad clients, want none", badName, r.Packets)
			}
		default:
			t.Errorf("collector dir holds an unexpected entry %q", name)
		}
	}
	if got := dirEntries(t, parent); !slices.Equal(got, []string{"out"}) {
		t.Errorf("the directory around the collector's holds %q, want only [out]", got)
	}
	for _, p := range []string{filepath.Join(parent, "evil"), filepath.Join(dir, "evil")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists: the name \"../evil\" escaped", p)
		}
	}
}
