package kafkasource_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
)

var chainsSrc = checkpoint.TopicPartition{Topic: "events", Partition: 1}

// TestChainsHandsTheChain proves the ProcessorFunc of Chains builds a chain
// of the partition over the store, and that the Processor it returns holds
// exactly what the chain registered.
func TestChainsHandsTheChain(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{Keep: 5})
	require.NoError(t, err)
	a, b := newLifecycled(), newLifecycled()
	var got *checkpoint.Chain
	newProc := kafkasource.Chains(store, func(_ context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		got = c
		require.NoError(t, c.Add("a", a))
		require.NoError(t, c.Add("b", b))
		return &kafkasource.Processor{Process: func(context.Context, kafka.Message) error { return nil }}, nil
	})
	proc, err := newProc(t.Context(), chainsSrc)
	require.NoError(t, err)
	assert.Equal(t, map[string]checkpoint.Participant{"a": a, "b": b}, proc.Participants)
	assert.NotNil(t, proc.Process)
	assert.Equal(t, chainsSrc, got.Partition())
	assert.Equal(t, 5, got.Keep())
}

// TestChainsRefusesParticipantsTwice proves a BuildChain whose Processor
// registers participants beside the chain is refused, with what both held
// handed back or closed.
func TestChainsRefusesParticipantsTwice(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	inChain, inMap := newLifecycled(), newLifecycled()
	newProc := kafkasource.Chains(store, func(_ context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		require.NoError(t, c.Add("a", inChain))
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"b": inMap},
			Process:      func(context.Context, kafka.Message) error { return nil },
		}, nil
	})
	proc, err := newProc(t.Context(), chainsSrc)
	require.ErrorIs(t, err, kafkasource.ErrInvalidOptions)
	assert.Equal(t, map[string]checkpoint.Participant{"a": inChain}, proc.Participants, "the Source closes these")
	assert.Equal(t, int32(1), inMap.closes.Load())
}

// TestHalfBuiltChainsClosed proves a BuildChain that fails after
// registering a participant, returning only the error, gets the
// participant closed by the Source (and never run).
func TestHalfBuiltChainsClosed(t *testing.T) {
	errSecond := errors.New("second sink: table missing")
	var (
		mu    sync.Mutex
		built []*lifecycled
	)
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	src, _, _, _ := lifecycleSource(t, kafkasource.Chains(store, func(_ context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		first := newLifecycled()
		mu.Lock()
		built = append(built, first)
		mu.Unlock()
		if err := c.Add("first", first); err != nil {
			return nil, err
		}
		return nil, errSecond
	}))
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
