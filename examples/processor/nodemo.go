//go:build !demo

package main

import (
	"context"
	"flag"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// demoFlags are empty in the processor you deploy: the demo harness's
// naive sinks exist only in its build (demo.go, -tags demo).
type demoFlags struct{}

func (*demoFlags) register(*flag.FlagSet) {}

func (demoFlags) naives(string) ([]devmetrics.Naive, error) { return nil, nil }

func (demoFlags) createTables(context.Context, ch.Options, string) error { return nil }
