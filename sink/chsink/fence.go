package chsink

import (
	"context"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

// Fence takes the journal of table (as the journal names it: the
// Options.Database, a dot and the Table.Name) for src over, as a new
// instance taking the partition does: it raises the owner epoch by a
// conditional write, so the Sink that owned it gets sink.ErrFenced at its
// next batch and inserts nothing more. A Sink created after Fence claims
// the journal again and replays its intents with their tokens, as after
// any takeover.
//
// It is for operators that rewrite a partition's checkpoints while no
// processor should run (cmd/exactlyonce rewind): a processor that still
// runs unseen (paused, cut off from its consumer group) cannot insert
// once fenced.
func Fence(ctx context.Context, store checkpoint.Storage, table string, src checkpoint.TopicPartition) error {
	j, err := journal.Open(store, table, src)
	if err != nil {
		return err
	}
	return j.Claim(ctx)
}
