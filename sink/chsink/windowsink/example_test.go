package windowsink_test

import (
	"context"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/window"
)

// A chain that counts events per key in sessions of 30 minutes into
//
//	CREATE TABLE sessions (key String, start DateTime64(3), end DateTime64(3),
//	    events UInt64, version UInt64, deleted UInt8)
//	ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (key, start)
//	SETTINGS non_replicated_deduplication_window = 1000
func Example() {
	storage := checkpoint.NewMemoryStorage() // an FSStorage or S3 in production
	store, _ := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	db := chsink.DB{Addr: "127.0.0.1:9000"} // database "default"
	type row = window.Row[uint64]
	columns := func() []chsink.Column[row] {
		return []chsink.Column[row]{
			chsink.String("key", func(r *row) string { return r.Key }),
			chsink.DateTime64("start", proto.PrecisionMilli, func(r *row) time.Time { return r.Start }),
			chsink.DateTime64("end", proto.PrecisionMilli, func(r *row) time.Time { return r.End }),
			chsink.UInt64("events", func(r *row) uint64 { return r.Result }),
		}
	}
	_ = kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		p := c.Partition().Partition
		op, err := window.New(window.Session(30*time.Minute), window.Count[string]{}, window.Options{Inputs: []int{p}})
		if err != nil {
			return nil, err
		}
		ws, err := windowsink.Open(ctx, c, db, "sessions", op, columns, windowsink.Options{})
		if err != nil {
			return nil, err // a table that is not ReplacingMergeTree(version, deleted) is refused here
		}
		return &kafkasource.Processor{
			Process: func(ctx context.Context, m kafka.Message) error {
				return ws.Add(ctx, m.Offset, window.Event[string]{Input: p, Key: string(m.Key), Time: m.Time, Value: "event"})
			},
			Tick:         ws.Tick,
			TickInterval: time.Second,
		}, nil
	})
}
