package devmetrics

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// handWiredProcessor is the chain as NewProcessor wired it before
// BuildChain, with the audit and the naive view sink on: a Participants map
// filled by name, chsink.New with the Storage and the database repeated.
// It is the old form that a deployment upgraded in place wrote its
// checkpoints with, kept here in what reaches a checkpoint (names,
// operators and their options); the processing is the chain's own.
func handWiredProcessor(addr, db string, storage checkpoint.Storage) kafkasource.ProcessorFunc {
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		d, err := dedup.New(dedup.DefaultTTL, dedup.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = d
		w, err := window.New(window.Tumbling(time.Hour), Agg{}, window.Options{
			MaxOutOfOrderness: 5 * time.Second, AllowedLateness: 12 * time.Hour, IdleTimeout: 2 * time.Second,
			Inputs: []int{p.Partition}, Early: window.EarlyFiring{Every: DefaultEarlyEvery},
		})
		if err != nil {
			return proc, err
		}
		proc.Participants["window"] = w
		opts := chsink.Options{Database: db, MaxDelay: 100 * time.Millisecond}
		eventsOpts := opts
		eventsOpts.DistinctViewRows = true
		events, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "normalized_events"}, p, storage, EventSchema, eventsOpts)
		if err != nil {
			return proc, err
		}
		proc.Participants["events"] = events
		metricsOpts := opts
		metricsOpts.OnMismatch = chsink.MismatchReinsert
		metrics, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: "employee_metrics_window"}, p, storage, WindowSchema, metricsOpts)
		if err != nil {
			return proc, err
		}
		proc.Participants["metrics"] = metrics
		c := &chain{partition: p.Partition, dedup: d, windows: w, events: events, metrics: metrics, log: slog.New(slog.DiscardHandler)}
		c.naiveView = &naiveViewSink{addr: addr, database: db, partition: p.Partition}
		proc.Participants["naive_mv"] = c.naiveView
		counter, err := audit.NewCounter(p.String(), audit.Options{})
		if err != nil {
			return proc, err
		}
		auditOpts := opts
		auditOpts.OnMismatch = chsink.MismatchReinsert
		auditSink, err := chsink.New(ctx, chsink.Table{Addr: addr, Name: chaudit.DefaultTable}, p, storage, chaudit.Schema, auditOpts)
		if err != nil {
			return proc, err
		}
		proc.Participants["audit"], proc.Participants["audit_counts"] = counter, auditSink
		c.audit = &chainAudit{counter: counter, sink: auditSink}
		proc.Participants["cursor"] = &c.cursor
		proc.Process, proc.Tick, proc.TickInterval = c.process, c.tick, 500*time.Millisecond
		return proc, nil
	}
}

// TestUpgradeRestoresHandWiredCheckpoint: the hand-wired chain (the form
// before BuildChain) processes incidents, checkpoints, processes more
// (flushed to ClickHouse, journaled) and stops without a checkpoint, as a
// deployment stopped for its upgrade may. BuildChain on kafkasource.Chains
// then runs over the same checkpoints: it registers exactly the names the
// old checkpoint holds state under (a name the chain lacked would fail
// Attach with ErrUnknownState, a new name would start empty), and the
// state is the old one: the replay of what followed the checkpoint goes
// into normalized_events once (the sinks' journals), the incidents the old
// chain saw, delivered again, are duplicates (dedup), and the audit counts
// go on from the old ones (the counter).
func TestUpgradeRestoresHandWiredCheckpoint(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "upgrade")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	require.NoError(t, CreateTables(ctx, ch.Options{Address: addr}, db))
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))
	for _, q := range NaiveDDL(db, NaiveMV) {
		require.NoError(t, testkit.Exec(ctx, addr, db, q))
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Transport: &kafka.Transport{}}
	defer w.Close()
	t1 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	publish := func(ids ...int) {
		t.Helper()
		var msgs []kafka.Message
		for _, id := range ids {
			at := t1.Add(time.Duration(id) * time.Minute)
			body := webhookkit.JiraIssueBody(t, "jira:issue_created", "Incident", false, func(p map[string]any) { p["timestamp"] = at.UnixMilli() })
			d := idempotency.Delivery{Key: fmt.Sprint("incident-", id), Source: "jira", Event: "jira:issue_created"}
			msgs = append(msgs, kafka.Message{Key: []byte("acme"), Value: body, Headers: kafkapub.Headers(d), Time: at})
		}
		require.NoError(t, w.WriteMessages(ctx, msgs...))
	}
	rows := func() string {
		return testkit.Rows(t, addr, db, "SELECT toString(count()) FROM normalized_events")[0][0]
	}
	distinct := func() string {
		return testkit.Rows(t, addr, db, "SELECT toString(uniqExact(source, event_id)) FROM normalized_events")[0][0]
	}
	firstSeen := func() string {
		r := testkit.Rows(t, addr, db, `SELECT toString(sum(c)) FROM (SELECT counter, bucket, tenant, max(count) AS c
			FROM audit_counts WHERE stage = '`+audit.StageFirstSeen+`' GROUP BY ALL)`)
		return r[0][0]
	}
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	run := func(newProc kafkasource.ProcessorFunc, records int, until func() bool, last bool) {
		t.Helper()
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
		require.NoError(t, err)
		defer coord.Close()
		var seen atomic.Int64
		counting := func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			proc, err := newProc(ctx, p)
			if err != nil {
				return proc, err
			}
			inner := proc.Process
			proc.Process = func(ctx context.Context, m kafka.Message) error {
				err := inner(ctx, m)
				if err == nil {
					seen.Add(1)
				}
				return err
			}
			return proc, nil
		}
		src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: topic, Topics: []string{topic}}, coord, counting,
			kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- src.Run(runCtx) }()
		require.Eventually(t, func() bool {
			select {
			case err := <-done:
				done <- err
				return true
			default:
			}
			return seen.Load() == int64(records) && until()
		}, 90*time.Second, 50*time.Millisecond, "records processed")
		select {
		case err := <-done:
			require.NoError(t, err, "Run returned early")
		default:
		}
		if last {
			checkpointtest.Checkpoint(t, src.Checkpoint)
		}
		cancel()
		require.NoError(t, <-done)
	}

	// Before the upgrade: 0..29, 5 of them twice, and a checkpoint; then
	// 30..39 and 3 of the first ones again, flushed but not checkpointed.
	publish(seq(0, 30)...)
	publish(0, 1, 2, 3, 4)
	old := handWiredProcessor(addr, db, storage)
	run(old, 35, func() bool { return true }, true)
	p0 := checkpoint.TopicPartition{Topic: topic, Partition: 0}
	cp, err := store.Latest(ctx, p0)
	require.NoError(t, err)
	require.Equal(t, int64(35), cp.NextOffset)
	oldNames := slices.Sorted(maps.Keys(cp.States))
	assert.Equal(t, []string{"audit", "audit_counts", "cursor", "dedup", "events", "metrics", "naive_mv", "window"}, oldNames,
		"the names today's chain writes")
	publish(seq(30, 40)...)
	publish(5, 6, 7)
	run(old, 13, func() bool { return rows() == "40" }, false)
	cp, err = store.Latest(ctx, p0)
	require.NoError(t, err)
	require.Equal(t, int64(35), cp.NextOffset, "what followed the checkpoint is replayed after the upgrade")

	// After: 40..49, and 8..11 and 35 again.
	publish(seq(40, 50)...)
	publish(8, 9, 10, 11, 35)
	var mu sync.Mutex
	var registered []string
	build := BuildChain(Config{ClickHouse: chsink.DB{Addr: addr, Database: db}, Sink: chsink.Options{MaxDelay: 100 * time.Millisecond},
		Audit: true, Naive: []Naive{NaiveMV}, Logger: slog.New(slog.DiscardHandler)})
	upgraded := kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		proc, err := build(ctx, c)
		mu.Lock()
		registered = slices.Sorted(maps.Keys(c.Participants()))
		mu.Unlock()
		return proc, err
	})
	run(upgraded, 13+15, func() bool { return firstSeen() == "50" }, true)
	mu.Lock()
	assert.Equal(t, oldNames, registered, "the new chain's names are the old checkpoint's")
	mu.Unlock()
	assert.Equal(t, "50", distinct(), "every incident")
	assert.Equal(t, "50", rows(), "once: no replayed batch, no redelivered incident twice")
	assert.Equal(t, "50", firstSeen(), "the audit's first sights go on from the old counts")
}

func seq(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
