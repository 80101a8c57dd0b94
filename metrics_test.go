package exactlyonce_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/githubredeliver"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/state"
	"github.com/exactlyonce/exactlyonce/window"
)

// instrument is one registered metric as docs/metrics.md's table lists it.
type instrument struct {
	Name, Kind, Unit string
}

// recorder is a MeterProvider that notes every instrument created through
// it, measured or not (an SDK reader exports only instruments that
// recorded something), and otherwise does nothing.
type recorder struct {
	embedded.MeterProvider
	mu   sync.Mutex
	got  []instrument
	noop metric.Meter
}

func (r *recorder) note(name, kind, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, instrument{name, kind, unit})
}

func (r *recorder) Meter(string, ...metric.MeterOption) metric.Meter {
	return &recMeter{Meter: r.noop, r: r}
}

type recMeter struct {
	metric.Meter
	r *recorder
}

func (m *recMeter) Int64Counter(n string, o ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	m.r.note(n, "counter", metric.NewInt64CounterConfig(o...).Unit())
	return m.Meter.Int64Counter(n, o...)
}

func (m *recMeter) Int64UpDownCounter(n string, o ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	m.r.note(n, "updowncounter", metric.NewInt64UpDownCounterConfig(o...).Unit())
	return m.Meter.Int64UpDownCounter(n, o...)
}

func (m *recMeter) Int64Histogram(n string, o ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	m.r.note(n, "histogram", metric.NewInt64HistogramConfig(o...).Unit())
	return m.Meter.Int64Histogram(n, o...)
}

func (m *recMeter) Float64Histogram(n string, o ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	m.r.note(n, "histogram", metric.NewFloat64HistogramConfig(o...).Unit())
	return m.Meter.Float64Histogram(n, o...)
}

func (m *recMeter) Float64Gauge(n string, o ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	m.r.note(n, "gauge", metric.NewFloat64GaugeConfig(o...).Unit())
	return m.Meter.Float64Gauge(n, o...)
}

func (m *recMeter) Int64ObservableCounter(n string, o ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	m.r.note(n, "counter", metric.NewInt64ObservableCounterConfig(o...).Unit())
	return m.Meter.Int64ObservableCounter(n, o...)
}

func (m *recMeter) Int64ObservableGauge(n string, o ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	m.r.note(n, "gauge", metric.NewInt64ObservableGaugeConfig(o...).Unit())
	return m.Meter.Int64ObservableGauge(n, o...)
}

func (m *recMeter) Float64ObservableGauge(n string, o ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	m.r.note(n, "gauge", metric.NewFloat64ObservableGaugeConfig(o...).Unit())
	return m.Meter.Float64ObservableGauge(n, o...)
}

// registered builds every component of the SDK that has metrics with a
// recorder and returns what they registered. Nothing here needs a server:
// chsink and kafkapub register their instruments before they connect.
func registered(t *testing.T) []instrument {
	ctx := context.Background()
	rec := &recorder{noop: noop.NewMeterProvider().Meter("")}

	d, err := dedup.New(time.Hour, dedup.Options{MeterProvider: rec})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })

	kv, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{MeterProvider: rec})
	require.NoError(t, err)
	t.Cleanup(func() { _ = kv.Close() })

	_, err = window.New(window.Tumbling(time.Minute), window.Count[string]{}, window.Options{MeterProvider: rec})
	require.NoError(t, err)

	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{MeterProvider: rec})
	require.NoError(t, err)
	t.Cleanup(func() { _ = coord.Close() })
	_, err = kafkasource.New(kafkasource.Group{Brokers: []string{"127.0.0.1:1"}, ID: "g", Topics: []string{"t"}}, coord,
		func(context.Context, checkpoint.TopicPartition) (*kafkasource.Processor, error) { return nil, nil },
		kafkasource.Options{MeterProvider: rec})
	require.NoError(t, err)

	mem, err := idempotency.NewMemoryStore(idempotency.MemoryOptions{})
	require.NoError(t, err)
	_, err = idempotency.NewHandler(mem, func(context.Context, idempotency.Delivery) error { return nil },
		idempotency.Options{Provider: idempotency.GitHub(), MeterProvider: rec})
	require.NoError(t, err)

	pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if p, err := kafkapub.New(pctx, []string{"127.0.0.1:1"}, "t", kafkapub.Options{MeterProvider: rec}); err == nil {
		_ = p.Close()
	}

	_, err = githubredeliver.New(githubredeliver.RepoHook("o", "r", 1), githubredeliver.Options{Token: "t", MeterProvider: rec})
	require.NoError(t, err)

	_, err = kafkasink.New([]string{"127.0.0.1:1"}, "p", checkpoint.TopicPartition{Topic: "t"}, kafkasink.Options{MeterProvider: rec})
	require.NoError(t, err)

	type row struct{ N int64 }
	// No server listens on port 1: New fails at the dial, after the
	// instruments exist. Were that order to change, the chsink rows of the
	// table would go missing and this test would say so.
	_, err = chsink.New(ctx, chsink.Table{Addr: "127.0.0.1:1", Name: "t"}, checkpoint.TopicPartition{Topic: "t"},
		checkpoint.NewMemoryStorage(), func() []chsink.Column[row] {
			return []chsink.Column[row]{chsink.Int64("n", func(r *row) int64 { return r.N })}
		}, chsink.Options{MeterProvider: rec, DialTimeout: 100 * time.Millisecond})
	require.Error(t, err)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	got := slices.Clone(rec.got)
	slices.SortFunc(got, func(a, b instrument) int { return strings.Compare(a.Name, b.Name) })
	return slices.Compact(got)
}

// readmeMetrics parses the metric table of docs/metrics.md: rows
// | `name` | kind | unit | attributes | description |.
func readmeMetrics(t *testing.T) []instrument {
	b, err := os.ReadFile(filepath.Join("docs", "metrics.md"))
	require.NoError(t, err)
	rowRE := regexp.MustCompile("^\\| `([^`]+)` \\| ([a-z]+) \\| `([^`]*)` \\|")
	var rows []instrument
	for line := range strings.SplitSeq(string(b), "\n") {
		if m := rowRE.FindStringSubmatch(line); m != nil {
			rows = append(rows, instrument{m[1], m[2], m[3]})
		}
	}
	slices.SortFunc(rows, func(a, b instrument) int { return strings.Compare(a.Name, b.Name) })
	return rows
}

// TestMetricsTable keeps docs/metrics.md's metric table and the instruments the
// packages register the same: a metric added, renamed or given another
// unit without the table (or the other way round) fails here.
func TestMetricsTable(t *testing.T) {
	got := registered(t)
	require.NotEmpty(t, got)
	for _, in := range got {
		assert.True(t, strings.HasPrefix(in.Name, "exactlyonce."), "%s lacks the exactlyonce. prefix", in.Name)
		assert.NotEmpty(t, in.Unit, "%s has no unit", in.Name)
	}
	assert.Equal(t, got, readmeMetrics(t), "docs/metrics.md's metric table (want) differs from what the code registers (got first)")
}
