package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// tapFlags are the collector's --tap flags.
type tapFlags struct {
	specs []tapSpec
	queue int64
}

// tapSpec is one --tap HOST:PORT[=AGENT[:IFACE]].
type tapSpec struct {
	addr string
	def  tap.Selection
}

func addTapFlags(fs *pflag.FlagSet) *tapFlags {
	tf := &tapFlags{queue: tap.DefaultQueueSize}
	fs.Func("tap", "serve a live pcapng stream of what is written on HOST:PORT[=AGENT[:IFACE]] (repeatable): `wireshark -k -i TCP@HOST:PORT` sees AGENT (default every agent), `pcapsync tail` asks for any; plain TCP on loopback, TLS like the agents' listener elsewhere (see docs/tap.md)", func(s string) error {
		spec, err := parseTapSpec(s)
		tf.specs = append(tf.specs, spec)
		return err
	})
	annotate(fs, "tap", annRepeatable)
	fs.Var(sizeFlag{&tf.queue}, "tap-queue", "bytes of packets queued per tap client; a client further behind is dropped (counted), never waited for")
	return tf
}

func parseTapSpec(s string) (tapSpec, error) {
	addr, sel, _ := strings.Cut(s, "=")
	spec := tapSpec{addr: addr}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return spec, fmt.Errorf("%q: want HOST:PORT[=AGENT[:IFACE]]: %w", s, err)
	}
	if sel == "" {
		return spec, nil
	}
	spec.def.Agent, spec.def.Iface, _ = strings.Cut(sel, ":")
	if spec.def.Agent == tap.AllAgents {
		spec.def.Agent = ""
	} else if err := wire.ValidateName(spec.def.Agent); err != nil {
		return spec, fmt.Errorf("%q: agent: %w", s, err)
	}
	return spec, nil
}

// taps are the collector's tap listeners.
type taps struct {
	tap  *tap.Tap
	lns  []net.Listener
	lcs  []tap.ListenConfig
	done chan error
	stop context.CancelFunc
}

// listen opens the tap listeners (nil without --tap). A listener speaks
// TLS if the collector does, and admits plain TCP too (which Wireshark's
// TCP@ needs) on a loopback address. The caller closes them.
func (tf *tapFlags) listen(cfg *collector.Config, log *slog.Logger) (*taps, error) {
	if len(tf.specs) == 0 {
		if tf.queue != tap.DefaultQueueSize {
			return nil, fmt.Errorf("%w: --tap-queue needs --tap", errUsage)
		}
		return nil, nil
	}
	if tf.queue < 64<<10 || tf.queue > 1<<30 {
		return nil, fmt.Errorf("%w: --tap-queue %d out of range 64K..1G", errUsage, tf.queue)
	}
	ts := &taps{tap: tap.New(tap.Config{Token: cfg.Token, QueueSize: int(tf.queue), Logger: log})}
	for _, spec := range tf.specs {
		ln, err := net.Listen("tcp", spec.addr)
		if err != nil {
			ts.close()
			return nil, fmt.Errorf("--tap: %w", err)
		}
		ts.lns = append(ts.lns, ln)
		lc := tap.ListenConfig{Default: spec.def, TLS: cfg.TLS}
		loopback := ln.Addr().(*net.TCPAddr).IP.IsLoopback()
		switch {
		case cfg.TLS == nil:
			log.Warn("INSECURE: tap in plain TCP: anyone who reaches it sees the packets", "tap", ln.Addr().String())
		case loopback:
			lc.Plain = true
			if cfg.TLS.ClientAuth != 0 && cfg.Token == "" {
				log.Warn("tap on loopback: plain TCP clients on this host need no client certificate; add --token-file to require one there", "tap", ln.Addr().String())
			}
		}
		if cfg.Token != "" && spec.def != (tap.Selection{}) {
			log.Warn("tap: with --token-file every client must send the token in a request line, so the default selection serves no one (Wireshark's TCP@ sends nothing: use pcapsync tail --token-file ... | wireshark -k -i -)", "tap", ln.Addr().String())
		}
		ts.lcs = append(ts.lcs, lc)
	}
	return ts, nil
}

// addrs returns the listeners' addresses, for the start-up log.
func (ts *taps) addrs() string {
	var a []string
	for _, ln := range ts.lns {
		a = append(a, ln.Addr().String())
	}
	return strings.Join(a, ",")
}

// serve starts serving on every listener until stop.
func (ts *taps) serve() {
	ctx, cancel := context.WithCancel(context.Background())
	ts.stop, ts.done = cancel, make(chan error, len(ts.lns))
	for i, ln := range ts.lns {
		go func() { ts.done <- ts.tap.Serve(ctx, ln, ts.lcs[i]) }()
	}
}

// finish stops the taps once the collector wrote its last batch (the
// clients get what is queued for them first).
func (ts *taps) finish() error {
	var err error
	if ts.stop != nil {
		ts.stop()
		for range ts.lns {
			if e := <-ts.done; e != nil && err == nil {
				err = e
			}
		}
	}
	return err
}

// close closes listeners never served (after an error at start).
func (ts *taps) close() {
	if ts != nil && ts.stop == nil {
		for _, ln := range ts.lns {
			ln.Close()
		}
	}
}
