package redisfeed

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// CopyConfig configures Copy. URL and Agent are required; the zero
// value of every other field means its default.
type CopyConfig struct {
	// URL is the Redis server, as in Config.URL.
	URL string
	// Timeout bounds connecting and each command but the blocking XREAD.
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// Prefix is the collector's Config.Prefix; "" means DefaultPrefix.
	Prefix string
	// Agent is the agent whose stream is read.
	Agent string
	// Iface, if set, keeps only the packets of this interface.
	Iface string
	// Filter, if set, keeps only the packets that pass this tcpdump
	// expression, run here (filter.Filter).
	Filter string
	// From, if positive, starts with the entries added this long ago
	// (FollowConfig.From); 0 copies from now on.
	From time.Duration
	// Count, if positive, ends Copy once it wrote this many packets.
	Count int
	// Idle, if positive, ends Copy after this long without an entry.
	Idle time.Duration
	// Logger receives skipped entries and lost connections. nil:
	// slog.Default.
	Logger *slog.Logger
}

// Validate reports a CopyConfig Copy would refuse, the filter's syntax
// included.
func (c *CopyConfig) Validate() error {
	switch {
	case c.URL == "":
		return fielderr.Errorf("redis copy: no URL ({redisfeed.CopyConfig.URL})")
	case c.Agent == "":
		return fielderr.Errorf("redis copy: no agent ({redisfeed.CopyConfig.Agent})")
	case c.Timeout < 0 || c.From < 0 || c.Idle < 0 || c.Count < 0:
		return fielderr.Errorf("redis copy: negative timeout, start ({redisfeed.CopyConfig.From}), count ({redisfeed.CopyConfig.Count}) or idle time ({redisfeed.CopyConfig.Idle})")
	}
	if err := wire.ValidateName(c.Agent); err != nil {
		return fmt.Errorf("redis copy: agent: %w", err)
	}
	if _, err := redis.ParseURL(c.URL); err != nil {
		return fielderr.Errorf("redis copy: {redisfeed.CopyConfig.URL}: %w", err)
	}
	if _, err := filter.New(c.Filter); err != nil {
		return fielderr.Errorf("redis copy: {redisfeed.CopyConfig.Filter}: %w", err)
	}
	return nil
}

// Copy follows the agent's stream (Follow) and writes its packets to w
// as one pcapng section: the section header at once (so that a reader
// such as Wireshark starts before the first packet), an interface block
// per interface ("<agent>:<name>", as in the collector's files) before
// its first packet, and w is written after every entry (through a
// buffer). It returns nil once Count packets are written, Idle passed
// or ctx ended; otherwise the error that stopped it: Redis not there at
// the start, w failing, or a Filter that does not apply to a link type
// in the stream.
func Copy(ctx context.Context, cfg CopyConfig, w io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg.Prefix = cmp.Or(cfg.Prefix, DefaultPrefix)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opt, err := Options(cfg.URL, cmp.Or(cfg.Timeout, DefaultTimeout))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	key := Key(cfg.Prefix, cfg.Agent)
	pw, err := newPcapngWriter(w, &cfg, "from Redis stream "+key)
	if err != nil {
		return err
	}
	err = Follow(ctx, rdb, FollowConfig{Key: key, From: cfg.From, Idle: cfg.Idle, Logger: cfg.Logger}, pw.entry)
	if ferr := pw.bw.Flush(); err == nil || errors.Is(err, errCountReached) || errors.Is(err, context.Canceled) {
		err = ferr
	}
	return err
}

// errCountReached ends a Follow once CopyConfig.Count packets are out.
var errCountReached = errors.New("count reached")

// pcapngWriter writes the packets of stream entries as pcapng.
type pcapngWriter struct {
	cfg     *CopyConfig
	bw      *bufio.Writer
	w       *pcapfile.NgWriter
	filter  *filter.Filter
	written int
	ifaces  map[hostIface]int // interface -> pcapng interface index, -1: not wanted
	local   []int             // an entry's interface -> pcapng index; reused
}

// hostIface is an interface as the files name it: of an agent on a host.
type hostIface struct {
	wire.Interface
	host string
}

// newPcapngWriter writes the section header to w, with source in its
// comment, and flushes it.
func newPcapngWriter(w io.Writer, cfg *CopyConfig, source string) (*pcapngWriter, error) {
	f, err := filter.New(cfg.Filter)
	if err != nil {
		return nil, err
	}
	pw := &pcapngWriter{cfg: cfg, bw: bufio.NewWriterSize(w, 1<<20), filter: f, ifaces: map[hostIface]int{}}
	pw.w, err = pcapfile.NewNgWriter(pw.bw, pcapfile.SectionInfo{
		UserAppl: "pcapsync tail",
		Comment:  fmt.Sprintf("pcapsync agent %s, %s", cfg.Agent, source),
	})
	if err != nil {
		return nil, err
	}
	return pw, pw.bw.Flush()
}

func (pw *pcapngWriter) entry(e *Entry) error {
	pw.local = pw.local[:0]
	for _, ifc := range e.Ifaces {
		idx, err := pw.iface(hostIface{ifc, e.Host})
		if err != nil {
			return err
		}
		pw.local = append(pw.local, idx)
	}
	it := e.Batch.Iter(uint32(len(e.Ifaces)))
	var r wire.Record
	for it.Next(&r) == nil {
		i := pw.local[r.IfIndex]
		if i < 0 {
			continue
		}
		ok, err := pw.filter.Match(e.Ifaces[r.IfIndex].LinkType, r.Data, r.OrigLen)
		if err != nil {
			return fielderr.Errorf("{redisfeed.CopyConfig.Filter} %q does not apply to interface %s: %w", pw.cfg.Filter, e.Ifaces[r.IfIndex].Name, err)
		}
		if !ok {
			continue
		}
		if err := pw.w.WritePacket(i, r.Timestamp, r.OrigLen, r.Data); err != nil {
			return err
		}
		pw.written++
		if pw.cfg.Count > 0 && pw.written >= pw.cfg.Count {
			return errCountReached
		}
	}
	return pw.bw.Flush()
}

// iface returns the pcapng index of ifc, writing its interface block
// the first time, or -1 when CopyConfig.Iface excludes it.
func (pw *pcapngWriter) iface(ifc hostIface) (int, error) {
	if i, ok := pw.ifaces[ifc]; ok {
		return i, nil
	}
	if pw.cfg.Iface != "" && ifc.Name != pw.cfg.Iface {
		pw.ifaces[ifc] = -1
		return -1, nil
	}
	agent := pw.cfg.Agent
	idx, err := pw.w.AddInterface(pcapfile.Interface{
		Name:        agent + ":" + ifc.Name,
		Description: fmt.Sprintf("%s on host %s (pcapsync agent %s)", ifc.Name, ifc.host, agent),
		LinkType:    ifc.LinkType,
		SnapLen:     ifc.SnapLen,
	})
	if err != nil {
		return 0, err
	}
	pw.ifaces[ifc] = idx
	return idx, nil
}
