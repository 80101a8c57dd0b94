package checkpoint

import (
	"fmt"
	"maps"
)

// Chain is one partition's set of participants while it is being built: the
// parts declare themselves once, under the name that keys their state in
// every checkpoint, and the chain hands them what it knows of the partition
// (its Storage, the partition, how many checkpoints the Store keeps), so
// that a sink's journal and its pruning agree with the Store without the
// caller repeating them. kafkasource.Chains builds one per assigned
// partition; a Coordinator attaches it with
//
//	task, err := coord.Attach(ctx, c.Partition(), c.Participants())
//
// A sink's constructor that takes a Chain (chsink.Open, windowsink.Open)
// registers the sink itself and returns it: the returned value is the
// handle the chain's Process uses. A participant built otherwise (dedup, a
// window.Operator) is registered with Add.
//
// A Chain is used by the goroutine that builds the chain; it is not safe
// for concurrent use.
type Chain struct {
	store        *Store
	p            TopicPartition
	participants map[string]Participant
}

// NewChain returns an empty chain for partition p whose checkpoints store
// keeps. store must be the Store of the Coordinator that attaches the chain.
func NewChain(store *Store, p TopicPartition) (*Chain, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: NewChain: nil Store: pass the Store of the chain's Coordinator", ErrInvalidOptions)
	}
	if _, err := store.dir(p); err != nil {
		return nil, fmt.Errorf("%w: NewChain: %w", ErrInvalidOptions, err)
	}
	return &Chain{store: store, p: p, participants: map[string]Participant{}}, nil
}

// Add registers participant under name, the key of its state in every
// checkpoint: keep it stable across versions of the program. An empty name,
// a name already registered or a nil participant is refused with an error
// wrapping ErrInvalidOptions; the chain is then unchanged.
func (c *Chain) Add(name string, participant Participant) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: Chain.Add: empty participant name: give each participant a stable name, the key of its state", ErrInvalidOptions)
	case participant == nil:
		return fmt.Errorf("%w: Chain.Add(%q): nil participant", ErrInvalidOptions, name)
	}
	if prev, taken := c.participants[name]; taken {
		return fmt.Errorf("%w: Chain.Add(%q): the name is taken by a %T of partition %s: each participant needs a name of its own",
			ErrInvalidOptions, name, prev, c.p)
	}
	c.participants[name] = participant
	return nil
}

// Partition returns the partition the chain processes.
func (c *Chain) Partition() TopicPartition { return c.p }

// Storage returns the Storage of the chain's Store: where a sink keeps its
// journal beside the checkpoints.
func (c *Chain) Storage() Storage { return c.store.storage }

// Keep returns how many completed checkpoints the chain's Store keeps per
// partition (StoreOptions.Keep, defaults applied): a participant that
// prunes its own records (a sink's journal) keeps what restoring any of
// them needs.
func (c *Chain) Keep() int { return c.store.keep }

// Participants returns a copy of the registered participants by name, as
// Coordinator.Attach takes them.
func (c *Chain) Participants() map[string]Participant { return maps.Clone(c.participants) }
