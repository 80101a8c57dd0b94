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

// FolderOptions is what Folder needs. ClickHouse.Addr is required.
type FolderOptions struct {
	// ClickHouse is the audit table's server and database.
	ClickHouse chsink.DB
	// Table is the audit table's name. Default DefaultTable.
	Table string
	// Sink configures the audit sink (Client, MaxDelay, ...); leave
	// Database and KeepCheckpoints zero (ClickHouse and the chain give
	// them). Its ParticipantName defaults to "audit".
	Sink chsink.Options
	// Counter sets the buckets; they must be the gateway's.
	Counter audit.Options
	// Logger receives the deltas that are no deltas. Default: discards.
	Logger *slog.Logger
}

// FolderConfig is FolderOptions.
//
// Deprecated: use FolderOptions; every other package calls what a
// constructor takes Options.
type FolderConfig = FolderOptions

// Folder returns the chain of one partition of the audit topic, for
// kafkasource.Chains: each Delta, deduplicated by source and sequence
// number, is added to a Counter named after the partition, whose rows go
// to the audit table. A record that is no delta is poison
// (kafkasource.Poison): it stops the chain, or goes to the Processor's
// dead-letter topic if the caller sets one.
//
// The chain's participants are "dedup", "counter" and the sink, "audit"
// unless cfg.Sink.ParticipantName says otherwise: the keys of their state
// in every checkpoint.
func Folder(cfg FolderOptions) kafkasource.BuildChain {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sink.ParticipantName == "" {
		cfg.Sink.ParticipantName = "audit"
	}
	return func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
		// Deltas repeat within seconds (a lost acknowledgement); a week of
		// event time is far beyond any retry.
		d, err := dedup.New(7*24*time.Hour, dedup.Options{})
		if err != nil {
			return nil, err
		}
		if err := c.Add("dedup", d); err != nil {
			return nil, err
		}
		counter, err := audit.NewCounter(c.Partition().String(), cfg.Counter)
		if err != nil {
			return nil, err
		}
		if err := c.Add("counter", counter); err != nil {
			return nil, err
		}
		s, err := OpenSink(ctx, c, cfg.ClickHouse, cfg.Table, cfg.Sink)
		if err != nil {
			return nil, err
		}
		f := &folder{dedup: d, counter: counter, sink: s}
		return &kafkasource.Processor{Process: f.process, Tick: f.tick}, nil
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
