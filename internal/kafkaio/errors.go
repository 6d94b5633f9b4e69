package kafkaio

import "errors"

// ErrTopicGone is wrapped by Writer.Run's error when the topic it
// consumes stays unknown to the brokers (deleted, or deleted and
// created again: its offsets and partitions are not the ones the group
// committed).
var ErrTopicGone = errors.New("topic unknown to the brokers")
