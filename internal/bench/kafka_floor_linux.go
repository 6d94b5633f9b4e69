package bench

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
)

// runFloor measures franz-go alone on the records a Kafka path round
// left in topic, in this process: first a consumer group member reading
// them all and dropping them (the least a writer does besides writing
// files), then a relay: a member of another group reading them and the
// ingest collector's producer (kafkarec.Producer: idempotent, acks from
// all in-sync replicas) writing each again to a fresh topic, dropped
// once answered (the least an ingest collector and a writer do besides
// reading agents and writing files). Each is this process's user +
// system time over the step.
func (e kafkaEnv) runFloor(ctx context.Context, round int, topic string) (FloorRun, error) {
	var r FloorRun
	ends, err := e.b.partitionEnds(ctx, topic)
	if err != nil {
		return r, err
	}
	for _, end := range ends {
		r.Records += int(end)
	}
	name := fmt.Sprintf("pcapsync-bench-floor-%d-%d", os.Getpid(), round)
	cpu0 := selfCPU()
	if _, err := e.consumeAll(ctx, topic, name+"-consume", r.Records, nil); err != nil {
		return r, err
	}
	r.Consume = selfCPU() - cpu0

	if err := e.b.ensureTopic(ctx, name, e.cfg.Partitions); err != nil {
		return r, fmt.Errorf("topic %s: %w", name, err)
	}
	e.b.dropTopic(name)
	maxRecord, err := kafkaconn.MaxRecordBytes(ctx, e.b.cl, name)
	if err != nil {
		return r, err
	}
	cpu1 := selfCPU()
	p, err := kafkarec.NewProducer(kafkarec.ProducerConfig{Opts: []kgo.Opt{kgo.SeedBrokers(e.b.addrs...)}, Topic: name, MaxRecord: maxRecord})
	if err != nil {
		return r, err
	}
	errs := make(chan error, r.Records)
	r.Bytes, err = e.consumeAll(ctx, topic, name+"-relay", r.Records, func(rec *kgo.Record) {
		if len(rec.Headers) == 0 {
			errs <- fmt.Errorf("record at offset %d has no hello header", rec.Offset)
			return
		}
		var info []byte
		for _, h := range rec.Headers[1:] {
			if h.Key == kafkarec.InfoHeader {
				info = h.Value
			}
		}
		p.Send(string(rec.Key), rec.Headers[0].Value, info, rec.Value, func(err error) { errs <- err })
	})
	for range r.Records {
		if err == nil {
			err = <-errs
		}
	}
	if cerr := p.Close(10 * time.Second); err == nil {
		err = cerr
	}
	r.Relay = selfCPU() - cpu1
	return r, err
}

// consumeAll reads want records of topic as a member of group, as the
// writer does (offsets from the start, no automatic commits, rebalances
// blocked while polling), hands each to each (if not nil) and returns
// the bytes of their values.
func (e kafkaEnv) consumeAll(ctx context.Context, topic, group string, want int, each func(*kgo.Record)) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.b.addrs...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll())
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, bytes := 0, int64(0)
	for n < want {
		fs := cl.PollRecords(ctx, 4096)
		if err := ctx.Err(); err != nil {
			return bytes, fmt.Errorf("consuming %s: %d of %d records: %w", topic, n, want, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			n++
			bytes += int64(len(rec.Value))
			if each != nil {
				each(rec)
			}
		})
		cl.AllowRebalance()
	}
	return bytes, nil
}

// selfCPU returns this process's user + system time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
