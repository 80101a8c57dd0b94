package chsink

import (
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

type metrics struct {
	attrs    metric.MeasurementOption
	rows     metric.Int64Counter
	batches  metric.Int64Counter
	retries  metric.Int64Counter
	latency  metric.Float64Histogram
	buffered metric.Int64UpDownCounter
	snapshot metric.Float64Histogram
	ahead    metric.Int64Counter

	partsRepaired metric.Int64Counter
}

func (s *Sink[T]) initMetrics() error {
	m := meter.New(s.opts.MeterProvider, "sink/chsink")
	s.m.attrs = metric.WithAttributes(append(meter.Partition(s.src.Topic, s.src.Partition),
		attribute.String(meter.KeyDatabase, s.opts.Database),
		attribute.String(meter.KeyTable, s.table.Name))...)
	s.m.rows = m.Counter("exactlyonce.sink.rows_written", "{row}", "Rows acknowledged by ClickHouse (replayed batches included).")
	s.m.batches = m.Counter("exactlyonce.sink.batches_written", "{batch}", "Batches acknowledged by ClickHouse.")
	s.m.retries = m.Counter("exactlyonce.sink.retries", "{attempt}", "Insert attempts after a failed one.")
	s.m.latency = m.Histogram("exactlyonce.sink.batch_duration", "s", "Time to write a batch: journal, insert with retries, ack.")
	s.m.buffered = m.UpDownCounter("exactlyonce.sink.buffered_rows", "{row}", "Rows buffered, not yet flushed, in steps of 1024.")
	s.m.snapshot = m.Histogram("exactlyonce.sink.snapshot_duration", "s", "Time Snapshot held the chain at a barrier: the buffered rows' insert and the batch in flight.")
	s.m.ahead = m.Counter("exactlyonce.sink.batches_flushed_ahead", "{batch}", "Batches flushed ahead of a checkpoint barrier (see Options.NoFlushAhead).")
	s.m.partsRepaired = m.Counter("exactlyonce.sink.lost_parts_repaired", "{batch}", "Batches whose part ClickHouse lost after a crash while keeping its token, written into the table again (see LostPartError).")
	if err := m.Err(); err != nil {
		return fmt.Errorf("chsink: metrics: %w", err)
	}
	return nil
}
