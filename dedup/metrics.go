package dedup

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

func (d *Deduplicator) registerMetrics() error {
	m := meter.New(d.opts.MeterProvider, "dedup")
	first := m.ObservableCounter("exactlyonce.dedup.first_seen", "{event}", "Events seen for the first time (passed on).")
	dropped := m.ObservableCounter("exactlyonce.dedup.dropped", "{event}", "Duplicate events (dropped).")
	expired := m.ObservableCounter("exactlyonce.dedup.expired", "{key}", "Expired keys removed by cleanup.")
	live := m.ObservableGauge("exactlyonce.dedup.keys", "{key}", "Stored keys, including expired keys not yet cleaned up.")
	attrs := metric.WithAttributes(d.opts.MetricAttributes...)
	s := &d.stats
	d.reg = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(first, s.firstSeen.Load(), attrs)
		o.ObserveInt64(dropped, s.dropped.Load(), attrs)
		o.ObserveInt64(expired, s.expired.Load(), attrs)
		o.ObserveInt64(live, s.live.Load(), attrs)
		return nil
	}, first, dropped, expired, live)
	if err := m.Err(); err != nil {
		return fmt.Errorf("dedup: metrics: %w", err)
	}
	return nil
}
