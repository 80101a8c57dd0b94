package kafkasink_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// pausingSink stops its own process with SIGSTOP right after its second
// pre-commit that prepared a transaction with records: the pending part
// has returned, the checkpoint is not saved yet.
type pausingSink struct {
	*kafkasink.Sink
	prepared *atomic.Int64 // shared by the chains of the process
}

func (p pausingSink) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	pend, err := p.Sink.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]byte, error) {
		b, err := pend(ctx)
		if err == nil && bytes.Contains(b, []byte(`"txn"`)) && p.prepared.Add(1) == 2 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) // returns after SIGCONT
		}
		return b, err
	}, nil
}

// pausePipeline is the pipeline TestSIGSTOPBetweenPrecommitAndSave runs in
// a child process: kafkasource -> dedup -> kafkasink with a 4 s
// transaction timeout and a session timeout longer than the pause, until
// every record is covered by a checkpoint.
func pausePipeline(t *testing.T, brokers []string, nm names, dir string, total int64) {
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	const interval = 50 * time.Millisecond
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: interval})
	require.NoError(t, err)
	defer coord.Close()
	var prepared atomic.Int64
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		s, err := kafkasink.New(brokers, nm.TxID, p, kafkasink.Options{
			BatchSize: 50, Tx: kafkatxn.TxOptions{TransactionTimeout: expiryTimeout}, CheckpointInterval: interval,
		})
		if err != nil {
			return nil, err
		}
		var key []byte
		written := 0
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{"dedup": d, "out": pausingSink{s, &prepared}},
			Process: func(ctx context.Context, m kafka.Message) error {
				key = dedup.AppendKey(key[:0], string(m.Value))
				first, err := d.Observe(key, m.Time)
				if err != nil || !first {
					return err
				}
				if written++; written%10 == 0 {
					time.Sleep(5 * time.Millisecond) // transactions span several checkpoints
				}
				return s.Add(ctx, nm.Out, m.Partition, kafkatxn.Record{Key: m.Value, Value: m.Value})
			},
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: "pause", Topics: []string{nm.In}}),
		coord, newProc, kafkasource.Options{SessionTimeout: 30 * time.Second, RebalanceTimeout: 2 * time.Second,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond,
			Restart: kafkasource.Restart{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	waitFinished(t, store, nm.In, total, done, cancel)
}

// waitStopped waits until the process is stopped (state T in
// /proc/<pid>/stat), failing if it exits first.
func waitStopped(t *testing.T, p *testkit.Process) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-p.Exited():
			t.Fatalf("the child exited before it paused: %v", p.Err())
		case <-time.After(20 * time.Millisecond):
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID()))
		require.NoError(t, err)
		// pid (comm) state ...: comm may hold spaces, the state follows
		// its last ')'.
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'T' {
			return
		}
		require.True(t, time.Now().Before(deadline), "the child never paused")
	}
}

// waitStable waits until topic's partition has no open transaction: its
// last stable offset (read_committed) reached its high watermark.
func waitStable(t *testing.T, brokers []string, topic string, partition int) {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	end := func(level kafka.IsolationLevel) int64 {
		res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(partition)}}, IsolationLevel: level,
		})
		require.NoError(t, err)
		require.Len(t, res.Topics[topic], 1)
		require.NoError(t, res.Topics[topic][0].Error)
		return res.Topics[topic][0].LastOffset
	}
	deadline := time.Now().Add(2 * time.Minute)
	for end(kafka.ReadCommitted) < end(kafka.ReadUncommitted) {
		require.True(t, time.Now().Before(deadline), "%s/%d: a transaction stayed open", topic, partition)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSIGSTOPBetweenPrecommitAndSave is breach 1 of issue 41 with a paused
// process: a child running kafkasource -> dedup -> kafkasink stops itself
// (SIGSTOP) right after a pre-commit, before the checkpoint's save; the
// parent continues it (SIGCONT) only once the broker aborted the open
// transaction by its 4 s timeout. The checkpoint must not be saved with
// that transaction: the child goes on (its chain restarts and replays)
// and a read_committed reader reads every id once.
func TestSIGSTOPBetweenPrecommitAndSave(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a child process")
	}
	const rounds = 2
	total := int64(rounds * perRound * 2)
	type config struct {
		Brokers []string
		Names   names
		Dir     string
	}
	cfg := testkit.Setup(t, "pause", func() config {
		brokers := expiryBroker(t, nil)
		c := config{Brokers: brokers, Names: newNames(t, brokers), Dir: t.TempDir()}
		for round := range rounds {
			produceRound(t, brokers, c.Names.In, round)
		}
		return c
	})
	brokers := cfg.Brokers
	child := testkit.Func(t, "pipeline", func(context.Context) error {
		pausePipeline(t, cfg.Brokers, cfg.Names, cfg.Dir, total)
		return nil
	})

	waitStopped(t, child)
	paused := time.Now()
	for p := range partitions {
		waitStable(t, brokers, cfg.Names.Out, p) // the broker aborted what was open
	}
	t.Logf("continuing the child after %v paused", time.Since(paused).Round(time.Millisecond))
	child.Continue()
	require.NoError(t, child.Wait(4*time.Minute), "the child finishes after the pause")

	want := readWant(rounds)
	got := readCommitted(t, brokers, cfg.Names.Out, partitions)
	visible, dups := 0, 0
	for v := range want {
		if got[v] > 0 {
			visible++
		}
		if got[v] > 1 {
			dups++
		}
	}
	t.Logf("records visible after the pause: %d of %d, %d more than once", visible, len(want), dups)
	assert.Equal(t, len(want), visible, "records lost")
	assert.Zero(t, dups, "records read more than once")
	assert.Len(t, got, len(want))
}
