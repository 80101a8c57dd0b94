package window

import (
	"fmt"

	"github.com/exactlyonce/exactlyonce/internal/meter"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Counters are the operator's running totals since it was created (they are
// not part of a snapshot).
type Counters struct {
	OpenWindows int    // windows held in state
	Emitted     uint64 // rows emitted
	Late        uint64 // late events handed to Output.Late
}

// Counters returns the operator's running totals.
func (o *Operator[In, Acc, Out]) Counters() Counters {
	return Counters{OpenWindows: o.open, Emitted: o.emitted, Late: o.late}
}

type instruments struct {
	// Options are prebuilt slices: passing a fresh variadic slice through
	// the interface call would allocate on every event.
	add       []metric.AddOption
	record    []metric.RecordOption
	open      metric.Int64UpDownCounter
	emissions metric.Int64Counter
	late      metric.Int64Counter
	lag       metric.Float64Gauge
}

func newInstruments(mp metric.MeterProvider, name string) (instruments, error) {
	m := meter.New(mp, "window")
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("exactlyonce.window.operator", name)))
	i := instruments{add: []metric.AddOption{attrs}, record: []metric.RecordOption{attrs}}
	i.open = m.UpDownCounter("exactlyonce.window.open", "{window}", "Windows held in state.")
	i.emissions = m.Counter("exactlyonce.window.emissions", "{row}", "Rows emitted, re-emissions included.")
	i.late = m.Counter("exactlyonce.window.late_events", "{event}",
		"Events later than the allowed lateness, handed to the late output (one per missed window).")
	i.lag = m.Gauge("exactlyonce.window.watermark_lag", "s", "Processing time minus the operator watermark.")
	if err := m.Err(); err != nil {
		return i, fmt.Errorf("window: metrics: %w", err)
	}
	return i, nil
}
