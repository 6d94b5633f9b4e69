package kafkaio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/observe"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Opts connect to the brokers (kafkaconn.Config.Opts).
	Opts []kgo.Opt
	// Topic is consumed as a member of Group.
	Topic, Group string
	// Core writes the records' batches: a store-backed collector core,
	// its store shared with the group's other writers (store.Config.Shared).
	Core *collector.Core
	// Release, if set, gives an agent up once the writer ended its
	// session (its partition was revoked or lost): store.Store.Release,
	// so that the writer taking the partition over may write its files.
	Release func(agent string) error
	// MaxFrame is the largest frame payload accepted in a record. 0
	// means wire.DefaultMaxFrame.
	MaxFrame uint32
	// SessionTimeout is the group session timeout: a writer silent for
	// this long is taken for dead and its partitions move. 0 means
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// BusyWait bounds how long the writer waits for an agent another
	// writer still holds (a rebalance in progress) before it starts
	// over from the committed offsets. 0 means DefaultBusyWait.
	BusyWait time.Duration
	// Key, if set, is the record key the topic's producers sign with:
	// a record without a valid MAC is counted (Unauthenticated) and
	// skipped. Without it every record is taken as authentic (the
	// brokers' ACLs decide who may produce).
	Key *kafkarec.RecordKey
	// MaxAgents bounds the agents the writer holds at once (each holds
	// a lock file open, and its file while it writes): taking one more
	// first gives up the one that wrote least recently. 0 means
	// DefaultMaxAgents of the process's RLIMIT_NOFILE.
	MaxAgents int
	// IdleRelease gives up an agent (its file closed and published, its
	// lock released) that had no record for this long; its next record
	// takes it again, in a new file. 0 means DefaultIdleRelease.
	IdleRelease time.Duration
	// Delay, if set, observes for each record the seconds from its
	// timestamp (when it was produced) to the commit of its offset.
	Delay  observe.Observer
	Logger *slog.Logger
}

// DefaultMaxAgents returns WriterConfig.MaxAgents' default for a
// process that may hold nofile descriptors: what the store's open-file
// budget (store.DefaultMaxOpenFiles) leaves of the descriptors beyond
// its reserve, the same number, so that every held agent's lock and
// file fit together.
func DefaultMaxAgents(nofile uint64) int {
	return store.DefaultMaxOpenFiles(nofile)
}

// Defaults of WriterConfig.
const (
	// DefaultSessionTimeout, with a heartbeat every second, lets the
	// group move a dead writer's partitions, and another writer write
	// them, within 10 s, the collector's dead-peer bound: the group
	// notices the death after the timeout, the survivors at their next
	// heartbeat, then rejoin and fetch. It is the least the broker
	// takes by default (group.min.session.timeout.ms).
	DefaultSessionTimeout = 6 * time.Second
	DefaultBusyWait       = 60 * time.Second
	// DefaultIdleRelease is the store's default idle close (a writer
	// passes its --idle-close): an agent silent this long would have
	// its file closed by a collector too.
	DefaultIdleRelease = time.Minute
)

// Timings of the consumer loop.
const (
	// pollWait bounds one poll, so that idle agents are given up while
	// no record comes.
	pollWait = time.Second
	// fetchBackoffMax bounds the pause after a poll that brought only
	// errors (a broker down, a topic deleted).
	fetchBackoffMax = 2 * time.Second
	// topicGoneAfter is how long fetches may fail because the topic is
	// unknown (deleted, or deleted and created again under a new ID,
	// which a client never adopts) before the writer starts over with
	// a new client, which learns the topic anew.
	topicGoneAfter = 5 * time.Second
	// metadataMaxAge is how often the writer's client refreshes the
	// topic's metadata: partitions added, or the topic created again,
	// are consumed within it.
	metadataMaxAge = 5 * time.Second
	// healthyAfter: a membership that lasted this long resets the
	// pause before the next start over to its least.
	healthyAfter = time.Minute
	// restartPauseMax bounds the pause before a start over.
	restartPauseMax = 30 * time.Second
)

// WriterCounters are a Writer's totals. Safe for concurrent use.
type WriterCounters struct {
	Records    atomic.Uint64 // records consumed
	Bytes      atomic.Uint64 // their values' bytes
	BadRecords atomic.Uint64 // records skipped: malformed, unauthenticated, corrupt, or refused by the core
	// BadChecksums are the batch records skipped because their batch
	// checksum did not match (corrupted, or forged); also in BadRecords.
	BadChecksums atomic.Uint64
	// Unauthenticated are the records skipped for a missing or wrong MAC
	// (WriterConfig.Key); also in BadRecords.
	Unauthenticated atomic.Uint64
	// Released are the agents given up while their partition stayed
	// assigned: idle for IdleRelease, or to stay within MaxAgents.
	Released   atomic.Uint64
	Rebalances atomic.Uint64 // partition assignments received
	Commits    atomic.Uint64 // offset commits that succeeded
	Restarts   atomic.Uint64 // times the consumer started over from the committed offsets
}

// PartitionState is one assigned partition as the writer sees it.
type PartitionState struct {
	Partition int32
	Offset    int64 // the next offset to consume; -1: none consumed yet
	Committed int64 // the group's committed offset; -1: none known
	End       int64 // the partition's end offset (high watermark) as last seen; -1: not seen yet
	// Lag is the records between the committed offset (the start of
	// the partition if none) and End: consumed or not, not yet durable
	// in files. -1 until End and a starting point are known.
	Lag int64

	start int64 // the partition's start offset, while nothing is committed; -1: not known
}

// LagInterval is how often a writer lists its partitions' end offsets
// for PartitionState.Lag (a fetch with records updates it too).
const LagInterval = 5 * time.Second

// Topic returns the topic the writer consumes.
func (w *Writer) Topic() string { return w.cfg.Topic }

// Group returns the writer's consumer group.
func (w *Writer) Group() string { return w.cfg.Group }

// Writer consumes records of a topic as a member of a consumer group
// and writes each agent's frames through the core, as a collector
// writes its agents' sessions. A partition's offset is committed only
// once the batches of the records before it were committed by the core
// (written and, as --fsync promises, durable); a writer that starts
// from a committed offset drops by the marks in the files what another
// writer already wrote after it.
//
// A record is written only once it passed every check: its MAC (with a
// Key), its shape (ParseRecord) and, for a batch, its checksum. A
// record that fails one is counted, logged (at most once a second) and
// skipped: its hello starts no session and its sequence number raises
// no mark, so a forged or corrupted record cannot make the agent's
// later batches look like duplicates.
type Writer struct {
	cfg WriterConfig
	log *slog.Logger
	lim wire.Limits

	Counters WriterCounters

	mu      sync.Mutex // guards agents, touched: the poll loop and the rebalance callbacks
	agents  map[string]*wagent
	touched map[*wagent]bool // agents written since their last commit
	bad     time.Time        // when a bad record was last logged
	capped  bool             // MaxAgents was reached (logged once)

	fetchErrs map[int32]string // the fetch error of each partition, as last logged; poll loop only

	pmu   sync.Mutex // guards parts, apart from mu so that Partitions never waits for a write
	parts map[int32]*PartitionState
	list  chan struct{} // asks watchEnds to list the offsets now (an assignment)
}

// wagent is an agent the writer has a session for.
type wagent struct {
	name      string
	sess      *collector.Session
	hello     wire.Hello
	helloRaw  []byte
	partition int32
	last      time.Time // when a record of it was last written
}

// NewWriter returns a Writer; Run consumes.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Topic == "" || cfg.Group == "" || cfg.Core == nil {
		return nil, errors.New("kafka writer: a topic, a group and a core are required")
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.BusyWait == 0 {
		cfg.BusyWait = DefaultBusyWait
	}
	if cfg.MaxAgents <= 0 {
		cfg.MaxAgents = DefaultMaxAgents(frontdoor.NoFileLimit())
	}
	if cfg.IdleRelease <= 0 {
		cfg.IdleRelease = DefaultIdleRelease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Writer{cfg: cfg, log: cfg.Logger, lim: wire.Limits{MaxFrame: cfg.MaxFrame},
		agents: map[string]*wagent{}, touched: map[*wagent]bool{}, fetchErrs: map[int32]string{},
		parts: map[int32]*PartitionState{}, list: make(chan struct{}, 1)}, nil
}

// Run consumes until ctx ends. After a storage error, when an agent
// stays held by another writer for BusyWait, or when the topic stays
// unknown (deleted, or created again), it ends every session, leaves
// the group and starts over from the committed offsets with a new
// client, after a pause that grows from 1 s to 30 s and is back to 1 s
// once a membership lasted a minute.
func (w *Writer) Run(ctx context.Context) error {
	var pause restartPause
	for {
		start := time.Now()
		err := w.consume(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := pause.next(time.Since(start))
		w.Counters.Restarts.Add(1)
		w.log.Error("kafka writer: starting over from the committed offsets", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// restartPause is the pause before a start over: 1 s, doubled at each
// start over up to restartPauseMax, and 1 s again after a membership
// that lasted healthyAfter. The zero value is ready.
type restartPause struct{ last time.Duration }

// next returns the pause after a membership that lasted lasted.
func (p *restartPause) next(lasted time.Duration) time.Duration {
	if p.last == 0 || lasted >= healthyAfter {
		p.last = time.Second
	} else {
		p.last = min(2*p.last, restartPauseMax)
	}
	return p.last
}

// consume is one membership of the group: until ctx ends (nil) or a
// write fails, or the topic stays unknown (the error).
func (w *Writer) consume(ctx context.Context) (err error) {
	opts := append(slices.Clip(w.cfg.Opts),
		kgo.ConsumerGroup(w.cfg.Group),
		kgo.ConsumeTopics(w.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), // committed here, once durable
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(w.cfg.SessionTimeout),
		kgo.HeartbeatInterval(time.Second),
		kgo.MetadataMaxAge(metadataMaxAge),
		kgo.OnPartitionsAssigned(w.assigned),
		kgo.OnPartitionsRevoked(w.revoked),
		kgo.OnPartitionsLost(w.lost),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka writer: %w", err)
	}
	defer func() {
		// Every poll committed what it wrote: give every agent up, leave
		// the group.
		w.endAll(func(*wagent) bool { return true })
		cl.AllowRebalance() // a poll may have blocked it: leaving the group waits for that
		cl.Close()
	}()
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	go w.watchEnds(lagCtx, cl)
	clear(w.fetchErrs)
	var recs []*kgo.Record
	var backoff time.Duration
	var gone time.Time // since when fetches found the topic unknown; zero: they do not
	for {
		pctx, cancel := context.WithTimeout(ctx, pollWait)
		fs := cl.PollRecords(pctx, 4096)
		cancel()
		if ctx.Err() != nil || fs.IsClientClosed() {
			return nil
		}
		failed, unknown := w.fetchErrors(fs)
		recs = recs[:0]
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			recs = append(recs, p.Records...)
			if len(p.Records) > 0 {
				w.fetchOK(p.Partition)
			}
			w.pmu.Lock()
			if ps := w.parts[p.Partition]; ps != nil && len(p.Records) > 0 {
				ps.Offset = p.Records[len(p.Records)-1].Offset + 1
				ps.End = max(ps.End, p.HighWatermark)
				ps.lag()
			}
			w.pmu.Unlock()
		})
		if err := w.write(ctx, recs); err != nil {
			return err
		}
		w.commit(cl, recs)
		if err := w.releaseIdle(); err != nil {
			return err
		}
		cl.AllowRebalance()
		switch {
		case !unknown:
			gone = time.Time{}
		case gone.IsZero():
			gone = time.Now()
		case time.Since(gone) >= topicGoneAfter:
			return fmt.Errorf("kafka writer: topic %q: %w for %s (deleted, or created again)", w.cfg.Topic, ErrTopicGone, topicGoneAfter)
		}
		if !failed || len(recs) > 0 {
			backoff = 0
			continue
		}
		// Only errors: a client retrying at once would spin.
		backoff = min(max(2*backoff, 50*time.Millisecond), fetchBackoffMax)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
	}
}

// fetchErrors logs the fetch errors of fs, each partition's once per
// change of error (fetchOK logs its recovery). It reports whether there
// were any, and whether one says the topic is unknown.
func (w *Writer) fetchErrors(fs kgo.Fetches) (failed, unknown bool) {
	fs.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return // the poll's own deadline
		}
		failed = true
		if errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition) {
			unknown = true
		}
		if msg := err.Error(); w.fetchErrs[p] != msg {
			w.fetchErrs[p] = msg
			w.log.Warn("kafka writer: fetch failing (logged again when it changes or recovers)", "topic", t, "partition", p, "err", err)
		}
	})
	return failed, unknown
}

// fetchOK notes that partition p delivered records, logging the end of
// its fetch errors.
func (w *Writer) fetchOK(p int32) {
	if _, ok := w.fetchErrs[p]; ok {
		delete(w.fetchErrs, p)
		w.log.Info("kafka writer: fetch recovered", "topic", w.cfg.Topic, "partition", p)
	}
}

// write writes recs and commits every session they touched. The
// records of one agent are written in their order, the agents one after
// the other (so that each is taken at most once, however many agents
// the poll holds past MaxAgents).
func (w *Writer) write(ctx context.Context, recs []*kgo.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	order := slices.Clone(recs)
	slices.SortStableFunc(order, func(a, b *kgo.Record) int { return bytes.Compare(a.Key, b.Key) })
	for _, rec := range order {
		w.Counters.Records.Add(1)
		w.Counters.Bytes.Add(uint64(len(rec.Value)))
		a, err := w.handle(ctx, rec)
		if err != nil {
			return err
		}
		if a != nil {
			w.touched[a] = true
		}
	}
	for a := range w.touched {
		if err := w.commitAgent(a); err != nil {
			return err
		}
	}
	return nil
}

// commitAgent commits a's session if it was written since its last
// commit. w.mu must be held.
func (w *Writer) commitAgent(a *wagent) error {
	if !w.touched[a] {
		return nil
	}
	delete(w.touched, a)
	if _, err := a.sess.Commit(); err != nil {
		return fmt.Errorf("agent %s: %w", a.name, err)
	}
	return nil
}

// handle writes one record; it returns the agent it wrote to (nil for
// a record skipped) and an error only when the writer must start over.
// w.mu must be held.
func (w *Writer) handle(ctx context.Context, rec *kgo.Record) (*wagent, error) {
	r, err := w.check(rec)
	if err != nil {
		w.skip(rec, err)
		return nil, nil
	}
	a := w.agents[r.Agent]
	if a == nil || !bytes.Equal(a.helloRaw, r.HelloRaw) {
		if a, err = w.session(ctx, a, &r, rec); a == nil || err != nil {
			return nil, err
		}
	}
	a.partition, a.last = rec.Partition, time.Now()
	if _, err := a.sess.Frame(r.Type, r.Flags, r.Payload); err != nil {
		if errors.Is(err, collector.ErrStorage) {
			return nil, err
		}
		w.skip(rec, err)
		return nil, nil
	}
	return a, nil
}

// check authenticates (with a Key) and parses rec, and verifies a
// batch's checksum, counting what fails.
func (w *Writer) check(rec *kgo.Record) (kafkarec.Record, error) {
	if err := w.cfg.Key.Verify(rec); err != nil {
		w.Counters.Unauthenticated.Add(1)
		return kafkarec.Record{}, fmt.Errorf("%w of %q: %w", kafkarec.ErrRecord, rec.Key, err)
	}
	r, err := kafkarec.ParseRecord(rec, w.lim)
	if err != nil || r.Type != wire.TypeBatch {
		return r, err
	}
	// The batch's own checksum, which the agent computed over these
	// bytes: Kafka's record-batch CRC covers them only from the
	// producer on. A batch sent without one (an agent inside TLS) has
	// only the MAC, if any, to vouch for it.
	if _, err := wire.ParseBatch(r.Flags, r.Payload, wire.BatchLimits{Unchecked: true}); err != nil {
		if errors.Is(err, wire.ErrChecksum) {
			w.Counters.BadChecksums.Add(1)
		}
		return r, fmt.Errorf("%w of %q: %w", kafkarec.ErrRecord, rec.Key, err)
	}
	return r, nil
}

// session returns the agent's session for r's hello: the current one
// with the interfaces r's hello adds declared, or a new one (the agent
// restarted, or was not seen yet). It returns nil for a record whose
// hello the core refuses; an agent it took for it is given up again.
// w.mu must be held.
func (w *Writer) session(ctx context.Context, a *wagent, r *kafkarec.Record, rec *kgo.Record) (*wagent, error) {
	if a != nil && a.hello.Instance == r.Hello.Instance && a.hello.Host == r.Hello.Host &&
		len(r.Hello.Interfaces) > len(a.hello.Interfaces) &&
		slices.Equal(r.Hello.Interfaces[:len(a.hello.Interfaces)], a.hello.Interfaces) {
		for i := len(a.hello.Interfaces); i < len(r.Hello.Interfaces); i++ {
			f := wire.AppendIface(nil, uint32(i), &r.Hello.Interfaces[i])
			if _, err := a.sess.Frame(wire.TypeIface, 0, f[wire.HeaderSize:]); err != nil {
				w.skip(rec, err)
				return nil, nil
			}
		}
		a.hello, a.helloRaw = r.Hello, r.HelloRaw
		return a, nil
	}
	if a != nil {
		// A new instance: its session continues the file.
		if err := w.retire(a, false); err != nil {
			return nil, err
		}
	} else if len(w.agents) >= w.cfg.MaxAgents {
		if err := w.evict(); err != nil {
			return nil, err
		}
	}
	// The record passed check: its batch's checksum (or, with a Key, the
	// MAC) was verified, and franz-go checked the record batch's CRC.
	peer := collector.Peer{Addr: fmt.Sprintf("%s/%d", rec.Topic, rec.Partition), Transport: "kafka", Verified: true}
	deadline := time.Now().Add(w.cfg.BusyWait)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		sess, _, err := w.cfg.Core.Begin(&r.Hello, peer, func() {})
		switch {
		case err == nil:
			a = &wagent{name: r.Agent, sess: sess, hello: r.Hello, helloRaw: r.HelloRaw}
			w.agents[r.Agent] = a
			return a, nil
		case errors.Is(err, collector.ErrRejected):
			// The store may have taken the agent before the core refused
			// the hello: give it up, or its lock stays held.
			w.release(r.Agent)
			w.skip(rec, err)
			return nil, nil
		case time.Now().After(deadline):
			return nil, fmt.Errorf("agent %s still busy after %s: %w", r.Agent, w.cfg.BusyWait, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// retire commits a's session if it was written, ends it and forgets
// the agent; with release it also gives the agent up (its file closed
// and published, its lock released). w.mu must be held.
func (w *Writer) retire(a *wagent, release bool) error {
	if err := w.commitAgent(a); err != nil {
		return err
	}
	a.sess.End(release)
	delete(w.agents, a.name)
	if release {
		w.release(a.name)
	}
	return nil
}

// evict gives up the agent written least recently, to take another
// within MaxAgents. w.mu must be held.
func (w *Writer) evict() error {
	var old *wagent
	for _, a := range w.agents {
		if old == nil || a.last.Before(old.last) {
			old = a
		}
	}
	if old == nil {
		return nil
	}
	w.Counters.Released.Add(1)
	if !w.capped {
		w.capped = true
		w.log.Warn("kafka writer: more agents than it may hold at once: giving up the least recently written (each takes a new file when it comes back; raise RLIMIT_NOFILE)",
			"max_agents", w.cfg.MaxAgents)
	}
	return w.retire(old, true)
}

// releaseIdle gives up the agents without a record for IdleRelease.
func (w *Writer) releaseIdle() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.agents {
		if time.Since(a.last) < w.cfg.IdleRelease {
			continue
		}
		w.Counters.Released.Add(1)
		if err := w.retire(a, true); err != nil {
			return err
		}
	}
	return nil
}

// release gives agent name up in the store (WriterConfig.Release).
func (w *Writer) release(name string) {
	if w.cfg.Release == nil {
		return
	}
	if err := w.cfg.Release(name); err != nil {
		w.log.Error("kafka writer: giving an agent up", "agent", name, "err", err)
	}
}

// skip counts and logs (at most once a second) a record that cannot
// be written: it is malformed or refused, and will be for ever.
func (w *Writer) skip(rec *kgo.Record, err error) {
	w.Counters.BadRecords.Add(1)
	if now := time.Now(); now.Sub(w.bad) >= time.Second {
		w.bad = now
		w.log.Error("kafka writer: skipping a record that cannot be written", "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "err", err)
	}
}

// commit commits the offsets past recs, whose batches are durable. A
// commit that fails is logged: the records after the last commit are
// consumed again by whoever gets their partition, and dropped as
// written by their marks.
func (w *Writer) commit(cl *kgo.Client, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		w.log.Warn("kafka writer: committing offsets", "err", err)
		return
	}
	w.Counters.Commits.Add(1)
	w.pmu.Lock()
	for _, r := range recs {
		if ps := w.parts[r.Partition]; ps != nil {
			ps.Committed = max(ps.Committed, r.Offset+1)
			ps.lag()
		}
	}
	w.pmu.Unlock()
	if w.cfg.Delay != nil {
		now := time.Now()
		for _, r := range recs {
			w.cfg.Delay.Observe(now.Sub(r.Timestamp).Seconds())
		}
	}
}

func (w *Writer) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.Counters.Rebalances.Add(1)
	w.pmu.Lock()
	for _, p := range m[w.cfg.Topic] {
		w.parts[p] = &PartitionState{Partition: p, Offset: -1, Committed: -1, End: -1, Lag: -1, start: -1}
	}
	w.pmu.Unlock()
	select {
	case w.list <- struct{}{}:
	default:
	}
	w.log.Info("kafka writer: partitions assigned", "topic", w.cfg.Topic, "partitions", fmt.Sprint(m[w.cfg.Topic]))
}

// revoked gives up the agents of partitions that move to another
// writer (every poll committed what it wrote already).
func (w *Writer) revoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.drop(m, "revoked")
}

// lost gives the agents of partitions up without a commit: the group
// already moved them.
func (w *Writer) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	w.drop(m, "lost")
}

func (w *Writer) drop(m map[string][]int32, how string) {
	ps := m[w.cfg.Topic]
	w.pmu.Lock()
	for _, p := range ps {
		delete(w.parts, p)
	}
	w.pmu.Unlock()
	n := w.endAll(func(a *wagent) bool { return slices.Contains(ps, a.partition) })
	w.log.Info("kafka writer: partitions "+how, "topic", w.cfg.Topic, "partitions", fmt.Sprint(ps), "agents_given_up", n)
}

// endAll ends the sessions of the agents match selects, closing their
// files, and releases the agents; it returns how many.
func (w *Writer) endAll(match func(*wagent) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name, a := range w.agents {
		if !match(a) {
			continue
		}
		a.sess.End(true)
		delete(w.agents, name)
		delete(w.touched, a)
		n++
		w.release(name)
	}
	return n
}

// Partitions returns the partitions assigned now, sorted.
func (w *Writer) Partitions() []PartitionState {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	out := make([]PartitionState, 0, len(w.parts))
	for _, p := range w.parts {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// watchEnds lists the partitions' start and end offsets and learns the
// group's committed offsets every LagInterval and after an assignment
// until ctx ends, so that the lag of a partition with nothing to fetch
// is known too.
func (w *Writer) watchEnds(ctx context.Context, cl *kgo.Client) {
	adm := kadm.NewClient(cl)
	t := time.NewTicker(LagInterval)
	defer t.Stop()
	for {
		lctx, cancel := context.WithTimeout(ctx, LagInterval)
		starts, serr := adm.ListStartOffsets(lctx, w.cfg.Topic)
		ends, eerr := adm.ListEndOffsets(lctx, w.cfg.Topic)
		cancel()
		committed := cl.CommittedOffsets()[w.cfg.Topic]
		w.pmu.Lock()
		for p, ps := range w.parts {
			if o, ok := committed[p]; ok && o.Offset >= 0 {
				ps.Committed = max(ps.Committed, o.Offset)
			}
			if e, ok := ends.Lookup(w.cfg.Topic, p); eerr == nil && ok && e.Err == nil {
				ps.End = max(ps.End, e.Offset)
			}
			if s, ok := starts.Lookup(w.cfg.Topic, p); serr == nil && ok && s.Err == nil {
				ps.start = s.Offset
			}
			ps.lag()
		}
		w.pmu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.list:
		}
	}
}

// lag recomputes Lag from End and the committed offset (or the
// partition's start offset before any commit).
func (ps *PartitionState) lag() {
	from := ps.Committed
	if from < 0 {
		from = ps.start
	}
	if ps.End < 0 || from < 0 {
		ps.Lag = -1
		return
	}
	ps.Lag = max(ps.End-from, 0)
}
