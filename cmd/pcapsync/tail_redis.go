package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/redis/go-redis/v9"
	"golang.org/x/net/bpf"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// errTailDone ends a tail that wrote --count packets.
var errTailDone = errors.New("tail: count reached")

// tailRedis follows the agent's Redis stream for o and writes pcapng to
// stdout.
func tailRedis(ctx context.Context, o tailOptions, stdout, stderr io.Writer) error {
	log, err := newLogger(stderr, "warn")
	if err != nil {
		return err
	}
	opt, err := redisfeed.Options(o.RedisURL, redisfeed.DefaultTimeout)
	if err != nil {
		return fmt.Errorf("%w: --redis: %w", errUsage, err)
	}
	redis.SetLogger(redisLogger{log})
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	bw := bufio.NewWriterSize(stdout, 1<<20)
	tw := &tailWriter{o: o, bw: bw}
	// The section header goes out at once, so that a reader such as
	// Wireshark starts before the first packet.
	if tw.w, err = pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{
		UserAppl: "pcapsync tail",
		Comment:  fmt.Sprintf("pcapsync agent %s, from Redis stream %s", o.Agent, redisfeed.Key(o.RedisPrefix, o.Agent)),
	}); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	err = redisfeed.Follow(ctx, rdb, redisfeed.FollowConfig{
		Key:    redisfeed.Key(o.RedisPrefix, o.Agent),
		From:   o.From,
		Idle:   o.UntilIdle,
		Logger: log,
	}, tw.entry)
	if ferr := bw.Flush(); err == nil || errors.Is(err, errTailDone) || errors.Is(err, context.Canceled) {
		err = ferr
	}
	return err
}

// tailWriter writes the packets of stream entries as pcapng.
type tailWriter struct {
	o       tailOptions
	bw      *bufio.Writer
	w       *pcapfile.NgWriter
	written int
	idbs    map[tailIface]int // interface -> index in states, -1: not wanted
	states  []tailIfaceState
}

// tailIface is an interface as the file names it, "<agent>:<name>".
type tailIface struct {
	wire.Interface
	host string
}

// tailIfaceState is what a pcapng interface needs per packet.
type tailIfaceState struct {
	index int
	vm    *bpf.VM // nil: no --filter
}

func (tw *tailWriter) entry(e *redisfeed.Entry) error {
	// Map the entry's interfaces to pcapng interfaces, adding any new one.
	var local [16]int
	m := local[:0]
	for _, ifc := range e.Ifaces {
		idx, err := tw.iface(tailIface{ifc, e.Host})
		if err != nil {
			return err
		}
		m = append(m, idx)
	}
	it := e.Batch.Iter(uint32(len(e.Ifaces)))
	var r wire.Record
	for it.Next(&r) == nil {
		i := m[r.IfIndex]
		if i < 0 {
			continue
		}
		st := &tw.states[i]
		if st.vm != nil {
			if n, err := st.vm.Run(r.Data); err != nil || n == 0 {
				continue
			}
		}
		if err := tw.w.WritePacket(st.index, r.Timestamp, r.OrigLen, r.Data); err != nil {
			return err
		}
		tw.written++
		if tw.o.Count > 0 && tw.written >= tw.o.Count {
			return errTailDone
		}
	}
	return tw.bw.Flush()
}

// iface returns the state index of ifc, writing its interface block the
// first time, or -1 when --iface excludes it.
func (tw *tailWriter) iface(ifc tailIface) (int, error) {
	if i, ok := tw.idbs[ifc]; ok {
		return i, nil
	}
	if tw.idbs == nil {
		tw.idbs = map[tailIface]int{}
	}
	if tw.o.Iface != "" && ifc.Name != tw.o.Iface {
		tw.idbs[ifc] = -1
		return -1, nil
	}
	st := tailIfaceState{}
	if tw.o.Filter != "" {
		raw, err := capture.CompileFilter(ifc.LinkType, int(ifc.SnapLen), tw.o.Filter)
		if err != nil {
			return 0, fmt.Errorf("%w: --filter: %w", errUsage, err)
		}
		insts, ok := bpf.Disassemble(raw)
		if !ok {
			return 0, fmt.Errorf("--filter %q: the compiled program uses BPF extensions the user-space VM lacks", tw.o.Filter)
		}
		if st.vm, err = bpf.NewVM(insts); err != nil {
			return 0, fmt.Errorf("--filter %q: %w", tw.o.Filter, err)
		}
	}
	idx, err := tw.w.AddInterface(pcapfile.Interface{
		Name:        tw.o.Agent + ":" + ifc.Name,
		Description: fmt.Sprintf("%s on host %s (pcapsync agent %s)", ifc.Name, ifc.host, tw.o.Agent),
		LinkType:    ifc.LinkType,
		SnapLen:     ifc.SnapLen,
	})
	if err != nil {
		return 0, err
	}
	st.index = idx
	tw.states = append(tw.states, st)
	tw.idbs[ifc] = len(tw.states) - 1
	return len(tw.states) - 1, nil
}
