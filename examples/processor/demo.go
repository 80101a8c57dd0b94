//go:build demo

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
)

// demoFlags are the demo harness's flags, in its build of the processor
// only (go build -tags demo; harness/internal/demo builds it so): the naive sinks
// beside the correct ones, and the chaos run's clock offset. A plain build
// has none (nodemo.go).
type demoFlags struct {
	naive     string
	clockFile string
	// output and outputTimeout: the chaos run's transactional leg.
	output        string
	outputTimeout time.Duration
}

func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.output, "output-topic", "", "FOR THE CHAOS RUN: also write every record of -topic the chain processed to this topic, same partition, key <partition>/<offset>, through a kafkasink.Sink (one Kafka transaction per checkpoint); the topic must exist")
	fs.DurationVar(&d.outputTimeout, "output-transaction-timeout", kafkatxn.DefaultTransactionTimeout, "FOR THE CHAOS RUN: the -output-topic sink's transaction timeout")
	fs.StringVar(&d.clockFile, "clock-offset-file", "", "FOR THE CHAOS RUN: a file holding a duration (e.g. -90s) added to the processing clock of the checkpoints, the sinks and the window operator, read again every 100 ms, so that the harness can make the wall clock jump")
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

// clock returns the processing clock -clock-offset-file asks for, nil
// without it: time.Now plus the file's duration, read again every 100 ms
// until ctx ends. A file missing or unreadable leaves the offset as it
// was.
func (d demoFlags) clock(ctx context.Context) func() time.Time {
	if d.clockFile == "" {
		return nil
	}
	var offset atomic.Int64
	read := func() {
		if b, err := os.ReadFile(d.clockFile); err == nil {
			if o, err := time.ParseDuration(strings.TrimSpace(string(b))); err == nil {
				offset.Store(int64(o))
			}
		}
	}
	read()
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
}

// withOutput returns chain with, for -output-topic, a transactional leg on
// the partitions of topic: every record the chain processed without error
// (poison records go to the dead-letter topic instead) is written again to
// the output topic, same partition, key "<partition>/<offset>", by a
// kafkasink.Sink registered as participant "zz-output" (participants
// snapshot in name order: after every one that may decline). The chaos
// run checks that the output holds each such record exactly once.
func (d demoFlags) withOutput(chain kafkasource.BuildChain, topic string, brokers []string, interval time.Duration) kafkasource.BuildChain {
	if d.output == "" {
		return chain
	}
	return func(ctx context.Context, parts *checkpoint.Chain) (*kafkasource.Processor, error) {
		proc, err := chain(ctx, parts)
		if err != nil || parts.Partition().Topic != topic {
			return proc, err
		}
		out, err := kafkasink.Open(parts, "zz-output", brokers, "chaos-output", kafkasink.Options{
			Tx: kafkatxn.TxOptions{TransactionTimeout: d.outputTimeout}, CheckpointInterval: interval})
		if err != nil {
			return nil, err
		}
		process := proc.Process
		proc.Process = func(ctx context.Context, m kafka.Message) error {
			if err := process(ctx, m); err != nil {
				return err
			}
			key := fmt.Appendf(nil, "%d/%d", m.Partition, m.Offset)
			return out.Add(ctx, d.output, m.Partition, kafkatxn.Record{Key: key, Value: key})
		}
		return proc, nil
	}
}
