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
	// maxWaiting bounds the bytes of the records waiting for their
	// agents' takes: past it the writer polls no more until a take
	// ended, so that an agent busy for BusyWait cannot fill the memory
	// with the records of a busy topic.
	maxWaiting = 64 << 20
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
	// PreviousKey are the records the topic's previous key authenticated
	// (a Key made WithPrevious): producers still on the old key.
	PreviousKey atomic.Uint64
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

	mu      sync.Mutex // guards agents, taking, queue, touched, pending: the poll loop, the taker, the rebalance callbacks
	agents  map[string]*wagent
	taking  map[string]*take // agents being taken off the poll loop, or taken and their records not yet written
	queue   []*take          // the takes waiting for the taker, in order
	kick    chan struct{}    // tells the taker the queue grew
	touched map[*wagent]bool // agents written since their last commit
	pending map[int32][]pend // per partition, the records consumed and not yet committed, in order
	bad     time.Time        // when a bad record was last logged
	capped  bool             // MaxAgents was reached (logged once)

	pollMu     sync.Mutex         // guards pollCancel, woken
	pollCancel context.CancelFunc // ends the poll in progress early
	woken      bool               // a take ended since the last poll began

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
	version   string    // the last version its records' InfoHeader gave (Session.Info)
	infoBad   bool      // an InfoHeader of it could not be read (logged once)
}

// parked is a record that passed check, with its parse.
type parked struct {
	rec *kgo.Record
	r   kafkarec.Record
	b   wire.Batch // r's batch (Type wire.TypeBatch)
}

// take is an agent being taken for a record's hello, off the poll
// loop, by the taker goroutine: Core.Begin takes the agent's lock,
// repairs the files a dead writer left and reads the agent's marks,
// which can take long (a large .part), or finds the agent busy (another
// writer still holds it), tried again with backoff for up to BusyWait.
// Meanwhile the agent's records wait in queue, in order (the first's
// hello is the one being begun) and hold its partition's commit back;
// the agents held go on being written, and the takes after a busy one
// are tried.
type take struct {
	name      string
	partition int32
	hello     wire.Hello
	helloRaw  []byte
	peer      collector.Peer
	queue     []parked
	done      chan struct{} // closed once the take ended: the agent held (in agents), or err set
	err       error

	// The taker's: when to try a busy agent again, until when.
	next, deadline time.Time
	backoff        time.Duration
	abandoned      bool // its partition went (endAll) while Begin ran
}

// pend is a consumed record not yet committed.
type pend struct {
	offset int64
	epoch  int32
	ts     time.Time
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
		agents: map[string]*wagent{}, taking: map[string]*take{}, kick: make(chan struct{}, 1), touched: map[*wagent]bool{},
		pending: map[int32][]pend{}, fetchErrs: map[int32]string{},
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
	tctx, stopTaker := context.WithCancel(ctx)
	takerDone := make(chan struct{})
	go w.taker(tctx, takerDone)
	defer func() {
		// Every poll committed what it could: give every agent up
		// (the take under way once it ends), leave the group.
		w.endAll(func(int32) bool { return true })
		stopTaker()
		<-takerDone
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
		pctx := w.pollContext(ctx)
		var fs kgo.Fetches
		if w.waitingFull() {
			<-pctx.Done() // no more records until a take ended (or pollWait passed)
		} else {
			fs = cl.PollRecords(pctx, 4096)
		}
		w.pollDone()
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
		w.commit(cl)
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

// pollContext returns the context of the next poll: ctx for at most
// pollWait, ended at once when a take ended since the last poll began
// (wake), so that its agent's records are written without waiting.
func (w *Writer) pollContext(ctx context.Context) context.Context {
	pctx, cancel := context.WithTimeout(ctx, pollWait)
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	w.pollCancel = cancel
	if w.woken {
		w.woken = false
		cancel()
	}
	return pctx
}

// pollDone ends the poll's context.
func (w *Writer) pollDone() {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	w.pollCancel()
	w.pollCancel = nil
}

// wake ends the poll in progress, or the next one at once: a take ended.
func (w *Writer) wake() {
	w.pollMu.Lock()
	defer w.pollMu.Unlock()
	w.woken = true
	if w.pollCancel != nil {
		w.pollCancel()
	}
}

// write writes recs, the records of the agents taken since (settle)
// first, and commits every session they touched. The records of one
// agent are written in their order, the agents one after the other (so
// that each is taken at most once, however many agents the poll holds
// past MaxAgents); an agent not held yet is taken off the loop (take)
// and its records wait for it.
func (w *Writer) write(ctx context.Context, recs []*kgo.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.settle(ctx); err != nil {
		return err
	}
	order := slices.Clone(recs)
	slices.SortStableFunc(order, func(a, b *kgo.Record) int { return bytes.Compare(a.Key, b.Key) })
	for _, rec := range recs {
		w.pending[rec.Partition] = append(w.pending[rec.Partition], pend{rec.Offset, rec.LeaderEpoch, rec.Timestamp})
	}
	for _, rec := range order {
		w.Counters.Records.Add(1)
		w.Counters.Bytes.Add(uint64(len(rec.Value)))
		if err := w.handle(ctx, rec); err != nil {
			return err
		}
	}
	for a := range w.touched {
		if err := w.commitAgent(a); err != nil {
			return err
		}
	}
	return nil
}

// waitingFull reports whether the records waiting for takes hold
// maxWaiting bytes or more.
func (w *Writer) waitingFull() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.taking {
		for _, p := range t.queue {
			n += len(p.rec.Value)
		}
	}
	return n >= maxWaiting
}

// settle writes the records of the agents whose take ended. It returns
// an error when the writer must start over: an agent still busy after
// BusyWait, or ctx ended. w.mu must be held.
func (w *Writer) settle(ctx context.Context) error {
	for name, t := range w.taking {
		select {
		case <-t.done:
		default:
			continue
		}
		delete(w.taking, name)
		q := t.queue
		switch {
		case errors.Is(t.err, collector.ErrRejected):
			// The store may have taken the agent before the core refused
			// the hello: give it up, or its lock stays held.
			w.release(name)
			w.skip(q[0].rec, t.err)
			q = q[1:] // a later record may carry another hello
		case t.err != nil:
			return t.err
		}
		for _, p := range q {
			if err := w.dispatch(ctx, p); err != nil {
				return err
			}
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

// handle checks and writes one record. It returns an error only when
// the writer must start over. w.mu must be held.
func (w *Writer) handle(ctx context.Context, rec *kgo.Record) error {
	r, b, err := w.check(rec)
	if err != nil {
		w.skip(rec, err)
		return nil
	}
	return w.dispatch(ctx, parked{rec, r, b})
}

// dispatch writes a checked record into its agent's session, or queues
// it while the agent is being taken (a take started for it, or under
// way). w.mu must be held.
func (w *Writer) dispatch(ctx context.Context, p parked) error {
	if t := w.taking[p.r.Agent]; t != nil {
		t.queue = append(t.queue, p)
		return nil
	}
	a := w.agents[p.r.Agent]
	if a == nil || !bytes.Equal(a.helloRaw, p.r.HelloRaw) {
		var err error
		if a, err = w.session(ctx, a, p); a == nil || err != nil {
			return err
		}
	}
	a.partition, a.last = p.rec.Partition, time.Now()
	w.info(a, &p.r)
	var err error
	if p.r.Type == wire.TypeBatch {
		_, err = a.sess.Batch(&p.b, p.r.Flags, p.r.Payload)
	} else {
		err = a.sess.Stats(p.r.Payload)
	}
	if err != nil {
		if errors.Is(err, collector.ErrStorage) {
			return fmt.Errorf("agent %s: %w", a.name, err)
		}
		w.skip(p.rec, err)
		return nil
	}
	w.touched[a] = true
	return nil
}

// info passes the version that r's InfoHeader gives to a's session when
// it changed, and logs an InfoHeader it could not read once per agent:
// the record is written all the same (kafkarec.InfoHeader).
func (w *Writer) info(a *wagent, r *kafkarec.Record) {
	if r.InfoErr != nil && !a.infoBad {
		a.infoBad = true
		w.log.Warn("kafka: agent version unreadable; the record is written all the same", "agent", a.name, "err", r.InfoErr)
	}
	if r.Info.Version != "" && r.Info.Version != a.version {
		a.version = r.Info.Version
		a.sess.Info(&r.Info)
	}
}

// check authenticates (with a Key) and parses rec, and parses a
// batch, verifying its checksum, counting what fails.
func (w *Writer) check(rec *kgo.Record) (kafkarec.Record, wire.Batch, error) {
	if prev, err := w.cfg.Key.Authenticate(rec); err != nil {
		w.Counters.Unauthenticated.Add(1)
		return kafkarec.Record{}, wire.Batch{}, fmt.Errorf("%w of %q: %w", kafkarec.ErrRecord, rec.Key, err)
	} else if prev {
		w.Counters.PreviousKey.Add(1)
	}
	r, err := kafkarec.ParseRecord(rec, w.lim)
	if err != nil || r.Type != wire.TypeBatch {
		return r, wire.Batch{}, err
	}
	// The batch's own checksum, which the agent computed over these
	// bytes: Kafka's record-batch CRC covers them only from the
	// producer on. A batch sent without one (an agent inside TLS) has
	// only the MAC, if any, to vouch for it.
	b, err := wire.ParseBatch(r.Flags, r.Payload, wire.BatchLimits{Unchecked: true})
	if err != nil {
		if errors.Is(err, wire.ErrChecksum) {
			w.Counters.BadChecksums.Add(1)
		}
		return r, b, fmt.Errorf("%w of %q: %w", kafkarec.ErrRecord, rec.Key, err)
	}
	return r, b, nil
}

// session returns the agent's session for p's hello when it is the
// current one with more interfaces (declared now), and otherwise starts
// a take of the agent for it (the agent restarted, or was not seen yet)
// and returns nil: p is the take's first record. w.mu must be held.
func (w *Writer) session(ctx context.Context, a *wagent, p parked) (*wagent, error) {
	r := &p.r
	if a != nil && a.hello.Instance == r.Hello.Instance && a.hello.Host == r.Hello.Host &&
		len(r.Hello.Interfaces) > len(a.hello.Interfaces) &&
		slices.Equal(r.Hello.Interfaces[:len(a.hello.Interfaces)], a.hello.Interfaces) {
		if err := a.sess.Declare(r.Hello.Interfaces); err != nil {
			w.skip(p.rec, err)
			return nil, nil
		}
		a.hello, a.helloRaw = r.Hello, r.HelloRaw
		return a, nil
	}
	if a != nil {
		// A new instance: its session continues the file.
		if err := w.retire(a, false); err != nil {
			return nil, err
		}
	}
	// The record passed check: its batch's checksum (or, with a Key, the
	// MAC) was verified, and franz-go checked the record batch's CRC.
	t := &take{name: r.Agent, partition: p.rec.Partition, hello: r.Hello, helloRaw: r.HelloRaw,
		peer:  collector.Peer{Addr: fmt.Sprintf("%s/%d", p.rec.Topic, p.rec.Partition), Transport: "kafka", Verified: true},
		queue: []parked{p}, done: make(chan struct{}), deadline: time.Now().Add(w.cfg.BusyWait)}
	w.taking[r.Agent] = t
	w.queue = append(w.queue, t)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return nil, nil
}

// taker takes the queued agents one at a time, in order, until ctx
// ends, then closes done.
func (w *Writer) taker(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		t, wait := w.nextTake()
		if t != nil {
			w.try(t)
			continue
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-w.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// nextTake returns the first queued take that is due, having made room
// for its agent within MaxAgents, or how long until one is due. A take
// that cannot get room (a failed commit) ends with the error.
func (w *Writer) nextTake() (*take, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	wait := time.Minute
	for i, t := range w.queue {
		if d := t.next.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		w.queue = slices.Delete(w.queue, i, i+1)
		for len(w.agents) >= w.cfg.MaxAgents {
			ok, err := w.evict()
			if err != nil {
				w.finish(t, err)
				return nil, 0
			}
			if !ok {
				break // every agent held is being taken: over the bound for a moment
			}
		}
		return t, 0
	}
	return nil, wait
}

// try begins a session for t's agent: held once it succeeds; refused;
// or busy, then queued again with backoff until BusyWait passed.
func (w *Writer) try(t *take) {
	sess, _, err := w.cfg.Core.Begin(&t.hello, t.peer, func() {})
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case t.abandoned:
		if err == nil {
			sess.End(true)
		}
		if (err == nil || errors.Is(err, collector.ErrRejected)) && w.agents[t.name] == nil && w.taking[t.name] == nil {
			w.release(t.name)
		}
	case err == nil:
		w.agents[t.name] = &wagent{name: t.name, sess: sess, hello: t.hello, helloRaw: t.helloRaw, partition: t.partition, last: time.Now()}
		w.finish(t, nil)
	case errors.Is(err, collector.ErrRejected):
		w.finish(t, err)
	case time.Now().After(t.deadline):
		w.finish(t, fmt.Errorf("agent %s still busy after %s: %w", t.name, w.cfg.BusyWait, err))
	default:
		t.backoff = min(max(2*t.backoff, 50*time.Millisecond), time.Second)
		t.next = time.Now().Add(t.backoff)
		w.queue = append(w.queue, t)
	}
}

// finish ends take t with err and wakes the poll loop to write its
// agent's records. w.mu must be held.
func (w *Writer) finish(t *take, err error) {
	t.err = err
	close(t.done)
	w.wake()
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
// within MaxAgents, but none whose records wait for their take to be
// settled; it reports whether it gave one up. w.mu must be held.
func (w *Writer) evict() (bool, error) {
	var old *wagent
	for _, a := range w.agents {
		if w.taking[a.name] == nil && (old == nil || a.last.Before(old.last)) {
			old = a
		}
	}
	if old == nil {
		return false, nil
	}
	w.Counters.Released.Add(1)
	if !w.capped {
		w.capped = true
		w.log.Warn("kafka writer: more agents than it may hold at once: giving up the least recently written (each takes a new file when it comes back; raise RLIMIT_NOFILE)",
			"max_agents", w.cfg.MaxAgents)
	}
	return true, w.retire(old, true)
}

// releaseIdle gives up the agents without a record for IdleRelease.
func (w *Writer) releaseIdle() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.agents {
		if time.Since(a.last) < w.cfg.IdleRelease || w.taking[a.name] != nil {
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

// commit commits, per partition, the offset past the records consumed
// whose batches are durable: up to the first record still waiting for
// its agent's take, or past the last consumed. A commit that fails is
// logged and tried again after the next poll; the records after the
// last commit are consumed again by whoever gets their partition, and
// dropped as written by their marks.
func (w *Writer) commit(cl *kgo.Client) {
	w.mu.Lock()
	points := w.commitPoints()
	w.mu.Unlock()
	if len(points) == 0 {
		return
	}
	recs := make([]*kgo.Record, 0, len(points))
	for p, e := range points {
		recs = append(recs, &kgo.Record{Topic: w.cfg.Topic, Partition: p, Offset: e.Offset - 1, LeaderEpoch: e.Epoch})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.CommitRecords(ctx, recs...); err != nil {
		w.log.Warn("kafka writer: committing offsets", "err", err)
		return
	}
	w.Counters.Commits.Add(1)
	w.pmu.Lock()
	for p, e := range points {
		if ps := w.parts[p]; ps != nil {
			ps.Committed = max(ps.Committed, e.Offset)
			ps.lag()
		}
	}
	w.pmu.Unlock()
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, e := range points {
		q := w.pending[p]
		n := 0
		for n < len(q) && q[n].offset < e.Offset {
			if w.cfg.Delay != nil {
				w.cfg.Delay.Observe(now.Sub(q[n].ts).Seconds())
			}
			n++
		}
		w.pending[p] = slices.Delete(q, 0, n)
	}
}

// commitPoints returns, for each partition with records consumed and
// not committed, the offset to commit (the next to consume after the
// durable ones) and its leader epoch: the offset of the first record
// waiting for a take of its agent, or past the last consumed. w.mu must
// be held.
func (w *Writer) commitPoints() map[int32]kgo.EpochOffset {
	waiting := map[int32]kgo.EpochOffset{}
	for _, t := range w.taking {
		for _, p := range t.queue {
			if e, ok := waiting[p.rec.Partition]; !ok || p.rec.Offset < e.Offset {
				waiting[p.rec.Partition] = kgo.EpochOffset{Epoch: p.rec.LeaderEpoch, Offset: p.rec.Offset}
			}
		}
	}
	points := map[int32]kgo.EpochOffset{}
	for p, q := range w.pending {
		if len(q) == 0 {
			continue
		}
		last := q[len(q)-1]
		e := kgo.EpochOffset{Epoch: last.epoch, Offset: last.offset + 1}
		if wt, ok := waiting[p]; ok {
			e = wt
		}
		if e.Offset > q[0].offset {
			points[p] = e
		}
	}
	return points
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
	n := w.endAll(func(p int32) bool { return slices.Contains(ps, p) })
	w.log.Info("kafka writer: partitions "+how, "topic", w.cfg.Topic, "partitions", fmt.Sprint(ps), "agents_given_up", n)
}

// endAll ends the sessions of the agents of the partitions match
// selects, closing their files, and releases the agents; it gives their
// takes up (one under way ends its session and releases the agent once
// Begin returns) and forgets their partitions' records not committed.
// It returns how many agents.
func (w *Writer) endAll(match func(partition int32) bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name, a := range w.agents {
		if !match(a.partition) {
			continue
		}
		a.sess.End(true)
		delete(w.agents, name)
		delete(w.touched, a)
		n++
		w.release(name)
	}
	for name, t := range w.taking {
		if !match(t.partition) {
			continue
		}
		delete(w.taking, name)
		if i := slices.Index(w.queue, t); i >= 0 {
			w.queue = slices.Delete(w.queue, i, i+1)
			n++
			continue
		}
		select {
		case <-t.done: // taken (ended above), or refused
		default:
			t.abandoned = true // try ends it
			n++
		}
	}
	for p := range w.pending {
		if match(p) {
			delete(w.pending, p)
		}
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
