package state

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

func (t *table[C, V]) registerMetrics() error {
	m := meter.New(t.opts.MeterProvider, "state")
	entries := m.ObservableGauge("exactlyonce.state.entries", "{entry}", "Stored entries, expired ones not yet cleaned up included.")
	writes := m.ObservableCounter("exactlyonce.state.writes", "{write}", "Puts and Deletes.")
	reads := m.ObservableCounter("exactlyonce.state.reads", "{read}", "Gets.")
	expired := m.ObservableCounter("exactlyonce.state.expired", "{entry}", "Expired entries removed by cleanup.")
	attrs := metric.WithAttributes(t.opts.MetricAttributes...)
	s := &t.stats
	t.reg = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(entries, s.entries.Load(), attrs)
		o.ObserveInt64(writes, s.writes.Load(), attrs)
		o.ObserveInt64(reads, s.reads.Load(), attrs)
		o.ObserveInt64(expired, s.expired.Load(), attrs)
		return nil
	}, entries, writes, reads, expired)
	if err := m.Err(); err != nil {
		return fmt.Errorf("state: metrics: %w", err)
	}
	return nil
}
