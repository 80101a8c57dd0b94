package kafkasource_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// lifecycled is a participant with the Runner and io.Closer capabilities
// that records what the Source did with it.
type lifecycled struct {
	counter
	runErr     error // returned by Run once started, if set
	runStarted chan struct{}
	runEnded   atomic.Bool
	closes     atomic.Int32
	closedLate atomic.Bool // Close came before Run returned
}

func newLifecycled() *lifecycled { return &lifecycled{runStarted: make(chan struct{})} }

func (l *lifecycled) Run(ctx context.Context) error {
	close(l.runStarted)
	defer l.runEnded.Store(true)
	if l.runErr != nil {
		return l.runErr
	}
	<-ctx.Done()
	return nil
}

func (l *lifecycled) Close() error {
	if !l.runEnded.Load() {
		l.closedLate.Store(true)
	}
	l.closes.Add(1)
	return nil
}

func lifecycleSource(t *testing.T, newProc kafkasource.ProcessorFunc) (*kafkasource.Source, []string, string, *checkpoint.Store) {
	t.Helper()
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "topic")
	testkit.CreateTopic(t, brokers, topic, 1)
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	// One checkpoint first, so a chain has something to restore.
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	opts := fastGroup
	opts.Logger = testLogger(t)
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: testkit.Name(t, "group"), Topics: []string{topic}}),
		coord, newProc, opts)
	require.NoError(t, err)
	return src, brokers, topic, store
}

// TestParticipantLifecycle proves the Source starts a participant's Run
// after the restore, ends and awaits it when the chain ends, and then closes
// the participant exactly once, even when it is registered twice and the
// Processor's own Close closes it too.
func TestParticipantLifecycle(t *testing.T) {
	var (
		mu   sync.Mutex
		part []*lifecycled
	)
	var procCloses atomic.Int32
	src, brokers, topic, store := lifecycleSource(t, func(_ context.Context, _ checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		l := newLifecycled()
		mu.Lock()
		part = append(part, l)
		mu.Unlock()
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"a": l},
			Process:      func(_ context.Context, m kafka.Message) error { return l.add(m) },
			Close:        func() error { procCloses.Add(1); return l.Close() },
		}, nil
	})
	produce(t, brokers, topic, 1, 0, 5)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(part) == 1
	}, time.Minute, 10*time.Millisecond)
	l := part[0]
	select {
	case <-l.runStarted:
	case <-time.After(time.Minute):
		t.Fatal("Run of the participant was not started")
	}
	require.Eventually(t, func() bool { // a checkpoint after the five records
		require.NoError(t, src.Checkpoint(ctx))
		cp := latestOf(t, store, topic, 0)
		return cp != nil && cp.NextOffset == 5
	}, time.Minute, 20*time.Millisecond)
	assert.False(t, l.runEnded.Load(), "Run lasts as long as the chain")
	cancel()
	require.NoError(t, <-done)

	assert.True(t, l.runEnded.Load(), "Run returned before Source.Run returned")
	assert.False(t, l.closedLate.Load(), "Close comes after Run returned")
	assert.Equal(t, int32(1), procCloses.Load())
	assert.Equal(t, int32(2), l.closes.Load(), "Processor.Close closed it, then the Source (Close must be idempotent)")
	assert.Equal(t, int64(5), l.count)
}

// TestParticipantRunErrorFailsChain proves a Run that fails while the chain
// lives stops the chain with that error, which Run returns when the error is
// permanent, and that the participant is closed.
func TestParticipantRunErrorFailsChain(t *testing.T) {
	errFlush := errors.New("flush failed for good")
	var l *lifecycled
	src, _, _, _ := lifecycleSource(t, func(_ context.Context, _ checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		l = newLifecycled()
		l.runErr = errFlush
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"a": l},
			Process:      func(context.Context, kafka.Message) error { return nil },
		}, nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := src.Run(ctx)
	require.ErrorIs(t, err, errFlush)
	assert.Contains(t, err.Error(), `participant "a"`)
	assert.Equal(t, int32(1), l.closes.Load())
}

// TestHalfBuiltChainClosed proves a ProcessorFunc that fails after opening a
// participant gets it closed when it returns what it built with the error.
// The group may hand the partition over more than once before the error
// stops Run (a generation that ends swallows its chain's error), so every
// half-built chain is checked, not only the first.
func TestHalfBuiltChainClosed(t *testing.T) {
	errSecond := errors.New("second sink: table missing")
	var (
		mu    sync.Mutex
		built []*lifecycled
	)
	src, _, _, _ := lifecycleSource(t, func(_ context.Context, _ checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		first := newLifecycled()
		mu.Lock()
		built = append(built, first)
		mu.Unlock()
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{"first": first}}
		return proc, errSecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	require.ErrorIs(t, src.Run(ctx), errSecond)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, built)
	for i, first := range built {
		assert.Equal(t, int32(1), first.closes.Load(), "half-built chain %d", i)
		select {
		case <-first.runStarted:
			t.Fatalf("half-built chain %d: a half-built chain's participant must not run", i)
		default:
		}
	}
}
