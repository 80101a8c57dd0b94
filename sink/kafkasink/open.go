package kafkasink

import (
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Open builds the Sink of chain c (New over the chain's partition) and
// registers it in the chain under name, the key of its state in every
// checkpoint: keep it stable across versions of the program, and let it
// sort after the participants that may decline a barrier (participants
// snapshot in name order), so that a declined checkpoint does not cost a
// restart (see the package doc). The returned Sink is the handle the
// chain's Process writes to; the chain's owner (a kafkasource Source)
// starts, restores and closes it. It is how a chain gets a Kafka sink; New
// is for a sink outside a chain.
//
// A nil chain is refused with ErrInvalidOptions; an empty name, or one
// already registered in the chain, with an error wrapping
// checkpoint.ErrInvalidOptions. Nothing is left open then.
func Open(c *checkpoint.Chain, name string, brokers []string, prefix string, opts Options) (*Sink, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil chain: pass the checkpoint.Chain the sink belongs to", ErrInvalidOptions)
	}
	s, err := New(brokers, prefix, c.Partition(), opts)
	if err != nil {
		return nil, err
	}
	if err := c.Add(name, s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}
