package kafkarec

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestProduceError: a record no broker takes (the only seed refuses
// connections) fails with ErrProduce once its delivery timeout passed.
func TestProduceError(t *testing.T) {
	p, err := NewProducer(ProducerConfig{
		Topic:     "t",
		MaxRecord: 1 << 20,
		Opts:      []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.RecordDeliveryTimeout(time.Second)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(0) })
	hello := wire.AppendHello(nil, &wire.Hello{Name: "web1"})
	errc := make(chan error, 1)
	p.Send("web1", hello, nil, wire.AppendStats(nil, &wire.Stats{}), func(err error) { errc <- err })
	select {
	case err := <-errc:
		if !errors.Is(err, ErrProduce) {
			t.Fatalf("done(%v), want an error wrapping ErrProduce", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer within 30s")
	}
	if n := p.Counters.Errors.Load(); n != 1 {
		t.Errorf("%d errors counted, want 1", n)
	}
}
