package kafkasource_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("KAFKASOURCE_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

var fastGroup = kafkasource.Options{
	SessionTimeout:    6 * time.Second,
	RebalanceTimeout:  2 * time.Second,
	HeartbeatInterval: 100 * time.Millisecond,
	MaxWait:           100 * time.Millisecond,
}

type instance struct {
	store  *checkpoint.Store
	coord  *checkpoint.Coordinator
	src    *kafkasource.Source
	cs     *counters
	cancel context.CancelFunc
	done   chan error
}

func startInstance(t *testing.T, brokers []string, group, topic, dir string, interval time.Duration) *instance {
	t.Helper()
	storage, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: interval, Logger: testLogger(t)})
	require.NoError(t, err)
	in := &instance{store: store, coord: coord, cs: &counters{}, done: make(chan error, 1)}
	opts := fastGroup
	opts.Logger = testLogger(t)
	in.src, err = kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}}),
		coord, in.cs.newProcessor, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- in.src.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

func (in *instance) stop(t *testing.T) error {
	in.cancel()
	select {
	case err, ok := <-in.done:
		if ok {
			close(in.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
		return nil
	}
}

// latest returns the newest checkpoint of every partition (nil if none).
func latest(t testing.TB, store *checkpoint.Store, topic string, partitions int) []*checkpoint.Checkpoint {
	t.Helper()
	out := make([]*checkpoint.Checkpoint, partitions)
	for p := range partitions {
		cp, err := store.Latest(context.Background(), checkpoint.TopicPartition{Topic: topic, Partition: p})
		if errors.Is(err, checkpoint.ErrNotFound) {
			continue
		}
		require.NoError(t, err)
		out[p] = cp
	}
	return out
}

// requireConsistent checks that a checkpoint's counter state matches its
// offset exactly: every record before NextOffset counted once.
func requireConsistent(t testing.TB, cp *checkpoint.Checkpoint) {
	t.Helper()
	count, sum := decodeCounter(t, cp.States["counter"])
	require.Equal(t, cp.NextOffset, count, "count of %s checkpoint %d", cp.Partition, cp.ID)
	require.Equal(t, sumTo(cp.NextOffset), sum, "sum of %s checkpoint %d", cp.Partition, cp.ID)
}

// waitCheckpointed triggers checkpoints until every partition's newest
// checkpoint is at offset want.
func waitCheckpointed(t *testing.T, in *instance, topic string, partitions int, want int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = in.src.Checkpoint(ctx)
		for _, cp := range latest(t, in.store, topic, partitions) {
			if cp == nil || cp.NextOffset != want {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond)
}

func TestSourceCheckpointThenSnapshotFailure(t *testing.T) {
	const (
		topic      = "events"
		partitions = 3
		n          = 500
	)
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	dir := filepath.Join(t.TempDir(), "cp")
	in := startInstance(t, brokers, "g1", topic, dir, -1)

	waitCheckpointed(t, in, topic, partitions, n)
	for _, cp := range latest(t, in.store, topic, partitions) {
		requireConsistent(t, cp)
	}
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual(map[int]int64{0: n, 1: n, 2: n}, committed(t, brokers, "g1", topic, partitions))
	}, 10*time.Second, 50*time.Millisecond, "offsets committed after the checkpoint")

	// A snapshot failure: the checkpoint does not complete, no offset moves,
	// the error reaches the caller of Checkpoint and of Run.
	ids := map[int][]checkpoint.ID{}
	for p := range partitions {
		var err error
		ids[p], err = in.store.List(context.Background(), checkpoint.TopicPartition{Topic: topic, Partition: p})
		require.NoError(t, err)
	}
	in.cs.failSnap.Store(true)
	produce(t, brokers, topic, partitions, n, 100)
	time.Sleep(300 * time.Millisecond) // let the chains process past the checkpoint
	err := in.src.Checkpoint(context.Background())
	var cerr *checkpoint.Error
	require.ErrorAs(t, err, &cerr)
	assert.Equal(t, "snapshot", cerr.Op)
	assert.Equal(t, "counter", cerr.Participant)

	runErr := in.stop(t)
	require.ErrorAs(t, runErr, &cerr, "Run returns the failed checkpoint")
	for p := range partitions {
		got, err := in.store.List(context.Background(), checkpoint.TopicPartition{Topic: topic, Partition: p})
		require.NoError(t, err)
		assert.Equal(t, ids[p], got, "no checkpoint written for partition %d", p)
	}
	assert.Equal(t, map[int]int64{0: n, 1: n, 2: n}, committed(t, brokers, "g1", topic, partitions),
		"no offset moved")

	// A restart restores from the last completed checkpoint and catches up.
	in2 := startInstance(t, brokers, "g1", topic, dir, -1)
	waitCheckpointed(t, in2, topic, partitions, n+100)
	for _, cp := range latest(t, in2.store, topic, partitions) {
		requireConsistent(t, cp)
	}
}

func TestSourceTwoInstancesSplitAndTakeOver(t *testing.T) {
	const (
		topic      = "split"
		partitions = 4
		n          = 300
	)
	brokers := testkit.Kafka(t)
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	dir := filepath.Join(t.TempDir(), "shared")
	a := startInstance(t, brokers, "g2", topic, dir, 50*time.Millisecond)
	b := startInstance(t, brokers, "g2", topic, dir, 50*time.Millisecond)

	// Both instances end up owning partitions and checkpointing them.
	require.Eventually(t, func() bool {
		members := map[string]bool{}
		for _, cp := range latest(t, a.store, topic, partitions) {
			if cp == nil || cp.NextOffset != n {
				return false
			}
			members[cp.Member] = true
		}
		return len(members) == 2
	}, 60*time.Second, 50*time.Millisecond, "two instances split the partitions")
	for _, cp := range latest(t, a.store, topic, partitions) {
		requireConsistent(t, cp)
	}

	require.NoError(t, b.stop(t))
	produce(t, brokers, topic, partitions, n, 200)
	waitCheckpointed(t, a, topic, partitions, n+200)
	members := map[string]bool{}
	for _, cp := range latest(t, a.store, topic, partitions) {
		requireConsistent(t, cp)
		members[cp.Member] = true
	}
	assert.Len(t, members, 1, "the remaining instance owns every partition")
}
