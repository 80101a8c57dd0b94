package checkpointtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// declinedFor is how long Checkpoint tries again while a checkpoint is
// declined: a replay after a restart finishes its journaled batches first.
const declinedFor = time.Minute

// Checkpoint calls take (a kafkasource Source's Checkpoint, a Task's) and
// fails the test on its error, except while the error is
// checkpoint.ErrDeclined: a participant declines a barrier it cannot take
// now (chsink inside a journaled batch it replays after a restart), and a
// chain skips it. Checkpoint then tries again every 10 ms for a minute, so
// that a test which wants a checkpoint gets one without treating a decline
// as a failure.
//
//	checkpointtest.Checkpoint(t, src.Checkpoint)
func Checkpoint(t testing.TB, take func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*declinedFor)
	defer cancel()
	deadline := time.Now().Add(declinedFor)
	for {
		err := take(ctx)
		if err == nil {
			return
		}
		if !errors.Is(err, checkpoint.ErrDeclined) || time.Now().After(deadline) {
			t.Fatalf("checkpointtest: Checkpoint: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("checkpointtest: Checkpoint: %v (last: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
