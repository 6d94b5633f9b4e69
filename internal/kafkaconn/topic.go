package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// RecordOverhead bounds what a record batch of one record adds to the
// record's key and value: the batch header (61 bytes) and the record's
// own fields (at most 32 bytes without headers). A record whose key and
// value are at most MaxRecordBytes - RecordOverhead fits the topic.
const RecordOverhead = 93

// Topic configuration keys MaxRecordBytes reads.
const (
	topicMaxBytes  = "max.message.bytes"
	brokerMaxBytes = "message.max.bytes"
)

// leaderPoll is how often EnsureTopic looks whether a topic it created
// has its partition leaders.
const leaderPoll = 50 * time.Millisecond

// EnsureTopic makes sure c's topic exists: it uses a topic that exists
// as it is (created false), and creates an absent one with c's
// Partitions and Replication (created true). Another client creating
// the topic at the same time is not an error (created false). It
// returns once every partition of the topic has a leader, or when ctx
// ends. While no broker can be reached (refused connections, timeouts:
// brokers starting or restarting) it retries, with a backoff of up to
// 2 s, until ctx ends. cl must reach the brokers of c (c.Opts).
//
// Refusals (TLS, SASL, permissions, a bad replication factor) end it at
// once and name what was refused: a missing permission wraps
// ErrNotAuthorized, the broker's errors wrap their kerr.Error
// (kerr.SaslAuthenticationFailed, kerr.InvalidReplicationFactor: more
// replicas than brokers), TLS errors the crypto/x509 ones.
func EnsureTopic(ctx context.Context, cl *kgo.Client, c Config) (created bool, err error) {
	c = c.WithDefaults()
	if err := CheckTopic(c.Topic); err != nil {
		return false, err
	}
	err = lookup(ctx, cl, c.Topic)
	switch {
	case err == nil:
		return false, waitLeaders(ctx, cl, c.Topic)
	case !errors.Is(err, kerr.UnknownTopicOrPartition):
		return false, err
	}
	maxBytes := strconv.Itoa(CreatedMaxMessageBytes)
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, c.Partitions, c.Replication,
		map[string]*string{topicMaxBytes: &maxBytes}, c.Topic)
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		return false, waitLeaders(ctx, cl, c.Topic)
	case isAuthErr(err):
		return false, fmt.Errorf("kafka: creating topic %q: %w: %w", c.Topic, ErrNotAuthorized, err)
	case err != nil:
		repl := strconv.Itoa(int(c.Replication))
		if c.Replication == -1 {
			repl = "the brokers' default"
		}
		return false, fmt.Errorf("kafka: creating topic %q with %d partitions, replication %s: %w%s",
			c.Topic, c.Partitions, repl, err, detail(resp.ErrMessage))
	}
	return true, waitLeaders(ctx, cl, c.Topic)
}

// Backoff between attempts to reach the brokers.
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 2 * time.Second
)

// lookup is describe's error, once a broker answered: it retries while
// none can be reached. Refusals (TLS, SASL, permissions) end it at
// once.
func lookup(ctx context.Context, cl *kgo.Client, topic string) error {
	wait := minRetry
	for {
		_, err := describe(ctx, cl, topic)
		if !unreachable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: no broker reachable: %w (%w)", ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetry)
	}
}

// unreachable reports whether err is a network failure that a broker
// starting or coming back ends: refused or reset connections, hosts or
// networks unreachable, timeouts.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// describe returns topic's metadata (partitions with their leaders),
// or an error wrapping kerr.UnknownTopicOrPartition when it does not
// exist. It asks a broker every time: kadm's metadata calls may answer
// from the client's cache, which does not see a topic just created.
func describe(ctx context.Context, cl *kgo.Client, topic string) (kmsg.MetadataResponseTopic, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.UnknownTopicOrPartition
		for _, t := range resp.Topics {
			if t.Topic != nil && *t.Topic == topic {
				if err = kerr.ErrorForCode(t.ErrorCode); err == nil {
					return t, nil
				}
				break
			}
		}
	}
	if isAuthErr(err) {
		return kmsg.MetadataResponseTopic{}, fmt.Errorf("kafka: looking up topic %q: %w: %w", topic, ErrNotAuthorized, err)
	}
	return kmsg.MetadataResponseTopic{}, fmt.Errorf("kafka: looking up topic %q: %w", topic, err)
}

// waitLeaders waits until every partition of topic has a leader.
func waitLeaders(ctx context.Context, cl *kgo.Client, topic string) error {
	t := time.NewTicker(leaderPoll)
	defer t.Stop()
	for {
		td, err := describe(ctx, cl, topic)
		// A topic just created may be unknown to the broker answering
		// for a moment: wait for it as for its leaders.
		if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return err
		}
		ready := err == nil && len(td.Partitions) > 0
		for _, p := range td.Partitions {
			if p.Leader < 0 || p.ErrorCode != 0 {
				ready = false
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("partitions without a leader")
			}
			return fmt.Errorf("kafka: topic %q not ready: %w (%w)", topic, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// MaxRecordBytes returns the largest record batch topic accepts, in
// bytes: its max.message.bytes, else the brokers' message.max.bytes. A
// producer must not build batches larger than this (franz-go's
// kgo.ProducerBatchMaxBytes, 1 000 012 by default, is its own limit
// and should not exceed it); one record of key and value up to this
// minus RecordOverhead always fits. Consumers need their fetch limits
// (kgo.FetchMaxPartitionBytes, kgo.BrokerMaxReadBytes) at least this.
//
// A topic created a moment ago may be unknown to the broker answering
// for a short while: MaxRecordBytes asks again until ctx ends.
func MaxRecordBytes(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	adm := kadm.NewClient(cl)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		rc, err := describeTopic(ctx, adm, topic)
		if err == nil {
			if n, ok, err := configInt(rc, topicMaxBytes); ok || err != nil {
				return n, err
			}
			return brokerMaxRecordBytes(ctx, adm)
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return 0, maxRecordErr(topic, err)
		}
		select {
		case <-ctx.Done():
			return 0, maxRecordErr(topic, err)
		case <-time.After(wait):
		}
	}
}

// describeTopic returns topic's configuration.
func describeTopic(ctx context.Context, adm *kadm.Client, topic string) (kadm.ResourceConfig, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return kadm.ResourceConfig{}, err
	}
	rc, err := rcs.On(topic, nil)
	if err == nil && rc.Err != nil {
		err = fmt.Errorf("%w%s", rc.Err, detail(rc.ErrMessage))
	}
	return rc, err
}

func maxRecordErr(topic string, err error) error {
	if isAuthErr(err) {
		return fmt.Errorf("kafka: reading the configuration of topic %q: %w: %w", topic, ErrNotAuthorized, err)
	}
	return fmt.Errorf("kafka: reading the configuration of topic %q: %w", topic, err)
}

func brokerMaxRecordBytes(ctx context.Context, adm *kadm.Client) (int, error) {
	brokers, err := adm.ListBrokers(ctx)
	if err == nil && len(brokers) == 0 {
		err = errors.New("no broker listed")
	}
	var rcs kadm.ResourceConfigs
	if err == nil {
		rcs, err = adm.DescribeBrokerConfigs(ctx, brokers[0].NodeID)
	}
	if err == nil && len(rcs) > 0 {
		if rcs[0].Err != nil {
			err = rcs[0].Err
		} else if n, ok, cerr := configInt(rcs[0], brokerMaxBytes); ok || cerr != nil {
			return n, cerr
		}
	}
	if err == nil {
		err = errors.New("not in the answer")
	}
	if isAuthErr(err) {
		err = fmt.Errorf("%w: %w", ErrNotAuthorized, err)
	}
	return 0, fmt.Errorf("kafka: reading the brokers' %s: %w", brokerMaxBytes, err)
}

// configInt returns the value of key in rc as a positive int, and
// whether rc has it.
func configInt(rc kadm.ResourceConfig, key string) (int, bool, error) {
	for _, c := range rc.Configs {
		if c.Key != key || c.Value == nil {
			continue
		}
		n, err := strconv.Atoi(*c.Value)
		if err != nil || n <= 0 {
			return 0, true, fmt.Errorf("kafka: %s of %s is %q, not a positive number", key, rc.Name, *c.Value)
		}
		return n, true, nil
	}
	return 0, false, nil
}

func isAuthErr(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// detail is the broker's explanation of an error, if it sent one.
func detail(msg string) string {
	if msg == "" {
		return ""
	}
	return ": " + msg
}

// CreatedMaxMessageBytes is the max.message.bytes of a topic EnsureTopic
// creates: a record holds one frame of up to the collector's default
// 16 MiB limit with its key and hello, where Kafka's own default (about
// 1 MB) would refuse the agents' default 1 MiB batches.
const CreatedMaxMessageBytes = 17 << 20
