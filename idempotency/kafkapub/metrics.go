package kafkapub

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// instruments are the metrics both publishers report, with one meaning.
type instruments struct {
	published metric.Int64Counter
	latency   metric.Float64Histogram
	resets    metric.Int64Counter
	// results holds the option of each result=ok|failed|unknown, built
	// once: a Publish records its result without allocating.
	results map[string][]metric.AddOption
}

func newInstruments(mp metric.MeterProvider) (instruments, error) {
	m := meter.New(mp, "idempotency/kafkapub")
	in := instruments{
		published: m.Counter("exactlyonce.kafkapub.messages", "{message}", "Publishes by result: ok, failed, unknown."),
		latency:   m.Histogram("exactlyonce.kafkapub.publish.duration", "s", "Time from Publish to the broker's acknowledgement."),
		resets: m.Counter("exactlyonce.kafkapub.writer.resets", "{reset}",
			"Replacements of the kafka-go Writers and Transport after publishes in a row with an unknown outcome or stale metadata."),
	}
	if err := m.Err(); err != nil {
		return instruments{}, fmt.Errorf("kafkapub: metrics: %w", err)
	}
	in.results = make(map[string][]metric.AddOption)
	for _, r := range []string{"ok", "failed", "unknown"} {
		in.results[r] = []metric.AddOption{metric.WithAttributes(attribute.String("result", r))}
	}
	return in, nil
}

// record counts one Publish that started at start and ended with err.
func (in instruments) record(ctx context.Context, start, end time.Time, err error) {
	result := "ok"
	switch {
	case err == nil:
	case IsOutcomeUnknown(err):
		result = "unknown"
	default:
		result = "failed"
	}
	in.published.Add(ctx, 1, in.results[result]...)
	in.latency.Record(ctx, end.Sub(start).Seconds())
}
