package kafkarec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/observe"
)

// ProducerConfig configures a Producer.
type ProducerConfig struct {
	// Opts connect to the brokers (kafkaconn.Config.Opts): seeds, TLS,
	// SASL. The Producer adds its own (acks from all in-sync replicas,
	// idempotence, batch size).
	Opts []kgo.Opt
	// Topic receives the records.
	Topic string
	// MaxRecord is the largest record batch the topic takes
	// (max.message.bytes; kafkaconn.MaxRecordBytes).
	MaxRecord int
	// MaxBuffered bounds the bytes of records sent and not yet
	// acknowledged by the brokers; Send blocks beyond it. 0 means
	// DefaultMaxBuffered.
	MaxBuffered int64
	// Key, if set, signs every record (RecordKey.Sign): the writers of
	// the topic hold the same key.
	Key *RecordKey
	// Latency, if set, observes the seconds from Send to the brokers'
	// acknowledgement of each record.
	Latency observe.Observer
	Logger  *slog.Logger
}

// DefaultMaxBuffered is ProducerConfig.MaxBuffered's default: 64
// batches of the agents' default 1 MiB.
const DefaultMaxBuffered = 64 << 20

// ProducerCounters are a Producer's totals. Safe for concurrent use.
type ProducerCounters struct {
	Records atomic.Uint64 // acknowledged by the brokers
	Bytes   atomic.Uint64 // their values' bytes
	Errors  atomic.Uint64 // records the brokers did not take
}

// Producer sends frames as records (NewRecord) to one topic with an
// idempotent producer whose records are acknowledged only once all
// in-sync replicas have them. It is the collector.Sink of an ingest
// collector. Safe for concurrent use.
type Producer struct {
	cfg ProducerConfig
	cl  *kgo.Client
	log *slog.Logger

	Counters ProducerCounters

	purging atomic.Bool // forgetTopic in progress
}

// NewProducer connects a producer (the brokers are contacted lazily:
// an unreachable broker shows as records waiting, then as errors).
func NewProducer(cfg ProducerConfig) (*Producer, error) {
	if cfg.Topic == "" || cfg.MaxRecord <= 0 {
		return nil, fmt.Errorf("kafka producer: topic %q, max record %d: both are required", cfg.Topic, cfg.MaxRecord)
	}
	if cfg.MaxBuffered == 0 {
		cfg.MaxBuffered = DefaultMaxBuffered
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := append([]kgo.Opt{}, cfg.Opts...)
	opts = append(opts,
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()), // with idempotence, franz-go's default
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecord)),
		kgo.MaxBufferedBytes(int(max(cfg.MaxBuffered, int64(cfg.MaxRecord)))),
		kgo.ProducerLinger(0),                             // a batch is already a batch: send at once
		kgo.ProducerBatchCompression(kgo.NoCompression()), // agents compress, or chose not to
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka producer: %w", err)
	}
	return &Producer{cfg: cfg, cl: cl, log: cfg.Logger}, nil
}

// Send produces frame as a record of agent with hello and info (an
// Info frame for the InfoHeader; nil: none) and calls done with the
// brokers' answer. The slices become the record's: the caller
// must not change them until done is called, and may reuse them once
// done returns (the client is done with a record once it answered).
// The ingest collector and the agent hand over frames in pooled
// buffers they take back then.
// It blocks while MaxBuffered bytes wait for an answer. done is called
// in the order of Send for one agent (its records share a partition),
// with nil or an error wrapping ErrProduce and the brokers' error.
func (p *Producer) Send(agent string, hello, info, frame []byte, done func(error)) {
	rec := NewRecord(p.cfg.Topic, agent, hello, info, frame)
	p.cfg.Key.Sign(rec)
	start := time.Now()
	p.cl.Produce(context.Background(), rec, func(r *kgo.Record, err error) {
		if err != nil {
			p.Counters.Errors.Add(1)
		} else {
			p.Counters.Records.Add(1)
			p.Counters.Bytes.Add(uint64(len(r.Value)))
			if p.cfg.Latency != nil {
				p.cfg.Latency.Observe(time.Since(start).Seconds())
			}
		}
		if err != nil {
			if errors.Is(err, kerr.UnknownTopicID) {
				p.forgetTopic()
			}
			err = fmt.Errorf("%w: %w", ErrProduce, err)
		}
		done(err)
	})
}

// forgetTopic makes the client forget the topic, whose records fail
// with UNKNOWN_TOPIC_ID: it was deleted and created again under a new
// ID, which a franz-go client never adopts by itself. The records sent
// next look the topic up anew. It returns at once; one forgetting runs
// at a time.
func (p *Producer) forgetTopic() {
	if !p.purging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer p.purging.Store(false)
		p.log.Warn("kafka producer: the topic is unknown under the ID known here (deleted, or created again): looking it up anew", "topic", p.cfg.Topic)
		p.cl.PurgeTopicsFromProducing(p.cfg.Topic)
	}()
}

// MaxFrame returns the largest frame that fits a record with this agent
// name and hello.
func (p *Producer) MaxFrame(agent string, hello []byte) uint32 {
	return MaxFrame(p.cfg.MaxRecord, agent, hello)
}

// Close waits up to timeout for the records sent to be answered, then
// closes the client; records still unanswered fail.
func (p *Producer) Close(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := p.cl.Flush(ctx)
	p.cl.Close()
	if err != nil {
		return fmt.Errorf("kafka producer: flushing at close: %w: %w", ErrProduce, err)
	}
	return nil
}
