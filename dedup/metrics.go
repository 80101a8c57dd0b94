package dedup

import (
	"context"

	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/exactlyonce/exactlyonce/dedup"

func (d *Deduplicator) registerMetrics() error {
	m := d.opts.MeterProvider.Meter(meterName)
	first, err := m.Int64ObservableCounter("dedup_first_seen_total",
		metric.WithDescription("Events seen for the first time (passed on)."))
	if err != nil {
		return err
	}
	dropped, err := m.Int64ObservableCounter("dedup_dropped_total",
		metric.WithDescription("Duplicate events (dropped)."))
	if err != nil {
		return err
	}
	expired, err := m.Int64ObservableCounter("dedup_expired_total",
		metric.WithDescription("Expired keys removed by cleanup."))
	if err != nil {
		return err
	}
	live, err := m.Int64ObservableGauge("dedup_live_keys",
		metric.WithDescription("Stored keys, including expired keys not yet cleaned up."))
	if err != nil {
		return err
	}
	attrs := metric.WithAttributes(d.opts.MetricAttributes...)
	s := &d.stats
	d.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(first, s.firstSeen.Load(), attrs)
		o.ObserveInt64(dropped, s.dropped.Load(), attrs)
		o.ObserveInt64(expired, s.expired.Load(), attrs)
		o.ObserveInt64(live, s.live.Load(), attrs)
		return nil
	}, first, dropped, expired, live)
	return err
}
