//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Kafka reads /proc and captures on lo: Linux only.
func Kafka(context.Context, KafkaConfig) (KafkaResult, error) {
	return KafkaResult{}, errors.New("bench kafka: Linux only")
}

// KafkaScale reads /proc: Linux only.
func KafkaScale(context.Context, KafkaScaleConfig) (KafkaScaleResult, error) {
	return KafkaScaleResult{}, errors.New("bench kafka-scale: Linux only")
}
