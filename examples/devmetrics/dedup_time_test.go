package devmetrics

import (
	"context"
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
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/testkit/webhookkit"
)

// TestDedupByRecordTime: the chain's dedup stamps a key with the record's
// timestamp, as package dedup asks. An incident created ten days ago
// (Jira's timestamp) and delivered now, then a newer one, then the old
// one's redelivery: stamped with its own time the old key expired as soon
// as the newer event moved the clock past it plus the TTL (96 h), and its
// redelivery passed as a first sight (and went into normalized_events
// again); stamped with the record's time it is a duplicate.
func TestDedupByRecordTime(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "dedup_time")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, CreateTables(ctx, ch.Options{Address: addr}, db))
	require.NoError(t, chaudit.CreateTable(ctx, ch.Options{Address: addr}, db, chaudit.DefaultTable))

	now := time.Now()
	record := func(id string, at time.Time) kafka.Message {
		body := webhookkit.JiraIssueBody(t, "jira:issue_created", "Incident", false, func(p map[string]any) { p["timestamp"] = at.UnixMilli() })
		d := idempotency.Delivery{Key: id, Source: "jira", Event: "jira:issue_created"}
		return kafka.Message{Key: []byte("acme"), Value: body, Headers: kafkapub.Headers(d), Time: now}
	}
	msgs := []kafka.Message{record("old", now.Add(-10*24*time.Hour)), record("new", now), record("old", now.Add(-10*24*time.Hour))}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), RequiredAcks: kafka.RequireAll, Topic: topic, Transport: &kafka.Transport{}}
	defer w.Close()
	require.NoError(t, w.WriteMessages(ctx, msgs...))

	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: time.Hour})
	require.NoError(t, err)
	defer coord.Close()
	chain := kafkasource.Chains(store, BuildChain(Config{ClickHouse: chsink.DB{Addr: addr, Database: db}, Audit: true}))
	var seen atomic.Int64
	counting := func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc, err := chain(ctx, p)
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
	go func() { done <- src.Run(ctx) }()
	require.Eventually(t, func() bool { return seen.Load() == int64(len(msgs)) }, 60*time.Second, 20*time.Millisecond)
	// The chain's own audit counts say what dedup decided (the table
	// would not: a ReplacingMergeTree folds the two rows of one insert).
	stages := func() map[string]string {
		rows := testkit.Rows(t, addr, db, `SELECT CAST(stage AS String), toString(sum(c)) FROM (SELECT stage, tenant, bucket, counter, max(count) AS c
			FROM audit_counts GROUP BY ALL) GROUP BY stage ORDER BY stage`)
		out := map[string]string{}
		for _, r := range rows {
			out[r[0]] = r[1]
		}
		return out
	}
	require.Eventually(t, func() bool { return stages()[audit.StageRead] == "3" }, 30*time.Second, 100*time.Millisecond, "the counts are flushed")
	checkpointtest.Checkpoint(t, src.Checkpoint)
	cancel()
	require.NoError(t, <-done)
	got := stages()
	assert.Equal(t, "2", got[audit.StageFirstSeen], "first sights: %v", got)
	assert.Equal(t, "1", got[audit.StageDuplicate], "the old event's redelivery: %v", got)
}
