//go:build demo

package main

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/examples/gateway/internal/demopublish"
	"github.com/exactlyonce/exactlyonce/idempotency"
)

// demoFlags are the demo harness's flags, in its build of the gateway
// only (go build -tags demo; harness/internal/demo builds it so): Kafka publish
// faults and the naive gateway, package examples/gateway/internal/demopublish. The gateway
// warns loudly when they are set. A plain build has none (nodemo.go).
type demoFlags struct {
	faults demopublish.Rates
	naive  string
}

func (d *demoFlags) register(s *settings) {
	s.Float64(&d.faults.Before, "inject-publish-failures", "GATEWAY_INJECT_PUBLISH_FAILURES", 0,
		"FOR DEMOS AND TESTS: fail this fraction of Kafka publishes before the write, as an unreachable broker would (the delivery is answered 503)")
	s.Float64(&d.faults.After, "inject-lost-acks", "GATEWAY_INJECT_LOST_ACKS", 0,
		"FOR DEMOS AND TESTS: fail this fraction of Kafka publishes after the write, as a lost acknowledgement would (answered 503: the retry writes the event again)")
	s.Uint64(&d.faults.Seed, "inject-seed", "GATEWAY_INJECT_SEED", 1, "seed of the injected faults")
	s.String(&d.naive, "naive", "GATEWAY_NAIVE", "", "FOR DEMONSTRATION: gateway answers 2xx before Kafka acknowledged the event (the first article's bug: a failed publish is lost); make demo NAIVE=gateway")
}

func (d demoFlags) validate() error {
	if d.naive != "" && d.naive != "gateway" {
		return fmt.Errorf("-naive %q: the gateway runs only the naive gateway", d.naive)
	}
	return d.faults.Validate()
}

// wrap returns publish with the faults and the naive gateway the flags ask
// for, and what to call at shutdown before the publisher closes.
func (d demoFlags) wrap(publish idempotency.Func, log *slog.Logger, mp metric.MeterProvider) (idempotency.Func, func(), error) {
	if d.faults.On() {
		log.Warn("INJECTING KAFKA PUBLISH FAULTS: for demos and tests only", "fail_before_write", d.faults.Before, "lose_ack", d.faults.After)
		f, err := demopublish.NewFaulty(publish, d.faults, mp)
		if err != nil {
			return nil, nil, err
		}
		publish = f.Publish
	}
	if d.naive == "" {
		return publish, func() {}, nil
	}
	log.Warn("NAIVE GATEWAY: deliveries are answered 2xx before Kafka acknowledged them; a failed publish loses the event (for demonstrations only)")
	n := demopublish.NewNaive(publish, log)
	return n.Publish, n.Wait, nil
}
