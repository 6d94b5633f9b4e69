package kafkatest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBroker: a record produced with acks from all in-sync replicas
// (franz-go's idempotent default) is consumed back by a consumer group,
// also after the broker was killed and restarted on its log.
func TestBroker(t *testing.T) {
	b := Start(t)
	const topic, n = "kafkatest", 20
	b.CreateTopic(topic, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prod := b.Client(kgo.DefaultProduceTopic(topic))
	for i := range n {
		r := &kgo.Record{Key: []byte(fmt.Sprintf("agent%d", i%4)), Value: []byte(fmt.Sprint(i))}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	prod.Close()
	consume := func(group string) map[string]bool {
		cl := b.Client(kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		got := map[string]bool{}
		for len(got) < n && ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
				t.Fatalf("fetch: %v", errs)
			}
			fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
		}
		cl.Close()
		return got
	}
	if got := consume("g1"); len(got) != n {
		t.Fatalf("consumed %d distinct records, want %d", len(got), n)
	}
	b.Kill()
	b.Restart()
	if got := consume("g2"); len(got) != n {
		t.Fatalf("after a kill and restart: consumed %d distinct records, want %d", len(got), n)
	}
}
