package agent

// WrapKafkaSend wraps the producer calls of a's Kafka transport (before
// Run): a test can report an answer other than the brokers' one.
func WrapKafkaSend(a *Agent, wrap func(send func(agent string, hello, info, frame []byte, done func(error))) func(agent string, hello, info, frame []byte, done func(error))) {
	k := a.tr.(*kafkaSender)
	k.wrap = func(send produceFunc) produceFunc { return wrap(send) }
}
