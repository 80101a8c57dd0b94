// Package meter creates the SDK's OpenTelemetry instruments one way, so
// that every metric follows the same conventions: a name under the
// "exactlyonce." prefix, a UCUM unit (s, By, or a {annotation} for counts),
// a description, and the OpenTelemetry semantic-convention attributes for
// the Kafka topic-partition a chain serves (see Partition).
//
// A Meter keeps the first error and returns a working no-op instrument in
// its place, so a package creates all its instruments and checks Err once.
// docs/metrics.md lists every metric; a test in the module root compares that
// table with what the packages register.
package meter

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// Prefix starts the name of every metric of the SDK.
const Prefix = "exactlyonce."

// Scope is the instrumentation scope of package pkg of the module, for
// example Scope("dedup").
func Scope(pkg string) string { return "github.com/exactlyonce/exactlyonce/" + pkg }

// Meter creates the instruments of one package.
type Meter struct {
	m    metric.Meter
	noop metric.Meter
	err  error
}

// New returns a Meter of mp (a no-op provider when nil) for package pkg.
func New(mp metric.MeterProvider, pkg string) *Meter {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	return &Meter{m: mp.Meter(Scope(pkg)), noop: noop.NewMeterProvider().Meter(Scope(pkg))}
}

// Err returns the errors of every instrument that could not be created.
func (m *Meter) Err() error { return m.err }

func (m *Meter) check(name, unit, desc string) bool {
	switch {
	case !strings.HasPrefix(name, Prefix):
		m.err = errors.Join(m.err, fmt.Errorf("metric %q: name must start with %q", name, Prefix))
	case unit == "" || desc == "":
		m.err = errors.Join(m.err, fmt.Errorf("metric %q: unit and description are required", name))
	default:
		return true
	}
	return false
}

// keep records err and reports whether inst can be used.
func (m *Meter) keep(name string, err error) bool {
	if err != nil {
		m.err = errors.Join(m.err, fmt.Errorf("metric %q: %w", name, err))
		return false
	}
	return true
}

// Counter returns a monotonic int64 counter.
func (m *Meter) Counter(name, unit, desc string) metric.Int64Counter {
	if m.check(name, unit, desc) {
		c, err := m.m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && c != nil {
			return c
		}
	}
	c, _ := m.noop.Int64Counter(name)
	return c
}

// UpDownCounter returns an int64 counter that can go down.
func (m *Meter) UpDownCounter(name, unit, desc string) metric.Int64UpDownCounter {
	if m.check(name, unit, desc) {
		c, err := m.m.Int64UpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && c != nil {
			return c
		}
	}
	c, _ := m.noop.Int64UpDownCounter(name)
	return c
}

// Histogram returns a float64 histogram (durations in seconds).
func (m *Meter) Histogram(name, unit, desc string) metric.Float64Histogram {
	if m.check(name, unit, desc) {
		h, err := m.m.Float64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && h != nil {
			return h
		}
	}
	h, _ := m.noop.Float64Histogram(name)
	return h
}

// Int64Histogram returns an int64 histogram (sizes in bytes).
func (m *Meter) Int64Histogram(name, unit, desc string) metric.Int64Histogram {
	if m.check(name, unit, desc) {
		h, err := m.m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && h != nil {
			return h
		}
	}
	h, _ := m.noop.Int64Histogram(name)
	return h
}

// Gauge returns a synchronous float64 gauge.
func (m *Meter) Gauge(name, unit, desc string) metric.Float64Gauge {
	if m.check(name, unit, desc) {
		g, err := m.m.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && g != nil {
			return g
		}
	}
	g, _ := m.noop.Float64Gauge(name)
	return g
}

// ObservableCounter returns an int64 counter observed by a callback.
func (m *Meter) ObservableCounter(name, unit, desc string) metric.Int64ObservableCounter {
	if m.check(name, unit, desc) {
		c, err := m.m.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && c != nil {
			return c
		}
	}
	c, _ := m.noop.Int64ObservableCounter(name)
	return c
}

// ObservableGauge returns an int64 gauge observed by a callback.
func (m *Meter) ObservableGauge(name, unit, desc string) metric.Int64ObservableGauge {
	if m.check(name, unit, desc) {
		g, err := m.m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && g != nil {
			return g
		}
	}
	g, _ := m.noop.Int64ObservableGauge(name)
	return g
}

// FloatObservableGauge returns a float64 gauge observed by a callback.
func (m *Meter) FloatObservableGauge(name, unit, desc string) metric.Float64ObservableGauge {
	if m.check(name, unit, desc) {
		g, err := m.m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if m.keep(name, err) && g != nil {
			return g
		}
	}
	g, _ := m.noop.Float64ObservableGauge(name)
	return g
}

// RegisterCallback registers f for insts. When registration fails it
// records the error and returns a no-op Registration.
func (m *Meter) RegisterCallback(f metric.Callback, insts ...metric.Observable) metric.Registration {
	r, err := m.m.RegisterCallback(f, insts...)
	if m.keep("callback", err) && r != nil {
		return r
	}
	r, _ = m.noop.RegisterCallback(f, insts...)
	return r
}

// Attribute keys of the OpenTelemetry semantic conventions that the SDK's
// metrics carry.
const (
	// KeyTopic is the Kafka topic (messaging.destination.name).
	KeyTopic = "messaging.destination.name"
	// KeyPartition is the Kafka partition, a string as the conventions
	// define it (messaging.destination.partition.id).
	KeyPartition = "messaging.destination.partition.id"
	// KeyDatabase and KeyTable name a ClickHouse table (db.namespace,
	// db.collection.name).
	KeyDatabase = "db.namespace"
	KeyTable    = "db.collection.name"
)

// Partition returns the attributes of a Kafka topic-partition.
func Partition(topic string, partition int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(KeyTopic, topic),
		attribute.String(KeyPartition, strconv.Itoa(partition)),
	}
}
