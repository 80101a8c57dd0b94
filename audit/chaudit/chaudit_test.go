package chaudit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/audit/kafkaaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// totals returns the audit table's totals by stage, tenant and bucket
// minute ("stage tenant 10:04").
func totals(t *testing.T, addr, db string) map[string]uint64 {
	t.Helper()
	got, err := chaudit.Totals(context.Background(), ch.Options{Address: addr}, db, "", t0.Add(-time.Hour), t0.Add(time.Hour))
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, tt := range got {
		out[fmt.Sprintf("%s %s %s", tt.Stage, tt.Tenant, tt.Bucket.Format("15:04"))] = tt.Count
	}
	return out
}

// runFolder runs the folder over the audit topic until stop returns true,
// then stops the Source without a last checkpoint, as a kill would: what
// was processed since the last periodic checkpoint is replayed by the next
// run.
func runFolder(t *testing.T, brokers []string, topic string, storage checkpoint.Storage, addr, db string, want map[string]uint64) {
	t.Helper()
	runChains(t, brokers, topic, storage, addr, db, want, false, func(store *checkpoint.Store) kafkasource.ProcessorFunc {
		return kafkasource.Chains(store, chaudit.Folder(chaudit.FolderOptions{
			ClickHouse: chsink.DB{Addr: addr, Database: db}, Sink: chsink.Options{MaxDelay: 100 * time.Millisecond},
		}))
	})
}

// runChains runs the chains newProc builds over the audit topic until the
// audit table's totals are want, takes a last checkpoint if last says so,
// and stops the Source.
func runChains(t *testing.T, brokers []string, topic string, storage checkpoint.Storage, addr, db string, want map[string]uint64,
	last bool, newProc func(*checkpoint.Store) kafkasource.ProcessorFunc) {
	t.Helper()
	stop := func() bool { return assert.ObjectsAreEqual(want, totals(t, addr, db)) }
	defer func() {
		if t.Failed() {
			assert.Equal(t, want, totals(t, addr, db))
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 300 * time.Millisecond})
	require.NoError(t, err)
	defer coord.Close()
	go func() { _ = coord.Run(ctx) }()
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: "folder", Topics: []string{topic}}, coord, newProc(store),
		kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			require.NoError(t, err, "Run returned early")
		default:
		}
		return stop()
	}, 60*time.Second, 50*time.Millisecond)
	if last {
		checkpointtest.Checkpoint(t, src.Checkpoint)
	}
	cancel()
	require.NoError(t, <-done)
}

// TestFolderCountsEveryDeltaOnce: two gateways' deltas, one of them sent
// twice (as after a lost acknowledgement), are folded into the audit table
// once each, across a folder stopped without a last checkpoint and run
// again (it replays what came after its last one).
func TestFolderCountsEveryDeltaOnce(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "audit")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))

	a, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw-a"})
	require.NoError(t, err)
	defer a.Close()
	b, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw-b"})
	require.NoError(t, err)
	defer b.Close()
	for i := range 30 {
		a.Add(audit.StageAccepted, fmt.Sprint("org", i%3), t0.Add(time.Duration(i)*10*time.Second), 1)
		b.Add(audit.StageAccepted, "org0", t0.Add(time.Duration(i)*time.Second), 2)
	}
	flushUntilSent(t, a)
	flushUntilSent(t, b)
	c, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw-c"})
	require.NoError(t, err)
	defer c.Close()
	c.Add(audit.StageAccepted, "org9", t0, 1000)
	flushUntilSent(t, c)
	// gw-c's delta again, as its Publisher sends it when the broker's
	// answer was lost: same number, same key. Counted once.
	again := audit.Delta{Source: "gw-c", Seq: 1, Stage: audit.StageAccepted, Tenant: "org9", Bucket: t0, Count: 1000}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Balancer: &kafka.Hash{}}
	defer w.Close()
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Key: []byte("org9"), Value: again.Encode()}))

	want := map[string]uint64{}
	for i := range 30 {
		want[fmt.Sprintf("%s org%d %s", audit.StageAccepted, i%3, t0.Add(time.Duration(i)*10*time.Second).Format("15:04"))]++
	}
	want[audit.StageAccepted+" org0 10:00"] += 60
	want[audit.StageAccepted+" org9 10:00"] = 1000
	storage := checkpoint.NewMemoryStorage()
	runFolder(t, brokers, topic, storage, addr, db, want)
	t.Log("first run folded every delta")

	for i := range 5 {
		a.Add(audit.StageAccepted, "org1", t0.Add(5*time.Minute), uint64(i))
	}
	require.NoError(t, a.Flush(ctx))
	want[audit.StageAccepted+" org1 10:05"] = 10
	runFolder(t, brokers, topic, storage, addr, db, want)
	time.Sleep(time.Second) // a replay's rows, had it doubled anything, are in by now
	assert.Equal(t, want, totals(t, addr, db))
}

// TestCounterThroughSinkAcrossCrash: a chain's Counter and its audit sink,
// snapshotted, then fed more records that are flushed to ClickHouse and
// lost with the process, restored and fed the same records again: the
// table holds the counts of one pass.
func TestCounterThroughSinkAcrossCrash(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	storage := checkpoint.NewMemoryStorage()
	p := checkpoint.TopicPartition{Topic: "webhooks", Partition: 0}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	open := func() (*audit.Counter, *chsink.Sink[audit.Row]) {
		c, err := audit.NewCounter(p.String(), audit.Options{})
		require.NoError(t, err)
		chain, err := checkpoint.NewChain(store, p)
		require.NoError(t, err)
		s, err := chaudit.OpenSink(ctx, chain, chsink.DB{Addr: addr, Database: db}, "", chsink.Options{})
		require.NoError(t, err)
		require.Equal(t, map[string]checkpoint.Participant{chaudit.DefaultTable: s}, chain.Participants(), "registered under the table's name")
		return c, s
	}
	feed := func(c *audit.Counter, s *chsink.Sink[audit.Row], from, to int) {
		var rows []audit.Row
		var pos []sink.Position
		for i := from; i < to; i++ {
			c.At(int64(i))
			c.Add(audit.StageFirstSeen, fmt.Sprint("org", i%2), t0.Add(time.Duration(i)*7*time.Second), 1)
			if i%5 == 4 { // a tick
				require.NoError(t, chaudit.Flush(ctx, c, s, &rows, &pos))
			}
		}
		require.NoError(t, chaudit.Flush(ctx, c, s, &rows, &pos))
	}
	c, s := open()
	feed(c, s, 0, 40)
	cs, err := c.Snapshot(ctx, 1)
	require.NoError(t, err)
	ss, err := s.Snapshot(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, s.CheckpointCompleted(ctx, 1))
	feed(c, s, 40, 70)
	_, err = s.Snapshot(ctx, 2) // flushed to ClickHouse; checkpoint 2 never completes
	require.NoError(t, err)
	require.NoError(t, s.Close())

	c, s = open()
	require.NoError(t, c.Restore(ctx, cs))
	require.NoError(t, s.Restore(ctx, ss))
	feed(c, s, 40, 100)
	_, err = s.Snapshot(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	want := map[string]uint64{}
	for i := range 100 {
		want[fmt.Sprintf("%s org%d %s", audit.StageFirstSeen, i%2, t0.Add(time.Duration(i)*7*time.Second).Format("15:04"))]++
	}
	assert.Equal(t, want, totals(t, addr, db))
}

// TestTableCounts counts a user's table per tenant and bucket, with FINAL
// and a count expression.
func TestTableCounts(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	require.NoError(t, testkit.Exec(ctx, addr, db, `CREATE TABLE ev (org String, at DateTime64(3, 'UTC'), id String, v UInt64)
		ENGINE = ReplacingMergeTree(v) ORDER BY (org, id)`))
	require.NoError(t, testkit.Exec(ctx, addr, db, `INSERT INTO ev VALUES
		('a', '2026-12-01 10:00:01', '1', 1), ('a', '2026-12-01 10:00:59', '2', 1), ('a', '2026-12-01 10:01:00', '3', 1), ('b', '2026-12-01 10:00:30', '4', 1)`))
	require.NoError(t, testkit.Exec(ctx, addr, db, `INSERT INTO ev VALUES ('a', '2026-12-01 10:00:01', '1', 2)`))
	src, err := chaudit.ParseSource("ev,tenant=org,final")
	require.NoError(t, err)
	got, err := chaudit.TableCounts(ctx, ch.Options{Address: addr}, db, src, time.Minute, t0.Add(-time.Hour), t0.Add(time.Hour))
	require.NoError(t, err)
	stage := audit.TableStage("ev")
	assert.Equal(t, []audit.Total{
		{Key: audit.Key{Stage: stage, Tenant: "a", Bucket: t0}, Count: 2},
		{Key: audit.Key{Stage: stage, Tenant: "a", Bucket: t0.Add(time.Minute)}, Count: 1},
		{Key: audit.Key{Stage: stage, Tenant: "b", Bucket: t0}, Count: 1},
	}, got)
	src.Final = false
	got, err = chaudit.TableCounts(ctx, ch.Options{Address: addr}, db, src, time.Minute, t0.Add(-time.Hour), t0.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), got[0].Count, "without FINAL: the row's two versions")

	src, err = chaudit.ParseSource("ev,tenant=org,count=sum(v)")
	require.NoError(t, err)
	got, err = chaudit.TableCounts(ctx, ch.Options{Address: addr}, db, src, time.Hour, t0.Add(-time.Hour), t0.Add(time.Hour))
	require.NoError(t, err)
	assert.Equal(t, uint64(5), got[0].Count)
}

// TestBadInput: an unreachable server, a table without the audit schema, a
// missing table, a mistyped column: each a clear error.
func TestBadInput(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	ctx := context.Background()
	_, err := chaudit.Totals(ctx, ch.Options{Address: "127.0.0.1:1", DialTimeout: time.Second}, db, "", t0, t0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "connect to ClickHouse at 127.0.0.1:1")

	require.NoError(t, testkit.Exec(ctx, addr, db, "CREATE TABLE not_audit (x UInt8, stage String) ENGINE = MergeTree ORDER BY x"))
	_, err = chaudit.Totals(ctx, ch.Options{Address: addr}, db, "not_audit", t0, t0)
	require.ErrorIs(t, err, chaudit.ErrSchema)
	assert.Contains(t, err.Error(), "has no column tenant, bucket, counter, count, written")
	_, err = chaudit.Totals(ctx, ch.Options{Address: addr}, db, "", t0, t0)
	require.ErrorIs(t, err, chaudit.ErrSchema)
	assert.Contains(t, err.Error(), "audit_counts does not exist")

	_, err = chaudit.TableCounts(ctx, ch.Options{Address: addr}, db, chaudit.Source{Table: "not_audit", Tenant: "org"}, time.Minute, t0, t0)
	require.ErrorIs(t, err, chaudit.ErrSchema)
	assert.Contains(t, err.Error(), "has no column org, at")
	_, err = chaudit.ParseSource("t,tenat=x")
	assert.ErrorContains(t, err, `unknown part "tenat=x"`)
}

// flushUntilSent flushes p until a send succeeds, as its own loop does:
// a broker that just created the topic may answer NOT_LEADER for a moment,
// and the unsent deltas go again under the same numbers.
func flushUntilSent(t *testing.T, p *kafkaaudit.Publisher) {
	t.Helper()
	require.Eventually(t, func() bool { return p.Flush(context.Background()) == nil },
		30*time.Second, 100*time.Millisecond, "the deltas were never sent")
}
