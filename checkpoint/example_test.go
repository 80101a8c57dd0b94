package checkpoint_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// sum is a participant: the sum of the values seen.
type sum struct{ total int }

func (s *sum) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	return []byte(strconv.Itoa(s.total)), nil
}

func (s *sum) Restore(_ context.Context, b []byte) (err error) {
	s.total, err = strconv.Atoi(string(b))
	return err
}

func (s *sum) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// A chain checkpoints between records; after a crash a new chain restores
// the state and the offset of the last completed checkpoint and replays.
func Example() {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage() // checkpoint.NewFSStorage(dir) in production
	store, _ := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	defer coord.Close()
	p := checkpoint.TopicPartition{Topic: "events", Partition: 0}
	input := []int{5, 7, 11, 13}

	// First run: process two records, checkpoint, process one more, crash.
	s := &sum{}
	task, _ := coord.Attach(ctx, p, map[string]checkpoint.Participant{"sum": s})
	next := int64(0)
	for _, v := range input[:2] {
		s.total += v
		next++
	}
	_ = task.Checkpoint(ctx, nil, next, checkpoint.Meta{}, nil)
	s.total += input[2] // lost with the crash
	task.Detach()

	// Restart: restore, then read from the checkpoint's offset.
	s2 := &sum{}
	task2, _ := coord.Attach(ctx, p, map[string]checkpoint.Participant{"sum": s2})
	defer task2.Detach()
	cp := task2.Restored()
	fmt.Println("restored checkpoint", cp.ID, "at offset", cp.NextOffset, "sum", s2.total)
	for _, v := range input[cp.NextOffset:] {
		s2.total += v
	}
	fmt.Println("final sum", s2.total)
	// Output:
	// restored checkpoint 1 at offset 2 sum 12
	// final sum 36
}
