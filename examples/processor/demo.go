//go:build demo

package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// demoFlags are the demo harness's flags, in its build of the processor
// only (go build -tags demo; internal/demo builds it so): the naive sinks
// beside the correct ones. A plain build has none (nodemo.go).
type demoFlags struct {
	naive string
}

func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.naive, "naive", "", "FOR DEMONSTRATION, beside the correct sinks (devmetrics only): sink runs the first article's buffering sink outside the checkpoints, into naive_sink_events; mv a sink that inserts without deduplicate_blocks_in_dependent_materialized_views, into naive_mv_events and its view (make demo NAIVE=sink or NAIVE=mv; both: sink,mv)")
}

// naives returns the naive joints -naive asks for.
func (d demoFlags) naives(pipeline string) ([]devmetrics.Naive, error) {
	if d.naive == "" {
		return nil, nil
	}
	naives, err := devmetrics.ParseNaives(d.naive)
	if err != nil {
		return nil, err
	}
	for _, n := range naives {
		if (n != devmetrics.NaiveSink && n != devmetrics.NaiveMV) || pipeline != "devmetrics" {
			return nil, fmt.Errorf("-naive %q: the processor runs only the naive sink and mv, with -pipeline devmetrics", d.naive)
		}
	}
	return naives, nil
}

// createTables creates what the naive joints need.
func (d demoFlags) createTables(ctx context.Context, opts ch.Options, database string) error {
	naives, err := d.naives("devmetrics")
	if err != nil || len(naives) == 0 {
		return err
	}
	c, err := ch.Dial(ctx, opts)
	if err != nil {
		return fmt.Errorf("connect to ClickHouse at %s: %w", opts.Address, err)
	}
	defer c.Close()
	for _, n := range naives {
		for _, q := range devmetrics.NaiveDDL(database, n) {
			if err := c.Do(ctx, ch.Query{Body: q}); err != nil {
				return fmt.Errorf("create the naive tables: %w", err)
			}
		}
	}
	return nil
}
