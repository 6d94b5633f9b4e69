package kafkarec

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/kafkarec/kafkarectest"
)

// testAgent makes the records of one agent's session.
type testAgent struct {
	name  string
	hello []byte
}

func newTestAgent(name string, instance byte) testAgent {
	return testAgent{name: name, hello: kafkarectest.Hello(name, instance)}
}

// batch returns the record of batch seq of n packets (kafkarectest.Batch).
func (a testAgent) batch(topic string, seq uint64, n int) *kgo.Record {
	return NewRecord(topic, a.name, a.hello, nil, kafkarectest.Batch(seq, n).Finish(seq))
}
