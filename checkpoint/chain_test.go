package checkpoint_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

var chainSrc = checkpoint.TopicPartition{Topic: "events", Partition: 3}

func TestChainAddRefusesBadNames(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	c, err := checkpoint.NewChain(store, chainSrc)
	require.NoError(t, err)
	first := &counter{}
	require.NoError(t, c.Add("dedup", first))

	tests := []struct {
		name string
		give string
		p    checkpoint.Participant
	}{
		{name: "duplicate", give: "dedup", p: &counter{}},
		{name: "empty", give: "", p: &counter{}},
		{name: "nil participant", give: "other", p: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Add(tt.give, tt.p)
			require.ErrorIs(t, err, checkpoint.ErrInvalidOptions)
			assert.Equal(t, map[string]checkpoint.Participant{"dedup": first}, c.Participants(), "the chain is unchanged")
		})
	}
}

// TestChainHandsTheStore checks what a chain gives its participants: the
// Store's Storage and Keep (defaults applied) and the partition.
func TestChainHandsTheStore(t *testing.T) {
	tests := []struct {
		give int
		want int
	}{
		{give: 0, want: checkpoint.DefaultKeep},
		{give: 1, want: 1},
		{give: 7, want: 7},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.give), func(t *testing.T) {
			storage := checkpoint.NewMemoryStorage()
			store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: tt.give})
			require.NoError(t, err)
			c, err := checkpoint.NewChain(store, chainSrc)
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.Keep())
			assert.Same(t, storage, c.Storage())
			assert.Equal(t, chainSrc, c.Partition())
		})
	}
}

func TestNewChainRefusesBadArguments(t *testing.T) {
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	_, err = checkpoint.NewChain(nil, chainSrc)
	assert.ErrorIs(t, err, checkpoint.ErrInvalidOptions)
	_, err = checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "a/../b", Partition: 0})
	assert.ErrorIs(t, err, checkpoint.ErrInvalidOptions)
	_, err = checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "events", Partition: -1})
	assert.ErrorIs(t, err, checkpoint.ErrInvalidOptions)
}

// A chain declares each participant once; the Coordinator attaches what it
// holds, and a restart that declares the same names restores them.
func ExampleChain() {
	ctx := context.Background()
	store, _ := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	defer coord.Close()
	p := checkpoint.TopicPartition{Topic: "events", Partition: 0}

	build := func() (*checkpoint.Chain, *sum) {
		c, _ := checkpoint.NewChain(store, p)
		s := &sum{}
		if err := c.Add("sum", s); err != nil {
			fmt.Println(err)
		}
		return c, s
	}
	c, s := build()
	fmt.Println("a second \"sum\":", c.Add("sum", &sum{}))
	task, _ := coord.Attach(ctx, c.Partition(), c.Participants())
	s.total = 12
	_ = task.Checkpoint(ctx, nil, 2, checkpoint.Meta{}, nil)
	task.Detach()

	c2, s2 := build()
	task2, _ := coord.Attach(ctx, c2.Partition(), c2.Participants())
	defer task2.Detach()
	fmt.Println("restored sum", s2.total, "keep", c2.Keep())
	// Output:
	// a second "sum": checkpoint: invalid options: Chain.Add("sum"): the name is taken by a *checkpoint_test.sum of partition events/0: each participant needs a name of its own
	// restored sum 12 keep 3
}
