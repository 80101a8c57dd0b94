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
	storage := checkpoint.NewMemStorage() // an FSStorage or S3 in production
	type row = window.Row[uint64]
	columns := func() []chsink.Column[row] {
		return []chsink.Column[row]{
			chsink.String("key", func(r *row) string { return r.Key }),
			chsink.DateTime64("start", proto.PrecisionMilli, func(r *row) time.Time { return r.Start }),
			chsink.DateTime64("end", proto.PrecisionMilli, func(r *row) time.Time { return r.End }),
			chsink.UInt64("events", func(r *row) uint64 { return r.Result }),
		}
	}
	_ = func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		op, err := window.New(window.Session(30*time.Minute), window.Count[string]{}, window.Options{Inputs: []int{p.Partition}})
		if err != nil {
			return proc, err
		}
		ws, err := windowsink.New(ctx, chsink.Table{Addr: "127.0.0.1:9000", Name: "sessions"}, p, storage, op, columns,
			windowsink.Options{Sink: chsink.Options{Database: "default"}})
		if err != nil {
			return proc, err // a table that is not ReplacingMergeTree(version, deleted) is refused here
		}
		proc.Participants["sessions"] = ws
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			return ws.Add(ctx, m.Offset, window.Event[string]{Input: p.Partition, Key: string(m.Key), Time: m.Time, Value: "event"})
		}
		proc.Tick = ws.Tick
		proc.TickInterval = time.Second
		return proc, nil
	}
}
