package kafkasource

import (
	"context"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// BuildChain builds the chain of one partition on c: it registers the
// chain's participants in c (chsink.Open, windowsink.Open and
// kafkasink.Open register the sinks they return; Chain.Add the others) and
// returns the Processor with
// Process (or ProcessBatch), and Tick and the other fields as needed, but
// no Participants: the chain holds them.
//
// When a step fails, return the error (with a nil Processor): the Source
// closes what c holds, so a sink opened before a later step failed is not
// leaked.
type BuildChain func(ctx context.Context, c *checkpoint.Chain) (*Processor, error)

// Chains returns a ProcessorFunc that builds, for every partition the
// Source is assigned, a checkpoint.Chain over store and has build fill it.
// store must be the Store of the Source's Coordinator: the chain hands its
// Storage and Keep to the participants (a sink's journal and pruning), so
// that they agree with the checkpoints without being repeated.
//
// A Processor from build that sets Participants too is refused: register
// each participant once, in the chain.
func Chains(store *checkpoint.Store, build BuildChain) ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*Processor, error) {
		c, err := checkpoint.NewChain(store, p)
		if err != nil {
			return nil, err
		}
		proc, err := build(ctx, c)
		if err != nil || proc == nil {
			// The Source closes what the chain holds; a nil Processor
			// without an error is refused there.
			return &Processor{Participants: c.Participants()}, err
		}
		if len(proc.Participants) > 0 {
			_ = closeParticipants(proc.Participants) // the chain's are closed by the Source
			return &Processor{Participants: c.Participants()}, fmt.Errorf(
				"%w: the BuildChain's Processor has Participants (%d): register them with Chain.Add instead, once", ErrInvalidOptions, len(proc.Participants))
		}
		out := *proc
		out.Participants = c.Participants()
		return &out, nil
	}
}
