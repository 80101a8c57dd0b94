package kafkasink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// expiryTimeout is the transaction timeout of the expiry tests: short, so
// that a test outlives it, and long enough that an unhindered checkpoint on
// a loaded machine finishes well inside it.
const expiryTimeout = 4 * time.Second

// expiryBroker starts an Apache Kafka broker of the test's own that looks
// for timed-out transactions every 200 ms (Kafka's default is every 10 s),
// plus configs.
func expiryBroker(t *testing.T, configs map[string]string) []string {
	t.Helper()
	cfg := map[string]string{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
	for k, v := range configs {
		cfg[k] = v
	}
	return testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{Configs: cfg}).Brokers()
}

// slowPart is an AsyncParticipant whose pending part runs wait first: a
// slow co-participant of the sink (a long ClickHouse insert, an S3 upload).
type slowPart struct{ wait func(ctx context.Context) }

func (s slowPart) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	pend, _ := s.SnapshotAsync(ctx, id)
	return pend(ctx)
}

func (s slowPart) SnapshotAsync(context.Context, checkpoint.ID) (checkpoint.PendingSnapshot, error) {
	return func(ctx context.Context) ([]byte, error) {
		if s.wait != nil && ctx.Err() == nil {
			s.wait(ctx)
		}
		return []byte("slow"), nil
	}, nil
}

func (slowPart) Restore(context.Context, []byte) error                    { return nil }
func (slowPart) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// waitEnd waits until topic's partition 0 ends at offset end or later: a
// transaction marker the broker writes there by itself (an abort by
// timeout) is an event to await, not a time to sleep.
func waitEnd(t *testing.T, brokers []string, topic string, end int64) {
	t.Helper()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := cl.ListOffsets(context.Background(), &kafka.ListOffsetsRequest{
			Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}},
		})
		if err == nil && len(res.Topics[topic]) == 1 && res.Topics[topic][0].LastOffset >= end {
			return
		}
		require.True(t, time.Now().Before(deadline), "partition %s/0 did not reach offset %d: %v", topic, end, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// chainRun is one incarnation of a chain: a kafkasink "out" beside the
// participants of extra, restored by coord, fed input from the restored
// checkpoint's offset (one record an offset), and checkpointed once at the
// end of the input.
func chainRun(ctx context.Context, brokers []string, coord *checkpoint.Coordinator, src checkpoint.TopicPartition,
	topic string, input []string, extra map[string]checkpoint.Participant,
) (err error) {
	s, err := kafkasink.New(brokers, topic, src, kafkasink.Options{
		Tx: kafkatxn.TxOptions{TransactionTimeout: expiryTimeout}, CheckpointInterval: -1,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	parts := map[string]checkpoint.Participant{"out": s}
	for k, v := range extra {
		parts[k] = v
	}
	task, err := coord.Attach(ctx, src, parts)
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer task.Detach()
	next := 0
	if cp := task.Restored(); cp != nil {
		next = int(cp.NextOffset)
	}
	for ; next < len(input); next++ {
		if err := s.Add(ctx, topic, 0, kafkatxn.Record{Value: []byte(input[next])}); err != nil {
			return err
		}
	}
	return task.Checkpoint(ctx, nil, int64(next), checkpoint.Meta{}, nil)
}

// TestSlowCoParticipantOutlivesTransaction is breach 1 of issue 41: the
// sink pre-commits at a barrier, a co-participant's pending part then takes
// longer than the transaction timeout, and the broker aborts the
// transaction. The checkpoint must not be saved with that transaction:
// after a restart every record is visible exactly once and the chain goes
// on.
func TestSlowCoParticipantOutlivesTransaction(t *testing.T) {
	brokers := expiryBroker(t, nil)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { coord.Close() })
	src := checkpoint.TopicPartition{Topic: "in", Partition: 0}

	// Checkpoint 1 covers "a" (offset 0, commit marker at 1).
	require.NoError(t, chainRun(ctx, brokers, coord, src, topic, []string{"a"}, map[string]checkpoint.Participant{"slow": slowPart{}}))
	// Checkpoint 2 would cover "b" and "c" (offsets 2 and 3): the slow
	// part returns only once the broker wrote the abort marker (4).
	input := []string{"a", "b", "c"}
	slow := slowPart{wait: func(context.Context) { waitEnd(t, brokers, topic, 5) }}
	first := chainRun(ctx, brokers, coord, src, topic, input, map[string]checkpoint.Participant{"slow": slow})
	t.Logf("the run whose transaction expired: %v", first)
	// The next incarnation, without the slow part.
	second := chainRun(ctx, brokers, coord, src, topic, input, map[string]checkpoint.Participant{"slow": slowPart{}})

	got := readCommitted(t, brokers, topic, 1)
	visible := 0
	for _, v := range []string{"b", "c"} {
		visible += got[v]
	}
	t.Logf("records of the expired checkpoint visible: %d of 2; output %v", visible, got)
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, got)
	assert.NoError(t, second, "the restart after the expired transaction")
	require.Error(t, first, "the checkpoint of an expired transaction must not complete")
	assert.ErrorIs(t, first, kafkasink.ErrExpired)
	assert.ErrorIs(t, first, checkpoint.ErrExpired)
	assert.NotErrorIs(t, first, kafkatxn.ErrFenced, "no other instance ran")
	assert.True(t, kafkasource.IsRetryable(first), "kafkasource restarts the chain: %v", first)
	ids, err := store.List(ctx, src)
	require.NoError(t, err)
	assert.Equal(t, []checkpoint.ID{2, 1}, ids, "checkpoint 2 is the replay's, saved once")
}

// TestTransactionTimeoutValidated: a TransactionTimeout that cannot work is
// refused with a *TimeoutError naming the setting it conflicts with: by
// New against the checkpoint interval plus the expiry margin, and by the
// first write against the broker's transaction.max.timeout.ms.
func TestTransactionTimeoutValidated(t *testing.T) {
	src := checkpoint.TopicPartition{Topic: "in", Partition: 0}
	tests := []struct {
		name string
		give kafkasink.Options
		want kafkasink.TimeoutError
	}{
		{
			"default interval", kafkasink.Options{Tx: kafkatxn.TxOptions{TransactionTimeout: 12 * time.Second}},
			kafkasink.TimeoutError{TransactionTimeout: 12 * time.Second, Setting: "Options.CheckpointInterval + Options.ExpiryMargin", Limit: 13 * time.Second},
		},
		{
			"interval", kafkasink.Options{CheckpointInterval: 50 * time.Second},
			kafkasink.TimeoutError{TransactionTimeout: time.Minute, Setting: "Options.CheckpointInterval + Options.ExpiryMargin", Limit: 65 * time.Second},
		},
		{
			"margin", kafkasink.Options{CheckpointInterval: 5 * time.Second, ExpiryMargin: 55 * time.Second},
			kafkasink.TimeoutError{TransactionTimeout: time.Minute, Setting: "Options.CheckpointInterval + Options.ExpiryMargin", Limit: time.Minute},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kafkasink.New([]string{"127.0.0.1:1"}, "p", src, tt.give)
			var terr *kafkasink.TimeoutError
			require.ErrorAs(t, err, &terr)
			assert.Equal(t, tt.want, *terr)
			assert.ErrorIs(t, err, kafkasink.ErrInvalidOptions)
			assert.Contains(t, err.Error(), "TransactionTimeout")
			assert.Contains(t, err.Error(), "CheckpointInterval")
		})
	}
	_, err := kafkasink.New([]string{"127.0.0.1:1"}, "p", src, kafkasink.Options{CheckpointInterval: -1, Tx: kafkatxn.TxOptions{TransactionTimeout: time.Second}})
	assert.NoError(t, err, "only triggered checkpoints: nothing to check the timeout against")

	brokers := expiryBroker(t, map[string]string{"transaction.max.timeout.ms": "3000"})
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	s, err := kafkasink.New(brokers, topic, src, kafkasink.Options{Tx: kafkatxn.TxOptions{TransactionTimeout: expiryTimeout}, CheckpointInterval: time.Second, BatchSize: 1})
	require.NoError(t, err)
	defer s.Close()
	err = s.Add(context.Background(), topic, 0, kafkatxn.Record{Value: []byte("a")})
	var terr *kafkasink.TimeoutError
	require.ErrorAs(t, err, &terr)
	assert.Equal(t, kafkasink.TimeoutError{TransactionTimeout: expiryTimeout, Setting: "transaction.max.timeout.ms", Limit: 3 * time.Second}, *terr)
	assert.Contains(t, err.Error(), "TransactionTimeout")
	assert.Contains(t, err.Error(), "transaction.max.timeout.ms")
	assert.False(t, kafkasource.IsRetryable(err), "a restart cannot fix a setting: %v", err)
}

// TestCommitAfterTimeoutIsNotFencing: a checkpoint saved, then a pause
// longer than the transaction timeout before the commit (a GC or VM pause,
// SIGSTOP): the broker aborts the transaction and bumps the epoch, so it
// answers the commit as it would a fenced producer. The sink says timeout,
// not fencing, in the error (kafkatxn.ErrTimedOut, retryable) and in the
// metrics (outcome expired, no fenced count).
func TestCommitAfterTimeoutIsNotFencing(t *testing.T) {
	brokers := expiryBroker(t, nil)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s, err := kafkasink.New(brokers, topic, checkpoint.TopicPartition{Topic: "in", Partition: 3}, kafkasink.Options{
		Tx: kafkatxn.TxOptions{TransactionTimeout: expiryTimeout}, CheckpointInterval: -1, MeterProvider: mp,
	})
	require.NoError(t, err)
	defer s.Close()

	write(t, s, topic, "a")
	_, err = s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.Expired(ctx, 1), "a young transaction may be saved")
	waitEnd(t, brokers, topic, 2) // "a", then the broker's abort marker
	err = s.CheckpointCompleted(ctx, 1)
	require.ErrorIs(t, err, kafkatxn.ErrTimedOut)
	assert.NotErrorIs(t, err, kafkatxn.ErrFenced)
	assert.True(t, kafkasource.IsRetryable(err), "%v", err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if data, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range data.DataPoints {
					name := m.Name
					if o, ok := dp.Attributes.Value("outcome"); ok {
						name += "/" + o.AsString()
					}
					counts[name] += dp.Value
				}
			}
		}
	}
	assert.Equal(t, map[string]int64{
		"exactlyonce.kafkasink.records_written":      1,
		"exactlyonce.kafkasink.transactions/expired": 1,
	}, counts)
}

// diesBeforeCommit is a sink whose process dies between a checkpoint's
// save and the sink's commit once *dead is set: CheckpointCompleted does
// nothing, and the chain is closed after it.
type diesBeforeCommit struct {
	*kafkasink.Sink
	dead *bool
}

func (d diesBeforeCommit) CheckpointCompleted(ctx context.Context, id checkpoint.ID) error {
	if *d.dead {
		return nil
	}
	return d.Sink.CheckpointCompleted(ctx, id)
}

// dedupRun is one incarnation of a kafkasource -> dedup -> kafkasink chain,
// run by hand over input (one record an offset, the value its dedup key):
// restored by coord, it reads from the restored offset, writes each first
// sighting to topic, and checkpoints after each offset in at that it
// passes. With dieAtLast the process dies between the last checkpoint's
// save and its commit.
func dedupRun(ctx context.Context, brokers []string, coord *checkpoint.Coordinator, src checkpoint.TopicPartition,
	topic string, input []string, at []int, dieAtLast bool,
) error {
	d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := kafkasink.New(brokers, topic, src, kafkasink.Options{
		Tx: kafkatxn.TxOptions{TransactionTimeout: expiryTimeout}, CheckpointInterval: -1,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	dead := false
	task, err := coord.Attach(ctx, src, map[string]checkpoint.Participant{"dedup": d, "out": diesBeforeCommit{s, &dead}})
	if err != nil {
		return fmt.Errorf("attach: %w", err)
	}
	defer task.Detach()
	next := 0
	if cp := task.Restored(); cp != nil {
		next = int(cp.NextOffset)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, end := range at {
		if end <= next {
			continue
		}
		for ; next < end; next++ {
			first, err := d.Observe(dedup.AppendKey(nil, input[next]), t0.Add(time.Duration(next)*time.Second))
			if err != nil {
				return err
			}
			if first {
				if err := s.Add(ctx, topic, 0, kafkatxn.Record{Value: []byte(input[next])}); err != nil {
					return err
				}
			}
		}
		dead = dieAtLast && i == len(at)-1
		if err := task.Checkpoint(ctx, nil, int64(next), checkpoint.Meta{}, nil); err != nil {
			return err
		}
	}
	return nil
}

// waitIDExpired waits until the transaction coordinator no longer knows
// the transactional id of the sink state in the partition's newest
// checkpoint (transactional.id.expiration.ms passed with the chain down):
// it answers EndTxn for it with INVALID_PRODUCER_ID_MAPPING. The EndTxn is
// a commit with the recorded epoch: a repeat of a commit that happened, or
// refused.
func waitIDExpired(t *testing.T, brokers []string, store *checkpoint.Store, src checkpoint.TopicPartition) {
	t.Helper()
	cp, err := store.Latest(context.Background(), src)
	require.NoError(t, err)
	var st struct {
		Txn struct {
			ID    string `json:"id"`
			PID   int    `json:"pid"`
			Epoch int    `json:"epoch"`
		} `json:"txn"`
	}
	require.NoError(t, json.Unmarshal(cp.States["out"], &st))
	require.NotEmpty(t, st.Txn.ID)
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res, err := cl.EndTxn(context.Background(), &kafka.EndTxnRequest{
			TransactionalID: st.Txn.ID, ProducerID: st.Txn.PID, ProducerEpoch: st.Txn.Epoch, Committed: true,
		})
		if err == nil {
			err = res.Error
		}
		if errors.Is(err, kafka.InvalidProducerIDMapping) || errors.Is(err, kafka.TransactionalIDNotFound) {
			return
		}
		require.True(t, time.Now().Before(deadline), "transactional id %s did not expire: %v", st.Txn.ID, err)
		time.Sleep(200 * time.Millisecond)
	}
}

// lostOutputScenario: checkpoint 1 completes; checkpoint 2 is saved, and
// the process dies before the sink commits; the broker aborts the
// transaction by its timeout (and with expireID forgets the transactional
// id too) while the chain is down. The restart must not stay stuck on
// checkpoint 2: it falls back to checkpoint 1, restores the dedup from it
// too, and replays, so every first sighting is in the output once. With
// expireID a later restart after the id expired again, this time over a
// committed checkpoint, goes on from that checkpoint without a fallback.
func lostOutputScenario(t *testing.T, expireID bool) {
	configs := map[string]string{}
	if expireID {
		configs["transactional.id.expiration.ms"] = "2000"
		configs["transaction.remove.expired.transaction.cleanup.interval.ms"] = "200"
	}
	brokers := expiryBroker(t, configs)
	topic := testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	t.Cleanup(func() { coord.Close() })
	src := checkpoint.TopicPartition{Topic: "in", Partition: 0}

	input := []string{"a", "b", "a", "c", "b", "d"}
	require.NoError(t, dedupRun(ctx, brokers, coord, src, topic, input, []int{3, 6}, true))
	// "a" 0, "b" 1, commit marker 2, "c" 3, "d" 4: the abort marker is 5.
	waitEnd(t, brokers, topic, 6)
	if expireID {
		waitIDExpired(t, brokers, store, src)
	}
	require.NoError(t, dedupRun(ctx, brokers, coord, src, topic, input, []int{6}, false), "the restart")
	assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}, readCommitted(t, brokers, topic, 1))
	cp, err := store.Latest(ctx, src)
	require.NoError(t, err)
	assert.Equal(t, checkpoint.ID(2), cp.ID, "the replay's checkpoint took the lost one's place")
	assert.Equal(t, int64(6), cp.NextOffset)

	if expireID {
		waitIDExpired(t, brokers, store, src)
		input = append(input, "e", "a")
		require.NoError(t, dedupRun(ctx, brokers, coord, src, topic, input, []int{8}, false), "the restart over a committed checkpoint")
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, readCommitted(t, brokers, topic, 1))
		cp, err := store.Latest(ctx, src)
		require.NoError(t, err)
		assert.Equal(t, checkpoint.ID(3), cp.ID)
	}
}

// TestRestoreFallsBackPastAbortedTransaction: kafkasink + dedup over a
// checkpoint whose transaction the broker aborted after the save.
func TestRestoreFallsBackPastAbortedTransaction(t *testing.T) { lostOutputScenario(t, false) }

// TestRestoreAfterTransactionalIDExpired: the same, with the chain down
// longer than transactional.id.expiration.ms, so that the commit at
// restore gets INVALID_PRODUCER_ID_MAPPING.
func TestRestoreAfterTransactionalIDExpired(t *testing.T) { lostOutputScenario(t, true) }
