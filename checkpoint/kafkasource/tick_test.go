package kafkasource_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/internal/testenv"
)

// TestTickRunsWhileIdleAndStopsRun shows that Tick is called on a partition
// that receives no record at all (a quiet stream still makes progress), that
// it is never called concurrently with Process, and that its error stops Run.
func TestTickRunsWhileIdleAndStopsRun(t *testing.T) {
	brokers := testenv.Kafka(t)
	const topic = "tick"
	testenv.CreateTopic(t, brokers, topic, 1)

	store, err := checkpoint.NewStore(checkpoint.NewMemStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()

	var ticks, inside atomic.Int32
	boom := errors.New("tick failed")
	newProc := func(context.Context, checkpoint.Partition) (*kafkasource.Processor, error) {
		return &kafkasource.Processor{
			Process: func(context.Context, kafka.Message) error { return nil },
			Tick: func(context.Context) error {
				if inside.Add(1) != 1 {
					t.Error("Tick ran concurrently with the chain")
				}
				defer inside.Add(-1)
				if ticks.Add(1) == 3 {
					return boom
				}
				return nil
			},
			TickInterval: 20 * time.Millisecond,
		}, nil
	}
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: "tick", Topics: []string{topic}},
		coord, newProc, fastGroup)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(ctx)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, int32(3), ticks.Load())
}

func TestRetryableGroupError(t *testing.T) {
	tests := []struct {
		give error
		want bool
	}{
		{give: kafka.RebalanceInProgress, want: true},
		{give: fmt.Errorf("sync group: %w", kafka.RebalanceInProgress), want: true},
		{give: kafka.IllegalGeneration, want: true},
		{give: kafka.UnknownMemberId, want: true},
		{give: kafka.GroupCoordinatorNotAvailable, want: true},
		{give: io.EOF, want: true},
		{give: syscall.ECONNREFUSED, want: true},
		{give: kafka.GroupAuthorizationFailed, want: false},
		{give: kafka.InvalidGroupId, want: false},
		{give: errors.New("something else"), want: false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, kafkasource.RetryableGroupError(tt.give), "%v", tt.give)
	}
}
