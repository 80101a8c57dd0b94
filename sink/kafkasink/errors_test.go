package kafkasink_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
)

// TestErrorRetryable pins which failures kafkasource restarts a chain
// after: a restore that ran out of time while the coordinator answered
// CONCURRENT_TRANSACTIONS (a broker restarting) must not end Run, while
// a restore that found its transaction aborted, or a fenced producer,
// must.
func TestErrorRetryable(t *testing.T) {
	timedOut := fmt.Errorf("kafkatxn: look up transaction outcome: %w (last error: %w)",
		context.DeadlineExceeded, kafka.ConcurrentTransactions)
	aborted := fmt.Errorf("%w: kafkatxn: transaction t (producer 1, epoch 0): %w", checkpoint.ErrOutputLost, kafkatxn.ErrAborted)
	fenced := fmt.Errorf("kafkatxn: commit transaction: %w", kafkatxn.ErrFenced)
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"restore timed out", &kafkasink.Error{Op: "restore", Err: timedOut}, true},
		{"restore found the transaction aborted", &kafkasink.Error{Op: "restore", Err: aborted}, false},
		{"restore fenced", &kafkasink.Error{Op: "restore", Err: fenced}, false},
		{"commit of a transaction the broker aborted", &kafkasink.Error{Op: "commit", Err: aborted}, true},
		{"send fenced", &kafkasink.Error{Op: "send", Err: fenced}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.give.(*kafkasink.Error).Retryable())
			assert.Equal(t, tt.want, kafkasource.IsRetryable(fmt.Errorf("kafkasource: p/0: %w", tt.give)))
		})
	}
}
