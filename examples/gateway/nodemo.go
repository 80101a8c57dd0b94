//go:build !demo

package main

import (
	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// demoFlags are empty in the gateway you deploy: the demo harness's fault
// and naive flags exist only in its build (demo.go, -tags demo).
type demoFlags struct{}

func (*demoFlags) register(*settings) {}

func (demoFlags) validate() error { return nil }

func (demoFlags) wrap(publish idempotency.Func, _ *slog.Logger, _ metric.MeterProvider) (idempotency.Func, func(), error) {
	return publish, func() {}, nil
}
