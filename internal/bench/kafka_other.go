//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// Kafka reads /proc and captures on lo: Linux only.
func Kafka(context.Context, KafkaConfig) (KafkaResult, error) {
	return KafkaResult{}, fmt.Errorf("bench kafka: %w", ErrNotLinux)
}

// KafkaScale reads /proc: Linux only.
func KafkaScale(context.Context, KafkaScaleConfig) (KafkaScaleResult, error) {
	return KafkaScaleResult{}, fmt.Errorf("bench kafka-scale: %w", ErrNotLinux)
}
