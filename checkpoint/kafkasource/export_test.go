package kafkasource

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
)

// RetryableGroupError exposes the consumer-group error classifier to tests.
var RetryableGroupError = retryableGroupError

// GenerationCurrent exposes the generation check before a restart to tests.
func (s *Source) GenerationCurrent(ctx context.Context, gen *kafka.Generation) (bool, error) {
	return s.generationCurrent(ctx, gen)
}

// SetInstanceWait shortens how long Run retries a join refused with
// UNRELEASED_INSTANCE_ID.
func (s *Source) SetInstanceWait(d time.Duration) { s.instanceWait = d }
