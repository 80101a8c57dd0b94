package journal_test

import (
	"context"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/internal/journal"
)

func ExampleJournal() {
	ctx := context.Background()
	store := checkpoint.NewMemoryStorage()
	j, _ := journal.Open(store, "analytics.events", checkpoint.TopicPartition{Topic: "webhooks", Partition: 0})
	_ = j.Claim(ctx)

	first, last := sink.Position{Offset: 100}, sink.Position{Offset: 180, Index: 2}
	in := sink.Intent{First: first, Last: last, Rows: 57}
	in.Token = j.Token(first, last)
	_ = j.Record(ctx, &in) // durable before the insert
	// ... insert with insert_deduplication_token = in.Token ...
	_ = j.Ack(ctx, &in)

	replay, _ := j.Load(ctx, nil) // what a new owner replays
	fmt.Println(len(replay), replay[0].First, replay[0].Last, replay[0].Acked)
	// Output: 1 100.0 180.2 true
}
