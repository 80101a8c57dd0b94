package chaudit

import (
	"context"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// FolderConfig is what NewFolder needs. ClickHouse.Addr and Storage are
// required.
type FolderConfig struct {
	// ClickHouse is the audit table's server and name (DefaultTable when
	// empty).
	ClickHouse chsink.Table
	// Sink configures the audit sink (Database, Client, ...).
	Sink chsink.Options
	// Storage keeps the sink's journal; the Coordinator's store shares it.
	Storage checkpoint.Storage
	// Counter sets the buckets; they must be the gateway's.
	Counter audit.Options
	// Logger receives the deltas that are no deltas. Default: discards.
	Logger *slog.Logger
}

// NewFolder returns the chain of one partition of the audit topic: each
// Delta, deduplicated by source and sequence number, is added to a Counter
// named after the partition, whose rows go to the audit table. A record
// that is no delta is poison (kafkasource.Poison): it stops the chain, or
// goes to the Processor's dead-letter topic if the caller sets one.
func NewFolder(cfg FolderConfig) kafkasource.NewProcessor {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc := &kafkasource.Processor{Participants: map[string]checkpoint.Participant{}}
		// Deltas repeat within seconds (a lost acknowledgement); a week of
		// event time is far beyond any retry.
		d, err := dedup.New(7*24*time.Hour, dedup.Options{})
		if err != nil {
			return proc, err
		}
		proc.Participants["dedup"] = d
		counter, err := audit.NewCounter(p.String(), cfg.Counter)
		if err != nil {
			return proc, err
		}
		proc.Participants["counter"] = counter
		s, err := NewSink(ctx, cfg.ClickHouse, p, cfg.Storage, cfg.Sink)
		if err != nil {
			return proc, err
		}
		proc.Participants["audit"] = s
		f := &folder{dedup: d, counter: counter, sink: s}
		proc.Process, proc.Tick = f.process, f.tick
		return proc, nil
	}
}

type folder struct {
	dedup   *dedup.Deduplicator
	counter *audit.Counter
	sink    *chsink.Sink[audit.Row]
	key     []byte
	rows    []audit.Row
	pos     []sink.Position
}

func (f *folder) process(ctx context.Context, m kafka.Message) error {
	f.counter.At(m.Offset)
	d, err := audit.DecodeDelta(m.Value)
	if err != nil {
		return kafkasource.Poison(err)
	}
	f.key = dedup.AppendKey(f.key[:0], d.Source, string(kafkaSeq(d.Seq)))
	first, err := f.dedup.Observe(f.key, d.Bucket)
	if err != nil || !first {
		return err
	}
	f.counter.Add(d.Stage, d.Tenant, d.Bucket, d.Count)
	return nil
}

func kafkaSeq(n uint64) []byte {
	b := make([]byte, 8)
	for i := range 8 {
		b[7-i] = byte(n >> (8 * i))
	}
	return b
}

func (f *folder) tick(ctx context.Context) error {
	return Flush(ctx, f.counter, f.sink, &f.rows, &f.pos)
}

// Flush writes the rows of counter that changed to s: what a chain's Tick
// calls. rows and pos are buffers reused from one call to the next.
func Flush(ctx context.Context, counter *audit.Counter, s *chsink.Sink[audit.Row], rows *[]audit.Row, pos *[]sink.Position) error {
	*rows, *pos = counter.Flush((*rows)[:0], (*pos)[:0])
	if len(*rows) == 0 {
		return nil
	}
	_, err := s.AddBatch(ctx, *pos, *rows)
	return err
}
