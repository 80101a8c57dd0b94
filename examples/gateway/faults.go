package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// faultRates are the -inject-* flags: the two failures of a Kafka publish
// that matter, injected on purpose so a demo or a test can watch the
// gateway and the stream processor recover. Never set them in production.
type faultRates struct {
	before, after float64 // fractions of publishes
	seed          uint64
}

func (f *faultRates) flags(s *settings) {
	s.Float64(&f.before, "inject-publish-failures", "GATEWAY_INJECT_PUBLISH_FAILURES", 0,
		"FOR DEMOS AND TESTS: fail this fraction of Kafka publishes before the write, as an unreachable broker would (the delivery is answered 503)")
	s.Float64(&f.after, "inject-lost-acks", "GATEWAY_INJECT_LOST_ACKS", 0,
		"FOR DEMOS AND TESTS: fail this fraction of Kafka publishes after the write, as a lost acknowledgement would (answered 503: the retry writes the event again)")
	s.Uint64(&f.seed, "inject-seed", "GATEWAY_INJECT_SEED", 1, "seed of the injected faults")
}

func (f faultRates) on() bool { return f.before > 0 || f.after > 0 }

func (f faultRates) validate() error {
	if f.before < 0 || f.after < 0 || f.before+f.after > 1 {
		return fmt.Errorf("-inject-publish-failures %g and -inject-lost-acks %g: want fractions summing to at most 1", f.before, f.after)
	}
	return nil
}

// Errors of injected faults. Either way the handler answers 503 and the
// provider retries; after errAckLost the event is in Kafka already, and the
// retry writes it again (the processor's dedup drops the copy).
var (
	errUnreachable = errors.New("injected fault: Kafka unreachable, nothing written")
	errAckLost     = errors.New("injected fault: Kafka wrote the event but the acknowledgement was lost")
)

// faultyPublish wraps the publisher with the injected faults and counts
// them in gateway.injected_faults (fault = unreachable or ack_lost), which
// /metrics serves as gateway_injected_faults_total.
type faultyPublish struct {
	next     idempotency.Func
	rates    faultRates
	injected metric.Int64Counter

	mu  sync.Mutex
	rng *rand.Rand // concurrent deliveries draw from it
}

func newFaultyPublish(next idempotency.Func, rates faultRates, mp metric.MeterProvider) (*faultyPublish, error) {
	c, err := mp.Meter("github.com/exactlyonce/exactlyonce/examples/gateway").Int64Counter("gateway.injected_faults",
		metric.WithUnit("{fault}"), metric.WithDescription("Kafka publish faults injected by -inject-publish-failures and -inject-lost-acks."))
	if err != nil {
		return nil, err
	}
	return &faultyPublish{next: next, rates: rates, injected: c, rng: rand.New(rand.NewPCG(rates.seed, 0x9a7e))}, nil
}

func (f *faultyPublish) publish(ctx context.Context, d idempotency.Delivery) error {
	f.mu.Lock()
	r := f.rng.Float64()
	f.mu.Unlock()
	if r < f.rates.before {
		f.injected.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "unreachable")))
		return errUnreachable
	}
	if err := f.next(ctx, d); err != nil {
		return err
	}
	if r < f.rates.before+f.rates.after {
		f.injected.Add(ctx, 1, metric.WithAttributes(attribute.String("fault", "ack_lost")))
		return errAckLost
	}
	return nil
}
