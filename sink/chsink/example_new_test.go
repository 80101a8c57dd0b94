package chsink_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Deployment is the row type of the example's sink.
type Deployment struct {
	Org      string
	Service  string
	At       time.Time
	Duration float64
	Labels   []string
}

// deploymentsDDL is the table the sink needs. What chsink.New checks:
//   - every column of the Schema exists with a matching type;
//   - the table deduplicates inserted blocks: a MergeTree with
//     non_replicated_deduplication_window above the number of batches
//     inserted between two checkpoints (a Replicated* table keeps
//     replicated_deduplication_window, on by default), so a batch replayed
//     after a crash with its insert_deduplication_token is dropped;
//   - with Options.OnMismatch = MismatchReinsert, a ReplacingMergeTree (rows
//     written again must not count twice).
const deploymentsDDL = `CREATE TABLE deployments (
	org LowCardinality(String),
	service String,
	at DateTime64(3, 'UTC'),
	duration_s Float64,
	labels Array(String)
) ENGINE = MergeTree ORDER BY (org, at)
SETTINGS non_replicated_deduplication_window = 1000, enable_block_number_column = 1`

// deploymentSchema maps a Deployment to the table's columns.
func deploymentSchema() []chsink.Column[Deployment] {
	return []chsink.Column[Deployment]{
		chsink.LowCardinality("org", func(d *Deployment) string { return d.Org }),
		chsink.String("service", func(d *Deployment) string { return d.Service }),
		chsink.DateTime64("at", proto.PrecisionMilli, func(d *Deployment) time.Time { return d.At }),
		chsink.Float64("duration_s", func(d *Deployment) float64 { return d.Duration }),
		chsink.Array("labels", new(proto.ColStr), func(d *Deployment) []string { return d.Labels }),
	}
}

// A sink for a Go struct: its Schema, the DDL of its table, rows added at
// their source positions, and the checkpoint that makes them durable. New
// refuses a table that cannot deduplicate a replayed batch.
func ExampleNew() {
	ctx := context.Background()
	srv, err := testkit.StandaloneClickHouse(ctx) // your ClickHouse in production
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	conn, err := ch.Dial(ctx, ch.Options{Address: srv.Addr()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	for _, q := range []string{deploymentsDDL, "CREATE TABLE no_window (org String) ENGINE = MergeTree ORDER BY org"} {
		if err := conn.Do(ctx, ch.Query{Body: q}); err != nil {
			fmt.Println(err)
			return
		}
	}

	// Storage holds the sink's journal; in production the checkpoints'
	// shared storage.
	storage := checkpoint.NewMemoryStorage()
	src := checkpoint.TopicPartition{Topic: "deploys", Partition: 0}
	s, err := chsink.New(ctx, chsink.Table{Addr: srv.Addr(), Name: "deployments"}, src, storage,
		deploymentSchema, chsink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, svc := range []string{"api", "web", "worker"} {
		// The position of the Kafka record the row came from.
		pos := sink.Position{Offset: int64(i)}
		if err := s.Add(ctx, pos, Deployment{Org: "acme", Service: svc, At: at, Duration: 1.5, Labels: []string{"prod"}}); err != nil {
			fmt.Println(err)
			return
		}
	}
	// The checkpoint's Snapshot flushes: its rows are in the table when it
	// returns.
	if _, err := s.Snapshot(ctx, 1); err != nil {
		fmt.Println(err)
		return
	}
	var n proto.ColUInt64
	if err := conn.Do(ctx, ch.Query{Body: "SELECT count() AS n FROM deployments", Result: proto.Results{{Name: "n", Data: &n}}}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("rows:", n.Row(0))

	type orgOnly struct{ Org string }
	_, err = chsink.New(ctx, chsink.Table{Addr: srv.Addr(), Name: "no_window"}, src, storage,
		func() []chsink.Column[orgOnly] {
			return []chsink.Column[orgOnly]{chsink.String("org", func(r *orgOnly) string { return r.Org })}
		}, chsink.Options{})
	fmt.Println("table without a deduplication window refused:", errors.Is(err, chsink.ErrNoDedupWindow))
	// Output:
	// rows: 3
	// table without a deduplication window refused: true
}
