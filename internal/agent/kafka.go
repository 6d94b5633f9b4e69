package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// The Kafka transport (Config.Kafka): no collector. Every sealed batch
// is produced to the topic as the record an ingest collector would
// produce for it (kafkarec.NewRecord): key the agent name, value the
// Batch frame exactly as it would go on the wire, header the Hello
// frame (wire.AppendRecordHello) listing every interface declared so
// far. Stats frames go as records too. The writers (pcapsync writer)
// cannot tell the two paths apart.
//
// The producer is kafkarec.Producer: idempotent, acknowledged once all
// in-sync replicas have a record. Its acknowledgements come in the
// order of sending (one key, one partition) and release the queue and
// the spool in order, as a collector's acks do. A broker that cannot be
// reached holds the records in the producer, which retries them; the
// sender keeps at most kafkaWindow bytes of records there, so batches
// beyond stay in the queue and, with a spool, spill to it as they do
// while a collector is down. A record the brokers refuse (an error in
// its answer) stops the acknowledgements: the sender waits for every
// record in flight to be answered, waits out the backoff and produces
// again from the first unacknowledged batch. A batch that Kafka stored
// but whose answer was lost is then in the topic twice, with the same
// instance and sequence number: the writers drop the second copy by the
// marks in their files, as they drop a batch an agent resent to
// another collector.
//
// Batches are sized to fit the topic: New reads the topic's record
// limit (kafkaconn.MaxRecordBytes) and caps the batch size so that no
// batch, with its hello, exceeds it; a topic too small for a minimal
// batch, or for one packet of the snaplen, refuses the agent.

// kafkaStartTimeout bounds New's wait for the brokers: creating the
// topic, reading its record limit.
const kafkaStartTimeout = 60 * time.Second

// kafkaCloseTimeout bounds the wait for the last answers once the
// sender stops (after Run's own wait for them).
const kafkaCloseTimeout = time.Second

// helloIfaceReserve is how many interfaces of the longest name a hello
// is sized for when New does not know them yet (a replay declares them
// as the file does). A replay declaring more (with long names) can
// make a record too large: the agent then stops with an error saying so.
const helloIfaceReserve = 16

// maxIfaceEntry is the most bytes one interface takes in a Hello: a
// name of 255 bytes after its length byte, link type, snaplen.
const maxIfaceEntry = 1 + 255 + 2 + 4

// produceFunc is kafkarec.Producer.Send.
type produceFunc func(agent string, hello, info, frame []byte, done func(error))

// kafkaSender is the Kafka transport. The fields under mu are shared
// with the producer's callbacks; the others belong to the sender
// goroutine (run) once New returned.
type kafkaSender struct {
	a          *Agent
	kc         kafkaconn.Config    // with defaults
	opts       []kgo.Opt           // kc.Opts, read once by New
	key        *kafkarec.RecordKey // signs the records; nil: none
	maxRecord  int                 // the topic's record limit
	batchBytes int                 // Config.BatchBytes, capped to fit maxRecord
	window     int64               // record bytes in the producer at most
	brokers    []netip.AddrPort    // seeds and the brokers listed at start: ownTraffic

	// wrap, if set, wraps the producer's Send (tests: an answer lost).
	wrap func(produceFunc) produceFunc

	mu       sync.Mutex
	inflight int   // records sent, not answered
	bytes    int64 // their sizes (recordSize)
	failed   error // the first failed answer since the last resend round

	answered chan struct{} // cap 1: a record was answered
}

// newKafkaSender connects to the brokers once: it creates the topic
// when absent, reads its record limit and sizes the batches to fit it,
// and lists the brokers (for ownTraffic). The producer itself is made
// by run.
func newKafkaSender(a *Agent) (*kafkaSender, error) {
	kc := a.cfg.Kafka.WithDefaults()
	k := &kafkaSender{a: a, kc: kc, answered: make(chan struct{}, 1),
		window: min(a.cfg.QueueBytes, kafkarec.DefaultMaxBuffered)}
	opts, err := kc.Opts()
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	k.opts = opts
	if key, err := kc.RecordKey(); err != nil || key != nil {
		if err == nil {
			k.key, err = kafkarec.ParseRecordKey(key)
			clear(key)
		}
		if own := k.key.Agent(); err == nil && own != "" && own != a.cfg.Name {
			err = fmt.Errorf("%s holds agent %q's record key, and this agent is %q: %w", kc.RecordKeyFile, own, a.cfg.Name, kafkarec.ErrBadKeyFile)
		}
		if err != nil {
			return nil, fmt.Errorf("agent: kafka: %w", err)
		}
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("agent: kafka: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaStartTimeout)
	defer cancel()
	created, err := kafkaconn.EnsureTopic(ctx, cl, kc)
	if err != nil {
		return nil, fmt.Errorf("agent: kafka topic %q: %w", kc.Topic, err)
	}
	if created {
		a.log.Info("kafka topic created", "topic", kc.Topic, "partitions", kc.Partitions, "replication", kc.Replication)
	}
	if k.maxRecord, err = kafkaconn.MaxRecordBytes(ctx, cl, kc.Topic); err != nil {
		return nil, fmt.Errorf("agent: kafka topic %q: reading its record size limit: %w", kc.Topic, err)
	}
	if err := k.sizeBatches(); err != nil {
		return nil, err
	}
	listed, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return nil, fmt.Errorf("agent: kafka: listing the brokers: %w", err)
	}
	hosts := append([]string(nil), kc.Brokers...)
	for _, b := range listed {
		hosts = append(hosts, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	k.brokers = resolveAll(hosts)
	if len(k.brokers) == 0 {
		return nil, fmt.Errorf("agent: kafka: no broker address resolves (%v)", hosts)
	}
	return k, nil
}

// resolveAll resolves host:port addresses to every address of each
// host, each once; what does not resolve is left out.
func resolveAll(hosts []string) []netip.AddrPort {
	var out []netip.AddrPort
	seen := map[netip.AddrPort]bool{}
	for _, hp := range hosts {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			continue
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			continue
		}
		ips, err := net.LookupIP(host)
		if err != nil {
			continue
		}
		for _, ip := range ips {
			addr, ok := netip.AddrFromSlice(ip)
			if !ok {
				continue
			}
			ap := netip.AddrPortFrom(addr.Unmap(), uint16(p))
			if !seen[ap] {
				seen[ap] = true
				out = append(out, ap)
			}
		}
	}
	return out
}

// maxFrame returns the largest frame that fits a record with a hello
// of helloLen bytes.
func (k *kafkaSender) maxFrame(helloLen int) int {
	return int(kafkarec.MaxFrame(k.maxRecord, k.a.cfg.Name, make([]byte, helloLen)))
}

// helloBound is the most bytes the hello of this agent's records can
// take: every live interface, or helloIfaceReserve for a replay, each
// with the longest name.
func (k *kafkaSender) helloBound() int {
	h := k.a.hello()
	h.Token = ""
	n := max(len(k.a.cfg.Interfaces), helloIfaceReserve)
	return len(wire.AppendRecordHello(nil, &h, nil)) + n*maxIfaceEntry
}

// frameBound is the largest frame a batch whose records take n bytes
// becomes, compressed (worst case) or not.
func (k *kafkaSender) frameBound(n int) int {
	if k.a.cfg.Compress.Codec != compress.None {
		n = compress.MaxEncodedLen(n)
	}
	return wire.HeaderSize + wire.BatchHeaderSize + n
}

// sizeBatches caps the batch size so that every batch fits a record of
// the topic, or reports why none can.
func (k *kafkaSender) sizeBatches() error {
	c := &k.a.cfg
	limit := k.maxFrame(k.helloBound())
	fix := "raise the topic's max.message.bytes (or use a topic pcapsync creates)"
	if k.frameBound(MinBatchBytes) > limit {
		return fmt.Errorf("agent: kafka topic %q takes records of at most %d bytes (max.message.bytes): too small for a batch of %d bytes with this agent's name and hello: %s",
			k.kc.Topic, k.maxRecord, MinBatchBytes, fix)
	}
	if single := c.SnapLen + wire.RecordMaxOverhead; k.frameBound(single) > limit {
		return fielderr.Errorf("agent: kafka topic %q takes records of at most %d bytes (max.message.bytes): one packet of the snaplen %d would not fit one: lower {agent.SnapLen} or %s",
			k.kc.Topic, k.maxRecord, c.SnapLen, fix)
	}
	b := c.BatchBytes
	if k.frameBound(b) > limit {
		lo, hi := MinBatchBytes, b // frameBound(lo) fits, frameBound(hi) does not
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; k.frameBound(mid) <= limit {
				lo = mid
			} else {
				hi = mid
			}
		}
		k.a.log.Info("kafka: batch size lowered to fit the topic's records", "topic", k.kc.Topic,
			"max_message_bytes", k.maxRecord, "batch_size", lo, "asked", b)
		b = lo
	}
	k.batchBytes = b
	return nil
}

func (k *kafkaSender) batchLimits() (batchBytes, bufCap int) {
	c := &k.a.cfg
	return k.batchBytes, wire.HeaderSize + wire.BatchHeaderSize + k.batchBytes + c.SnapLen + wire.RecordMaxOverhead
}

func (k *kafkaSender) prepareQueue(q *queue) { k.a.observeAckLatency(q) }

// ownTraffic excludes the connections to the bootstrap brokers and to
// every broker the cluster listed at start (one added later is not
// excluded).
func (k *kafkaSender) ownTraffic() string {
	return excludeAddrs(k.brokers, func(ap netip.AddrPort) string {
		return fmt.Sprintf("tcp and host %s and port %d", ap.Addr(), ap.Port())
	})
}

func (k *kafkaSender) replayRate() float64 { return 0 }

func (k *kafkaSender) report(*Stats) {}

func (k *kafkaSender) warnInsecure(log *slog.Logger) {
	if !k.kc.TLSEnabled() {
		log.Warn("INSECURE: plain TCP to the Kafka brokers, no TLS: captured packets cross the network in clear text and the brokers are not authenticated (SCRAM, if set, does not change that)")
	}
}

// recordSize is what a record counts against the window: its key,
// value, hello header and info header.
func recordSize(name string, hello, info, frame []byte) int64 {
	n := len(name) + len(hello) + len(frame) + len(kafkarec.HelloHeader)
	if info != nil {
		n += len(info) + len(kafkarec.InfoHeader)
	}
	return int64(n)
}

// begin counts a record sent; its answer calls answer.
func (k *kafkaSender) begin(size int64) {
	k.mu.Lock()
	k.inflight++
	k.bytes += size
	k.mu.Unlock()
}

// room reports whether a record of size bytes may be sent now: one at
// least is always in flight, more while they fit the window.
func (k *kafkaSender) room(size int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.inflight == 0 || k.bytes+size <= k.window
}

// answer is the producer's callback for the record of batch seq (0: a
// Stats record). Answers come in the order of sending; after a failure
// none acknowledges anything until the sender's next round.
func (k *kafkaSender) answer(seq uint64, size int64, err error) {
	k.mu.Lock()
	k.inflight--
	k.bytes -= size
	if err != nil && k.failed == nil {
		k.failed = err
	}
	ok := k.failed == nil
	k.mu.Unlock()
	if ok && seq > 0 {
		k.a.q.ack(seq)
	}
	k.a.connected.Store(err == nil)
	signal(k.answered)
}

// failure returns the first failed answer since the last round.
func (k *kafkaSender) failure() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.failed
}

// drain waits until every record sent is answered, then clears the
// failure; false if ctx ended first.
func (k *kafkaSender) drain(ctx context.Context) bool {
	for {
		k.mu.Lock()
		n := k.inflight
		if n == 0 {
			k.failed = nil
		}
		k.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-k.answered:
		}
	}
}

// run produces the queue's batches in sequence order, and the agent's
// stats every StatsInterval and at the end, until ctx ends; then it
// closes the producer (waiting up to kafkaCloseTimeout for answers)
// and returns nil. It returns an error only when the producer cannot be
// made or a record would exceed the topic's limit (a replay that
// declared more interfaces than the batches were sized for).
func (k *kafkaSender) run(ctx context.Context) error {
	a := k.a
	p, err := kafkarec.NewProducer(kafkarec.ProducerConfig{Opts: k.opts, Topic: k.kc.Topic, MaxRecord: k.maxRecord, Key: k.key,
		MaxBuffered: k.window + 2*int64(k.maxRecord), Logger: a.log})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer p.Close(kafkaCloseTimeout)
	send := produceFunc(p.Send)
	if k.wrap != nil {
		send = k.wrap(send)
	}
	a.log.Info("producing to kafka", "brokers", k.kc.Brokers, "topic", k.kc.Topic, "max_message_bytes", k.maxRecord,
		"batch_size", k.batchBytes, "resume_after_seq", a.q.stats().acked)

	tick := time.NewTicker(a.cfg.StatsInterval)
	defer tick.Stop()
	var st wire.Stats
	var hello, ctl, spoolBuf []byte
	var info []byte // the InfoHeader: this agent's version, shared by every record (never changed)
	if a.cfg.Version != "" {
		info = wire.AppendInfo(nil, &wire.Info{Version: a.cfg.Version})
	}
	declared := -1
	sendStats := func() {
		a.collectStats(&st)
		ctl = wire.AppendStats(ctl[:0], &st)
		size := recordSize(a.cfg.Name, hello, info, ctl)
		k.begin(size)
		send(a.cfg.Name, bytes.Clone(hello), info, bytes.Clone(ctl), func(err error) { k.answer(0, size, err) })
	}
	backoff := a.cfg.BackoffMin
	var failedAt uint64 // what was acknowledged at the last failure
	cursor := a.q.stats().acked
	for {
		if err := k.failure(); err != nil {
			if !k.drain(ctx) {
				return nil
			}
			acked := a.q.stats().acked
			if acked > failedAt {
				backoff = a.cfg.BackoffMin
			}
			failedAt = acked
			delay := time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))
			a.log.Warn("kafka: a record was not produced; producing again from the first unacknowledged batch",
				"err", err, "resume_after_seq", acked, "retry_in", delay.Round(time.Millisecond))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(delay):
			}
			backoff = min(2*backoff, a.cfg.BackoffMax)
			a.reconnects.Add(1)
			cursor = a.q.stats().acked
			continue
		}
		if declared < 0 || len(a.interfaces()) > declared {
			h := a.hello()
			hello = wire.AppendRecordHello(hello[:0], &h, h.Interfaces)
			declared = len(h.Interfaces)
		}
		if b := a.q.at(cursor + 1); b != nil && k.room(recordSize(a.cfg.Name, hello, info, nil)+int64(b.frame)) {
			frame := b.buf
			if frame == nil { // kept on disk only
				if frame, err = a.q.spool.read(b, spoolBuf); err != nil {
					return err
				}
				spoolBuf = frame
			}
			if m := k.maxFrame(len(hello)); len(frame) > m {
				return fmt.Errorf("agent: batch seq %d: a frame of %d bytes with a hello of %d interfaces (%d bytes) exceeds the records of kafka topic %q (max.message.bytes %d): %w",
					b.seq, len(frame), declared, len(hello), k.kc.Topic, k.maxRecord, wire.ErrTooLarge)
			}
			seq := b.seq
			if seq > a.firstSent.Load() {
				a.firstSent.Store(seq)
				a.sent.Add(b.packets)
				a.batchesSent.Add(1)
				a.q.markSent(seq)
			} else {
				a.batchesResent.Add(1)
			}
			size := recordSize(a.cfg.Name, hello, info, frame)
			k.begin(size)
			// The record keeps its slices until answered, and hello and
			// frame (a queued batch's bytes, or spoolBuf) are reused
			// before then: it gets copies, the frame's in a pooled
			// buffer given back with the answer. beginWrite keeps an
			// acknowledgement from pooling b while the copy is made.
			a.q.beginWrite(b)
			bp := wire.Buffer(len(frame))
			copy(*bp, frame)
			a.q.endWrite()
			send(a.cfg.Name, bytes.Clone(hello), info, *bp, func(err error) {
				k.answer(seq, size, err)
				wire.PutBuffer(bp)
			})
			cursor = seq
			continue
		}
		select {
		case <-a.q.pushed:
		case <-k.answered:
		case <-tick.C:
			sendStats()
		case <-ctx.Done():
			sendStats() // final counters; Close waits for their answer
			return nil
		}
	}
}
