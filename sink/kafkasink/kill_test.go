package kafkasink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

const (
	partitions = 2
	// perRound unique ids per partition are added before each round, each
	// twice (a redelivery the dedup drops).
	perRound = 150
)

// names are a run's topics and transactional id prefix, each its own
// (testkit.Name), so that a test runs again (-count=2) on a shared broker.
type names struct{ In, Out, TxID string }

// newNames returns names of t's own and creates the topics.
func newNames(t *testing.T, brokers []string) names {
	t.Helper()
	n := names{In: testkit.Name(t, "in"), Out: testkit.Name(t, "out"), TxID: testkit.Name(t, "tx")}
	testkit.CreateTopic(t, brokers, n.In, partitions)
	testkit.CreateTopic(t, brokers, n.Out, partitions)
	return n
}

// The kill schedule: where each child dies. "process" dies after handing
// that many new records to the sink (records written, transaction open);
// "snapshot" right after the sink's Nth pre-commit returned (before the
// checkpoint is saved); "completed" on the Nth checkpoint completion,
// before the sink commits (the checkpoint is durable, its transaction
// open); "" is a SIGKILL from the parent at a random moment.
var schedule = []string{"process:120", "snapshot:2", "completed:2", "", "completed:1", "snapshot:1", "", "process:260"}

func selfKill() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not delivered synchronously; never go on
}

// killingSink kills the process at one point of the checkpoint protocol,
// counting only checkpoints whose transaction holds records.
type killingSink struct {
	*kafkasink.Sink
	at       string
	n        int
	calls    *atomic.Int64
	prepared *atomic.Bool // the last snapshot prepared a transaction with records
}

func (k killingSink) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	b, err := k.Sink.Snapshot(ctx, id)
	k.snapshotted(b, err)
	return b, err
}

// SnapshotAsync is the sink's, with the kill point after its pending part
// (the pre-commit, in the coordinator's goroutine) returned.
func (k killingSink) SnapshotAsync(ctx context.Context, id checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	pend, err := k.Sink.SnapshotAsync(ctx, id)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) ([]byte, error) {
		b, err := pend(ctx)
		k.snapshotted(b, err)
		return b, err
	}, nil
}

func (k killingSink) snapshotted(b []byte, err error) {
	k.prepared.Store(err == nil && bytes.Contains(b, []byte(`"txn"`)))
	if k.at == "snapshot" && k.prepared.Load() {
		if k.calls.Add(1) == int64(k.n) {
			selfKill()
		}
	}
}

func (k killingSink) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	if k.at == "completed" && k.prepared.Load() {
		if k.calls.Add(1) == int64(k.n) {
			selfKill()
		}
	}
	return k.Sink.CheckpointCompleted(ctx, id)
}

// decliner declines every fourth barrier, as a sink in the middle of a
// batch does. Registered under a name that sorts after the Kafka sink's, it
// declines after the sink took its barrier's part: the coordinator lets
// that part go, and the sink puts its records back for the next barrier.
type decliner struct{ n *int }

func (d decliner) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if *d.n++; *d.n%4 == 0 {
		return nil, fmt.Errorf("busy: %w", checkpoint.ErrDeclined)
	}
	return []byte{}, nil
}
func (decliner) Restore(context.Context, []byte) error                    { return nil }
func (decliner) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// pipeline builds the test's pipeline, kafkasource -> dedup -> kafkasink,
// with a participant that declines some barriers (decliner), checkpointing
// to dir every 30 ms; at and n say where it kills its own
// process (see schedule), "" never.
func pipeline(t *testing.T, brokers []string, nm names, dir, group, at string, n int) (*checkpoint.Store, func(context.Context) error) {
	t.Helper()
	storage, err := checkpoint.NewFSStorage(filepath.Join(dir, "store"))
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 30 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { coord.Close() })
	var calls, written atomic.Int64 // shared by the chains: the kill counts are per process
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return nil, err
		}
		s, err := kafkasink.New(brokers, nm.TxID, p, kafkasink.Options{BatchSize: 50})
		if err != nil {
			return nil, err
		}
		var key []byte
		return &kafkasource.Processor{
			Participants: map[string]checkpoint.Participant{
				"dedup": d, "out": killingSink{Sink: s, at: at, n: n, calls: &calls, prepared: new(atomic.Bool)},
				"zz-decliner": decliner{new(int)},
			},
			Process: func(ctx context.Context, m kafka.Message) error {
				key = dedup.AppendKey(key[:0], string(m.Value))
				first, err := d.Observe(key, m.Time)
				if err != nil || !first {
					return err
				}
				if err := s.Add(ctx, nm.Out, m.Partition, kafkatxn.Record{Key: m.Value, Value: m.Value}); err != nil {
					return err
				}
				w := written.Add(1)
				if w == int64(n) && at == "process" {
					selfKill()
				}
				if w%10 == 0 {
					time.Sleep(2 * time.Millisecond) // slow enough for transactions to span checkpoints
				}
				return nil
			},
		}, nil
	}
	src, err := kafkasource.New(testGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{nm.In}}),
		coord, newProc, kafkasource.Options{SessionTimeout: 6 * time.Second, RebalanceTimeout: 2 * time.Second,
			HeartbeatInterval: 100 * time.Millisecond, MaxWait: 100 * time.Millisecond,
			// A short MaxBackoff: the decliner fails a chain every fourth
			// barrier, and on Apache Kafka, where a transaction takes tens
			// of milliseconds more than on kfake (CONCURRENT_TRANSACTIONS
			// while the last one's markers are written), a chain never ran
			// ResetAfter between two failures: the backoff grew to the
			// default minute and the final child did not finish in 3
			// minutes.
			Restart: kafkasource.Restart{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})
	require.NoError(t, err)
	return store, src.Run
}

// waitFinished waits for a checkpoint at the end of the input (total
// records per partition), then for a later one, whose barrier comes after
// the completion (and so the commit) of the first; then it stops the
// pipeline.
func waitFinished(t *testing.T, store *checkpoint.Store, in string, total int64, done <-chan error, cancel func()) {
	t.Helper()
	ctx := context.Background()
	firstAtEnd := make([]checkpoint.ID, partitions)
	// Generous: on a loaded 2-core machine a broker restart can hold a
	// chain back for tens of seconds (session timeouts, rejoin).
	deadline := time.Now().Add(3 * time.Minute)
	stand := make([]string, partitions)
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			t.Fatal("Run returned early")
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the pipeline did not finish: want %d records per partition, latest checkpoints %v", total, stand)
		all := true
		for p := range partitions {
			cp, err := store.Latest(ctx, checkpoint.TopicPartition{Topic: in, Partition: p})
			if err != nil { // none yet
				stand[p] = fmt.Sprintf("p%d: %v", p, err)
				all = false
				continue
			}
			stand[p] = fmt.Sprintf("p%d: id %d next offset %d", p, cp.ID, cp.NextOffset)
			if cp.NextOffset < total {
				all = false
				continue
			}
			if firstAtEnd[p] == 0 {
				firstAtEnd[p] = cp.ID
			}
			all = all && cp.ID > firstAtEnd[p]
		}
		if all {
			cancel()
			require.NoError(t, <-done)
			return
		}
	}
}

// produceRound adds perRound new ids to each partition of in, each twice.
func produceRound(t *testing.T, brokers []string, in string, round int) {
	t.Helper()
	ctx := context.Background()
	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer p.Close()
	for part := range partitions {
		var recs []kafkatxn.Record
		for i := range perRound {
			recs = append(recs, kafkatxn.Record{Value: fmt.Appendf(nil, "p%d-r%d-%d", part, round, i)})
		}
		// The second copy of each id arrives after the first copies of
		// later ones, as a redelivery does.
		recs = append(recs, recs...)
		_, err := p.Produce(ctx, in, part, recs...)
		require.NoError(t, err)
	}
}

// TestKill9 is issue 16's done-when test: a Kafka-to-Kafka pipeline
// (kafkasource -> dedup -> kafkasink) runs in child processes that die by
// SIGKILL, each at a planned point (records written in an open
// transaction; the sink's pre-commit done but the checkpoint not saved;
// the checkpoint saved but its transaction not committed) or at a random
// moment, with new input before every round; a last child finishes. A
// read_committed reader (kafkatxn.Reader) then reads every id of the input
// exactly once from the output, and nothing else.
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	rounds := len(schedule)
	total := int64(rounds * perRound * 2)
	// What round the child runs: the parent writes it to cfg.Dir before
	// each start.
	type roundFile struct{ Mode, KillAt, Group string } // Mode "run" or "finish"
	setRound := func(dir string, r roundFile) {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "round.json"), b, 0o644))
	}
	type config struct {
		Brokers []string
		Names   names
		Dir     string
	}
	cfg := testkit.Setup(t, "kill9", func() config {
		brokers := testkit.Kafka(t)
		c := config{Brokers: brokers, Names: newNames(t, brokers), Dir: t.TempDir()}
		setRound(c.Dir, roundFile{Mode: "run", KillAt: schedule[0], Group: testkit.Name(t, "kill0")})
		produceRound(t, brokers, c.Names.In, 0)
		return c
	})
	// The child: the pipeline, killed (by itself at a planned point, or by
	// the test), or, in the last round, run until it finished the input.
	child := testkit.Func(t, "pipeline", func(ctx context.Context) error {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, "round.json"))
		require.NoError(t, err)
		var r roundFile
		require.NoError(t, json.Unmarshal(b, &r))
		at, nstr, _ := strings.Cut(r.KillAt, ":")
		n, _ := strconv.Atoi(nstr)
		store, run := pipeline(t, cfg.Brokers, cfg.Names, cfg.Dir, r.Group, at, n)
		if r.Mode != "finish" {
			return run(ctx) // until killed
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- run(ctx) }()
		waitFinished(t, store, cfg.Names.In, total, done, cancel)
		return nil
	})

	brokers := cfg.Brokers
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	selfKilled := 0
	for round, killAt := range schedule {
		if round > 0 {
			setRound(cfg.Dir, roundFile{Mode: "run", KillAt: killAt, Group: testkit.Name(t, fmt.Sprintf("kill%d", round))})
			produceRound(t, brokers, cfg.Names.In, round)
			child.Start()
		}
		limit := 5 * time.Second // a planned kill point that never came
		if killAt == "" {
			limit = time.Duration(200+rng.IntN(600)) * time.Millisecond
		}
		select {
		case <-child.Exited():
			err := child.Err()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "round %d: the child exited by itself", round)
			ws, ok := ee.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "round %d: the child failed: %v", round, err)
			selfKilled++
		case <-time.After(limit):
			child.Kill()
		}
		t.Logf("round %d: killed at %q", round, killAt)
	}
	assert.GreaterOrEqual(t, selfKilled, 4, "most planned kill points must be reached")
	setRound(cfg.Dir, roundFile{Mode: "finish", Group: testkit.Name(t, "killfinal")})
	child.Start()
	require.NoError(t, child.Wait(5*time.Minute), "the final child finishes")

	want := map[string]bool{}
	for round := range rounds {
		for part := range partitions {
			for i := range perRound {
				want[fmt.Sprintf("p%d-r%d-%d", part, round, i)] = true
			}
		}
	}
	got := readCommitted(t, brokers, cfg.Names.Out, partitions)
	dups, missing := 0, 0
	for v := range want {
		switch n := got[v]; {
		case n == 0:
			missing++
		case n > 1:
			dups++
		}
	}
	for v := range got {
		assert.True(t, want[v], "unexpected record %s", v)
	}
	assert.Zero(t, missing, "records lost")
	assert.Zero(t, dups, "records read more than once")
	t.Logf("%d records read once each after %d kills (%d at planned points)", len(got), rounds, selfKilled)
}

// readWant returns the ids of the first rounds of produceRound.
func readWant(rounds int) map[string]bool {
	want := map[string]bool{}
	for round := range rounds {
		for part := range partitions {
			for i := range perRound {
				want[fmt.Sprintf("p%d-r%d-%d", part, round, i)] = true
			}
		}
	}
	return want
}

// TestBrokerRestart kills the Apache Kafka broker with SIGKILL and starts
// it again on its log while the pipeline runs (in this process)
// with transactions open: the sink's producer retries its batches and
// commits, the source rides out the outage, and a read_committed reader
// reads every id exactly once. (It stayed on kfake after a run on Apache
// Kafka took no checkpoint in 5 minutes after a restart, at load 40 to
// 60. That did not come back in runs here with SIGKILL, restarts of 15 to
// 25 s at load 40, nor in TestRollingRestart; the run may have
// predated pipeline's capped restart backoff, which made TestKill9 stall
// the same way. waitFinished dereferenced a missing checkpoint when the
// broker died before the first one; it waits for it now.)
func TestBrokerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker process")
	}
	srv := testkit.StartApacheKafka(t)
	brokers := srv.Brokers()
	nm := newNames(t, brokers)
	const rounds = 4
	for round := range rounds {
		produceRound(t, brokers, nm.In, round)
	}
	store, run := pipeline(t, brokers, nm, t.TempDir(), "restart", "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	time.Sleep(300 * time.Millisecond) // transactions open
	srv.Kill()
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	srv.Start()
	t.Logf("broker back after %v", time.Since(t0).Round(time.Millisecond))
	waitFinished(t, store, nm.In, rounds*perRound*2, done, cancel)
	want := readWant(rounds)
	got := readCommitted(t, brokers, nm.Out, partitions)
	for v := range want {
		assert.Equal(t, 1, got[v], "record %s", v)
	}
	assert.Len(t, got, len(want))
}
