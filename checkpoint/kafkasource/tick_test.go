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
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestTickRunsWhileIdleAndStopsRun shows that Tick is called on a partition
// that receives no record at all (a quiet stream still makes progress), that
// it is never called concurrently with Process, and that its error stops Run.
func TestTickRunsWhileIdleAndStopsRun(t *testing.T) {
	brokers := testkit.Kafka(t)
	const topic = "tick"
	testkit.CreateTopic(t, brokers, topic, 2)
	produce(t, brokers, topic, 1, 0, 200) // partition 1 stays idle

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()

	var idleTicks atomic.Int32
	boom := errors.New("tick failed")
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		var inside atomic.Int32 // per chain: Tick and Process of one partition
		enter := func(what string) func() {
			if inside.Add(1) != 1 {
				t.Errorf("%s ran concurrently with the chain of %s", what, p)
			}
			return func() { inside.Add(-1) }
		}
		return &kafkasource.Processor{
			Process: func(context.Context, kafka.Message) error {
				defer enter("Process")()
				time.Sleep(100 * time.Microsecond)
				return nil
			},
			Tick: func(context.Context) error {
				defer enter("Tick")()
				if p.Partition == 1 && idleTicks.Add(1) == 3 {
					return boom
				}
				return nil
			},
			TickInterval: 5 * time.Millisecond,
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "tick", Topics: []string{topic}}),
		coord, newProc, fastGroup)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Run(ctx)
	require.ErrorIs(t, err, boom, "the idle partition ticked")
	assert.Equal(t, int32(3), idleTicks.Load())
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

// decliner declines its first barriers, as a sink replaying a journaled batch
// does, then snapshots normally.
type decliner struct{ declines atomic.Int32 }

func (d *decliner) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if d.declines.Add(-1) >= 0 {
		return nil, fmt.Errorf("mid-batch: %w", checkpoint.ErrDeclined)
	}
	return []byte("ok"), nil
}
func (d *decliner) Restore(context.Context, []byte) error                    { return nil }
func (d *decliner) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// TestDeclinedCheckpointKeepsRunning shows that a participant declining a
// barrier skips that checkpoint (nothing written) without stopping Run, and
// that a later barrier completes.
func TestDeclinedCheckpointKeepsRunning(t *testing.T) {
	brokers := testkit.Kafka(t)
	const topic = "decline"
	testkit.CreateTopic(t, brokers, topic, 1)
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()

	d := &decliner{}
	d.declines.Store(2)
	attached := make(chan struct{})
	newProc := func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		defer close(attached)
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"d": d},
			Process:      func(context.Context, kafka.Message) error { return nil },
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "decline", Topics: []string{topic}}),
		coord, newProc, fastGroup)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		assert.NoError(t, <-done)
	}()
	select {
	case <-attached:
	case <-time.After(30 * time.Second):
		t.Fatal("no partition assigned")
	}

	// The first Trigger may come before the chain attached; it then covers
	// no chain and returns nil.
	require.Eventually(t, func() bool { return errors.Is(src.Checkpoint(ctx), checkpoint.ErrDeclined) },
		10*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, src.Checkpoint(ctx), checkpoint.ErrDeclined)
	names, err := storage.List(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, names, "a declined checkpoint writes nothing")
	require.Eventually(t, func() bool { return src.Checkpoint(ctx) == nil }, 10*time.Second, 50*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run stopped: %v", err)
	default:
	}
	cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: topic, Partition: 0})
	require.NoError(t, err)
	assert.Equal(t, []byte("ok"), cp.States["d"])
}
