//go:build !demo

package main

import (
	"context"
	"flag"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// demoFlags are empty in the processor you deploy: the demo harness's
// naive sinks, the chaos run's clock offset and transactional leg exist
// only in its build (demo.go, -tags demo).
type demoFlags struct{}

func (*demoFlags) register(*flag.FlagSet) {}

func (demoFlags) naives(string) ([]devmetrics.Naive, error) { return nil, nil }

func (demoFlags) createTables(context.Context, ch.Options, string) error { return nil }

func (demoFlags) clock(context.Context) func() time.Time { return nil }

func (demoFlags) withOutput(chain kafkasource.BuildChain, _ string, _ []string, _ time.Duration) kafkasource.BuildChain {
	return chain
}
