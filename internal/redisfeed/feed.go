package redisfeed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Defaults of Config.
const (
	DefaultPrefix       = "pcapsync:"
	DefaultMaxLen       = 10000
	DefaultQueueBytes   = 64 << 20
	DefaultTimeout      = 2 * time.Second
	DefaultDrainTimeout = 5 * time.Second
)

// DefaultCompress is the codec of the records when Config.Compress is nil.
var DefaultCompress = compress.Spec{Codec: compress.S2}

// Stream entry field names.
const (
	FieldHost   = "host"
	FieldIfaces = "ifaces"
	FieldBatch  = "batch"
)

// maxPipeline is the most XADDs sent in one round trip.
const maxPipeline = 64

// Config configures a Feed. The zero value of every field but URL means
// its default.
type Config struct {
	// URL is the Redis server: redis://[user:password@]host:port[/db],
	// rediss:// for TLS, unix:///path/to/socket. Required.
	URL string
	// Prefix is put before the agent's name to make its stream's key.
	Prefix string
	// Compress is the codec of the records: one compress.Entries
	// allows (s2, zstd[:level] or none). nil means DefaultCompress. A
	// batch that does not shrink goes uncompressed.
	Compress *compress.Spec
	// MaxLen trims each stream to about this many entries (XADD MAXLEN
	// ~). 0 means DefaultMaxLen unless MaxAge is set.
	MaxLen int64
	// MaxAge, if set, trims entries older than this instead (XADD MINID
	// ~ now-MaxAge, by the server's clock).
	MaxAge time.Duration
	// QueueBytes bounds the batches waiting to be published (records
	// uncompressed); beyond it new batches are dropped and counted.
	QueueBytes int64
	// Timeout bounds connecting and each pipelined round trip.
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// DrainTimeout bounds how long Run goes on publishing what is
	// queued once its context ended. 0 means DefaultDrainTimeout.
	DrainTimeout time.Duration
	// Logger receives state changes (Redis down, back up). nil: slog.Default.
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Compress == nil {
		sp := DefaultCompress
		c.Compress = &sp
	}
	if c.MaxLen == 0 && c.MaxAge == 0 {
		c.MaxLen = DefaultMaxLen
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = DefaultQueueBytes
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports a Config that New would refuse.
func (c *Config) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("redis feed: no URL")
	case c.MaxLen < 0 || c.MaxAge < 0 || c.QueueBytes < 0 || c.Timeout < 0 || c.DrainTimeout < 0:
		return errors.New("redis feed: negative limit")
	case c.MaxLen > 0 && c.MaxAge > 0:
		return fielderr.Errorf("redis feed: a max length ({redisfeed.MaxLen}) and a max age ({redisfeed.MaxAge}) exclude each other: streams are trimmed by length or by age")
	}
	if c.Compress != nil {
		if err := compress.Entries.Check(*c.Compress); err != nil {
			return fmt.Errorf("redis feed: %w", err)
		}
	}
	if _, err := redis.ParseURL(c.URL); err != nil {
		return fmt.Errorf("redis feed: %w", err)
	}
	return nil
}

// Options returns go-redis options for url as the feed and Follow use
// them: timeouts of d, no automatic retries (an XADD retried after a
// timeout could be added twice), no client-name handshake.
func Options(url string, d time.Duration) (*redis.Options, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = d, d, d
	opt.MaxRetries = -1
	opt.PoolSize = 2
	opt.DisableIdentity = true
	opt.ContextTimeoutEnabled = true
	return opt, nil
}

// Counters are the feed's, updated atomically.
type Counters struct {
	Published  atomic.Uint64 // batches added to a stream
	Dropped    atomic.Uint64 // batches dropped: queue full, Redis down, slow or refusing
	Reconnects atomic.Uint64 // times Redis came back after being down
	RawBytes   atomic.Uint64 // records published, uncompressed
	SentBytes  atomic.Uint64 // records published, as stored (compressed)
}

// Feed publishes written batches to Redis. It implements collector.Feed.
// Batch is safe for concurrent use and never blocks; Close ends it.
type Feed struct {
	Counters Counters

	cfg    Config
	rdb    *redis.Client
	enc    *compress.Encoder
	ch     chan item
	queued atomic.Int64 // bytes in ch
	bufs   sync.Pool    // *[]byte
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	ran    atomic.Bool // Run ran, or never will (Close came first)

	// publisher goroutine only
	down       bool          // connect before publishing
	outage     bool          // down was logged, not yet up again
	refusedLog time.Time     // last "XADD refused" warning
	offset     time.Duration // Redis clock - ours, measured at every (re)connect
	frames     [maxPipeline][]byte
	values     [maxPipeline][6]any
}

// item is one batch waiting to be published. buf holds its records
// (uncompressed) followed by its interfaces as Iface frames.
type item struct {
	agent, host string
	b           wire.Batch // Records nil: buf[:recLen]
	recLen      int
	buf         *[]byte
}

var _ collector.Feed = (*Feed)(nil)

// New returns a Feed publishing to cfg.URL once Run runs. Batches
// given to it before are queued (within QueueBytes).
func New(cfg Config) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	opt, err := Options(cfg.URL, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	enc, err := compress.NewEncoder(*cfg.Compress)
	if err != nil {
		return nil, fmt.Errorf("redis feed: %w", err)
	}
	f := &Feed{
		cfg:  cfg,
		rdb:  redis.NewClient(opt),
		enc:  enc,
		ch:   make(chan item, 4096),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	f.down = true // until the first successful connect
	return f, nil
}

// Run is the publisher: it connects at once, without waiting for
// Redis (if Redis is not there yet, it logs that it is down and tries
// again with the next batch, after a backoff), and publishes until ctx
// ends or Close is called. Then it publishes what is queued, if Redis
// is up, for at most DrainTimeout (after ctx) or until Close's context
// ends, drops the rest (counted), closes the connection and returns.
// Call it once; after Close it returns at once.
func (f *Feed) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return nil // closed before it ran, or run twice
	}
	defer close(f.done)
	stop := context.AfterFunc(ctx, func() {
		f.halt()
		// Fails the round trip in progress once the drain took too long.
		time.AfterFunc(f.cfg.DrainTimeout, func() { f.rdb.Close() })
	})
	defer stop()
	f.run()
	f.rdb.Close()
	return nil
}

func (f *Feed) halt() { f.once.Do(func() { close(f.stop) }) }

// Key returns the stream key of agent under prefix.
func Key(prefix, agent string) string { return prefix + agent }

// Batch copies the batch and its interfaces into the queue, or drops
// and counts it when the queue is full. It does not block.
func (f *Feed) Batch(ev *collector.BatchEvent) {
	size := int64(len(ev.Batch.Records))
	if f.queued.Add(size) > f.cfg.QueueBytes {
		f.queued.Add(-size)
		f.Counters.Dropped.Add(1)
		return
	}
	bp, _ := f.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := append((*bp)[:0], ev.Batch.Records...)
	for i := range ev.Ifaces {
		b = wire.AppendIface(b, uint32(i), &ev.Ifaces[i])
	}
	*bp = b
	it := item{agent: ev.Agent, host: ev.Host, b: *ev.Batch, recLen: len(ev.Batch.Records), buf: bp}
	it.b.Records = nil
	select {
	case f.ch <- it:
	default:
		f.release(&it)
		f.Counters.Dropped.Add(1)
	}
}

// release returns the item's buffer to the pool and its bytes to the queue's budget.
func (f *Feed) release(it *item) {
	f.queued.Add(-int64(it.recLen))
	f.bufs.Put(it.buf)
	it.buf = nil
}

// Close stops the feed and returns once Run returned: Run publishes
// what is queued, if Redis is up, until ctx ends, and then drops the
// rest (counted) and closes the connection. Without Run it closes the
// connection. Batch must not be called after Close.
func (f *Feed) Close(ctx context.Context) error {
	f.halt()
	if f.ran.CompareAndSwap(false, true) { // Run never will
		close(f.done)
		return f.rdb.Close()
	}
	select {
	case <-f.done:
		return nil
	case <-ctx.Done():
		f.rdb.Close() // fails the round trip in progress
		<-f.done
		return ctx.Err()
	}
}

func (f *Feed) run() {
	f.connect() // at once, so that a wrong URL or password shows at start
	batch := make([]item, 0, maxPipeline)
	backoff := time.Duration(0)
	for {
		select {
		case it := <-f.ch:
			batch = append(batch[:0], it)
		case <-f.stop:
			f.drain()
			return
		}
		batch = f.fill(batch)
		if f.down && !f.connect() {
			f.drop(batch)
			f.dropQueued()
			backoff = min(max(2*backoff, 100*time.Millisecond), 5*time.Second)
			select {
			case <-time.After(backoff):
			case <-f.stop:
				f.drain()
				return
			}
			continue
		}
		backoff = 0
		f.publish(batch)
	}
}

// fill adds what is queued, without waiting, up to maxPipeline.
func (f *Feed) fill(batch []item) []item {
	for len(batch) < maxPipeline {
		select {
		case it := <-f.ch:
			batch = append(batch, it)
		default:
			return batch
		}
	}
	return batch
}

// drain publishes what is left in the queue at Close.
func (f *Feed) drain() {
	batch := make([]item, 0, maxPipeline)
	for {
		batch = f.fill(batch[:0])
		if len(batch) == 0 {
			return
		}
		if f.down && !f.connect() {
			f.drop(batch)
			f.dropQueued()
			return
		}
		f.publish(batch)
	}
}

// connect checks that Redis answers and measures its clock. It logs a
// change of state and counts a return after an outage.
func (f *Feed) connect() bool {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	before := time.Now()
	t, err := f.rdb.Time(ctx).Result()
	if err != nil {
		f.setDown(err)
		return false
	}
	f.offset = t.Sub(before.Add(time.Since(before) / 2))
	if f.down {
		f.down = false
		if f.outage {
			f.Counters.Reconnects.Add(1)
		}
		f.outage = false
		f.cfg.Logger.Info("redis feed up", "redis", f.rdb.Options().Addr, "dropped_so_far", f.Counters.Dropped.Load())
	}
	return true
}

// setDown marks Redis down, logging it once per outage.
func (f *Feed) setDown(err error) {
	f.down = true
	if !f.outage {
		f.outage = true
		f.cfg.Logger.Warn("redis feed down: dropping batches until it is back", "redis", f.rdb.Options().Addr, "err", err)
	}
}

func (f *Feed) drop(batch []item) {
	for i := range batch {
		f.release(&batch[i])
	}
	f.Counters.Dropped.Add(uint64(len(batch)))
}

func (f *Feed) dropQueued() {
	for {
		select {
		case it := <-f.ch:
			f.release(&it)
			f.Counters.Dropped.Add(1)
		default:
			return
		}
	}
}

// publish compresses batch and sends it in one pipelined round trip.
// What fails is dropped and counted; a batch that timed out may still
// have been added.
func (f *Feed) publish(batch []item) {
	ctx, cancel := context.WithTimeout(context.Background(), f.cfg.Timeout)
	defer cancel()
	pipe := f.rdb.Pipeline()
	var minID string
	if f.cfg.MaxAge > 0 {
		minID = strconv.FormatInt(time.Now().Add(f.offset-f.cfg.MaxAge).UnixMilli(), 10)
	}
	for i := range batch {
		it := &batch[i]
		buf := *it.buf
		records := buf[:it.recLen]
		frame, codec := f.enc.Compress(wire.CompressedFrame(f.frames[i]), records)
		if codec == wire.CodecNone {
			frame = append(frame, records...)
		}
		frame = it.b.FinishFrame(frame, codec)
		f.frames[i] = frame
		f.values[i] = [6]any{FieldHost, it.host, FieldIfaces, buf[it.recLen:], FieldBatch, frame}
		args := &redis.XAddArgs{Stream: Key(f.cfg.Prefix, it.agent), Values: f.values[i][:], Approx: true}
		if minID != "" {
			args.MinID = minID
		} else {
			args.MaxLen = f.cfg.MaxLen
		}
		pipe.XAdd(ctx, args)
	}
	cmds, err := pipe.Exec(ctx)
	failed := 0
	for i := range batch {
		if i >= len(cmds) || cmds[i].Err() != nil {
			failed++
			continue
		}
		f.Counters.Published.Add(1)
		f.Counters.RawBytes.Add(uint64(batch[i].recLen))
		f.Counters.SentBytes.Add(uint64(len(f.frames[i]) - wire.HeaderSize - wire.BatchHeaderSize))
	}
	for i := range batch {
		f.release(&batch[i])
		f.values[i] = [6]any{}
	}
	if failed == 0 {
		return
	}
	f.Counters.Dropped.Add(uint64(failed))
	if rerr, ok := errors.AsType[redis.Error](err); ok {
		// Redis answered, and said no (a key of another type, out of
		// memory): not an outage. Logged at most once a minute.
		if time.Since(f.refusedLog) > time.Minute {
			f.refusedLog = time.Now()
			f.cfg.Logger.Warn("redis feed: XADD refused, batches dropped", "err", rerr)
		}
		return
	}
	f.setDown(err)
}

// LogClientTo sends go-redis's own messages (a line per failed dial,
// which the feed reports once per outage itself) to log at debug level.
// It sets go-redis's process-wide logger.
func LogClientTo(log *slog.Logger) { redis.SetLogger(clientLogger{log}) }

type clientLogger struct{ log *slog.Logger }

func (l clientLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug("go-redis: " + fmt.Sprintf(format, v...))
}
