package demo

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"
)

// awaitExact waits until the processors have checkpointed every record in
// Kafka and ClickHouse then holds exactly what the providers sent, and fails
// at once on a duplicate, or with the gap after a timeout. Requiring the
// checkpoints first means a replay still pending after the last kill cannot
// add a duplicate after the verdict.
func (d *Pipeline) awaitExact(ctx context.Context, events []Delivery) error {
	want := Expect(events)
	deadline := time.Now().Add(ConvergeTimeout())
	for {
		var gap []string
		lag, lagErr := CheckpointLag(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions, d.Supervisor.Joined())
		got, err := Observe(ctx, d.Servers.ClickHouseAddr, d.DB)
		if err == nil {
			gap = Diff(want, got)
			if len(gap) == 0 && lagErr == nil && lag == 0 {
				d.Say("every Kafka record checkpointed; ClickHouse: normalized_events %d rows = %d distinct events sent; %d employee-hours exact in employee_metrics_hourly (materialized view) and employee_metrics_window FINAL (merged PRs, review comments, reviews and their average latency, deployments, incidents); deployments FINAL %d and incidents FINAL %d exact",
					got.Rows, want.Events, len(want.Metrics), want.DeploymentsTotal, want.IncidentsTotal)
				return d.CheckDeadLetters(ctx)
			}
			if got.Rows > uint64(want.Events) {
				return fmt.Errorf("DUPLICATES in ClickHouse:\n  %s", Summarize(gap))
			}
			if len(gap) == 0 {
				gap = []string{fmt.Sprintf("exact, but %d records not yet checkpointed (%v)", lag, lagErr)}
			}
		} else {
			gap = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if os.Getenv("PIPELINE_DUMP") != "" {
				d.Supervisor.Signal(syscall.SIGQUIT) // the processors' goroutines, to see where they stall
				time.Sleep(time.Second)
			}
			return fmt.Errorf("ClickHouse did not converge to the expected result (Kafka holds %d records):\n  %s",
				kafkaRecords(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions), Summarize(gap))
		}
		if os.Getenv("PIPELINE_GAP") != "" { // say what is still missing, every half second

			d.Say("gap: %s", Summarize(gap))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ConvergeTimeout bounds the wait for ClickHouse to hold the expected result
// once every event was delivered (PIPELINE_CONVERGE overrides it).
func ConvergeTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PIPELINE_CONVERGE")); err == nil {
		return d
	}
	return 3 * time.Minute
}
