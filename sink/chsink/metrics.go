package chsink

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

type metrics struct {
	attrs    metric.MeasurementOption
	rows     metric.Int64Counter
	batches  metric.Int64Counter
	retries  metric.Int64Counter
	latency  metric.Float64Histogram
	buffered metric.Int64UpDownCounter
}

func (s *Sink[T]) initMetrics() error {
	mp := s.opts.MeterProvider
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/exactlyonce/exactlyonce/sink/chsink")
	s.m.attrs = metric.WithAttributes(
		attribute.String("table", s.opts.Database+"."+s.table.Name),
		attribute.String("topic", s.src.Topic),
		attribute.Int("partition", s.src.Partition))
	var err, e error
	s.m.rows, e = m.Int64Counter("exactlyonce.sink.rows_written", metric.WithDescription("Rows acknowledged by ClickHouse (replayed batches included)."))
	err = errors.Join(err, e)
	s.m.batches, e = m.Int64Counter("exactlyonce.sink.batches_written", metric.WithDescription("Batches acknowledged by ClickHouse."))
	err = errors.Join(err, e)
	s.m.retries, e = m.Int64Counter("exactlyonce.sink.retries", metric.WithDescription("Insert attempts after a failed one."))
	err = errors.Join(err, e)
	s.m.latency, e = m.Float64Histogram("exactlyonce.sink.batch_duration", metric.WithUnit("s"), metric.WithDescription("Time to write a batch: journal, insert with retries, ack."))
	err = errors.Join(err, e)
	s.m.buffered, e = m.Int64UpDownCounter("exactlyonce.sink.buffered_rows", metric.WithDescription("Rows buffered, not yet flushed, in steps of 1024."))
	err = errors.Join(err, e)
	if err != nil {
		return fmt.Errorf("chsink: metrics: %w", err)
	}
	return nil
}
