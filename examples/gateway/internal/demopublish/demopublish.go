package demopublish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// Rates are the faults Faulty injects: fractions of the publishes.
type Rates struct {
	// Before fails a publish before the write, as an unreachable broker
	// would (the delivery is answered 503).
	Before float64
	// After fails a publish after the write, as a lost acknowledgement
	// would (answered 503: the retry writes the event again).
	After float64
	// Seed of the draws.
	Seed uint64
}

// On reports whether r injects any fault.
func (r Rates) On() bool { return r.Before > 0 || r.After > 0 }

// Validate refuses rates that are not fractions summing to at most 1.
func (r Rates) Validate() error {
	if r.Before < 0 || r.After < 0 || r.Before+r.After > 1 {
		return fmt.Errorf("-inject-publish-failures %g and -inject-lost-acks %g: want fractions summing to at most 1", r.Before, r.After)
	}
	return nil
}

// Errors of injected faults. Either way the handler answers 503 and the
// provider retries; after ErrAckLost the event is in Kafka already, and the
// retry writes it again (the processor's dedup drops the copy).
var (
	ErrUnreachable = errors.New("injected fault: Kafka unreachable, nothing written")
	ErrAckLost     = errors.New("injected fault: Kafka wrote the event but the acknowledgement was lost")
)

// Faulty wraps a publish with the injected faults and counts them in
// gateway.injected_faults (fault = unreachable or ack_lost), which the
// gateway's /metrics serves as gateway_injected_faults_total. Safe for
// concurrent use.
type Faulty struct {
	next     idempotency.Func
	rates    Rates
	injected metric.Int64Counter

	mu  sync.Mutex
	rng *rand.Rand // concurrent deliveries draw from it
}

// NewFaulty returns next with the faults of rates.
func NewFaulty(next idempotency.Func, rates Rates, mp metric.MeterProvider) (*Faulty, error) {
	c, err := mp.Meter("github.com/exactlyonce/exactlyonce/examples/gateway").Int64Counter("gateway.injected_faults",
		metric.WithUnit("{fault}"), metric.WithDescription("Kafka publish faults injected by -inject-publish-failures and -inject-lost-acks."))
	if err != nil {
		return nil, err
	}
	return &Faulty{next: next, rates: rates, injected: c, rng: rand.New(rand.NewPCG(rates.Seed, 0x9a7e))}, nil
}

// Publish is an idempotency.Func.
func (f *Faulty) Publish(ctx context.Context, d idempotency.Delivery) error {
	f.mu.Lock()
	r := f.rng.Float64()
	f.mu.Unlock()
	if r < f.rates.Before {
		f.injected.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "unreachable")))
		return ErrUnreachable
	}
	if err := f.next(ctx, d); err != nil {
		return err
	}
	if r < f.rates.Before+f.rates.After {
		f.injected.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "ack_lost")))
		return ErrAckLost
	}
	return nil
}

// Naive is the first article's gateway, kept as its bug for
// demonstrations: the publish runs in the background and is never
// awaited, so the handler marks the delivery id done and answers 2xx
// before Kafka acknowledged anything. A publish that fails is only logged:
// the provider got its 2xx and does not retry, and a retry or redelivery
// would be answered from the store as a duplicate. The event is lost.
type Naive struct {
	next     idempotency.Func
	log      *slog.Logger
	inflight sync.WaitGroup
}

// NewNaive returns the naive face of next.
func NewNaive(next idempotency.Func, log *slog.Logger) *Naive {
	return &Naive{next: next, log: log}
}

// Publish is an idempotency.Func that returns at once.
func (n *Naive) Publish(_ context.Context, d idempotency.Delivery) error {
	n.inflight.Go(func() {
		if err := n.next(context.Background(), d); err != nil {
			n.log.Warn("naive gateway: publish failed after the delivery was answered 2xx: the event is lost", "delivery", d.Key, "err", err)
		}
	})
	return nil
}

// Wait waits for the publishes in flight, at shutdown.
func (n *Naive) Wait() { n.inflight.Wait() }
