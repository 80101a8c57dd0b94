package demo

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// The audit (package audit): the gateways and the processors count every
// stage per organisation and minute of event time into the audit table,
// through the same checkpoints and sink as the rows; at the end the demo
// compares the stages per organisation and hour, as `exactlyonce audit`
// does on a user's pipeline, from the pipeline's own counts alone, and
// prints the result beside the ground truth. Each naive joint is one more
// check, which must flag the buckets where it lost or doubled events
// (avg excepted: its counts are right, its average is not).

// naiveGatewayStage is what the naive gateway counts its 2xx answers as.
const naiveGatewayStage = "naive.gateway.accepted"

// AuditTopic is the topic of the gateways' audit counts.
func (d *Pipeline) AuditTopic() string { return d.Topic + "_audit" }

// auditChecks returns the sources to count and the checks, the naive
// joints' keyed by joint.
func (d *Pipeline) auditChecks() ([]chaudit.Source, []audit.Check, map[devmetrics.Naive]string) {
	sources := devmetrics.AuditSources()
	naive := map[devmetrics.Naive]string{}
	for _, n := range d.naives {
		var src chaudit.Source
		switch n {
		case devmetrics.NaiveGateway:
			naive[n] = naiveGatewayStage + "→kafka"
			continue
		case devmetrics.NaiveSink:
			src = chaudit.Source{Table: "naive_sink_events", Tenant: "org_id", Time: "event_time"}
		case devmetrics.NaiveMerge:
			src = chaudit.Source{Table: "employee_metrics_window", As: "employee_metrics_window_without_final", Tenant: "org_id", Time: "window_start", Count: "sum(version)"}
		case devmetrics.NaiveMV:
			src = chaudit.Source{Table: "naive_hourly", Tenant: "org_id", Time: "hour", Vs: devmetrics.StageRollup,
				Count: "sumMerge(prs_merged) + sumMerge(review_comments) + sumMerge(deployments) + sumMerge(incidents)"}
		default:
			continue
		}
		sources = append(sources, src)
		naive[n] = src.Check().Name
	}
	checks := []audit.Check{audit.GatewayCheck()}
	for _, s := range sources {
		checks = append(checks, s.Check())
	}
	for _, s := range devmetrics.AuditSources() { // the naive joints' sinks count nothing
		if c, ok := s.SinkCheck(); ok {
			checks = append(checks, c)
		}
	}
	if _, ok := naive[devmetrics.NaiveGateway]; ok {
		checks = append(checks, audit.Check{Name: naive[devmetrics.NaiveGateway], Upstream: naiveGatewayStage, Downstream: "kafka." + d.naiveTopic(), MayExceed: true})
	}
	return sources, checks, naive
}

// auditReport reads the counts and compares them by the hour.
// auditRetrying takes the audit's report, again after a failure until
// deadline: the audit only reads, and on a loaded machine a ClickHouse
// that restarted after an abort, or a Kafka busy with a restart, can let
// a dial or a fetch time out once.
func (d *Pipeline) auditRetrying(ctx context.Context, sources []chaudit.Source, checks []audit.Check, deadline time.Time) (*audit.Report, error) {
	for {
		rep, err := d.auditReport(ctx, sources, checks)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return rep, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (d *Pipeline) auditReport(ctx context.Context, sources []chaudit.Source, checks []audit.Check) (*audit.Report, error) {
	opts := ch.Options{Address: d.Servers.ClickHouseAddr}
	from, to := time.Unix(0, 0), time.Now().Add(100*365*24*time.Hour)
	totals, err := chaudit.Totals(ctx, opts, d.DB, "", from, to)
	if err != nil {
		return nil, err
	}
	for _, s := range sources {
		t, err := chaudit.TableCounts(ctx, opts, d.DB, s, time.Hour, from, to)
		if err != nil {
			return nil, err
		}
		totals = append(totals, t...)
	}
	if d.hasNaive(devmetrics.NaiveGateway) {
		t, err := topicCounts(ctx, d.Servers.Brokers, d.naiveTopic(), d.Config.Partitions)
		if err != nil {
			return nil, err
		}
		totals = append(totals, t...)
	}
	// The chaos run's second writer counted nothing upstream.
	totals = slices.DeleteFunc(totals, func(t audit.Total) bool { return strings.HasPrefix(t.Tenant, OtherWriterOrg) })
	// The run is over: every bucket is settled.
	return audit.Compare(totals, audit.CompareOptions{Now: to, Bucket: time.Hour, Checks: checks}), nil
}

// RunAudit waits until the correct pipeline's counts agree (the last
// deltas and counts are flushed within seconds of the last record), prints
// the report beside the ground truth and says what it flags of each naive
// joint.
func (d *Pipeline) RunAudit(ctx context.Context, want Expected) (*audit.Report, error) {
	sources, checks, naive := d.auditChecks()
	correct := func(f audit.Finding) bool {
		for _, name := range naive {
			if f.Check == name {
				return false
			}
		}
		return true
	}
	var rep *audit.Report
	var wrong []audit.Finding
	deadline := time.Now().Add(60 * time.Second)
	for {
		var err error
		if rep, err = d.auditRetrying(ctx, sources, checks, deadline); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		wrong = wrong[:0]
		for _, f := range rep.Findings {
			if correct(f) {
				wrong = append(wrong, f)
			}
		}
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	if len(wrong) == 0 && len(naive) > 0 {
		// The naive joints' counts settle as fast; one more look.
		time.Sleep(2 * time.Second)
		var err error
		if rep, err = d.auditRetrying(ctx, sources, checks, time.Now().Add(30*time.Second)); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	d.result.Audit = rep
	truth := AuditTruth(want)
	d.Say("audit (what `exactlyonce audit` sees: the stages' own counts per organisation and hour, no ground truth), beside the ground truth:")
	WriteAuditTotals(d.Config.Stdout, rep, truth)
	if d.Config.Verbose {
		_ = rep.WriteTable(d.Config.Stdout, false)
	}
	if len(wrong) > 0 {
		return rep, fmt.Errorf("audit: the correct pipeline's stages differ in %d buckets (first: %+v), while the ground truth says exact", len(wrong), wrong[0])
	}
	d.Say("audit: %d buckets, the correct pipeline's stages agree in every one", len(rep.Buckets))
	d.result.AuditFlags = map[devmetrics.Naive]bool{}
	for _, n := range d.naives {
		name, ok := naive[n]
		if !ok {
			d.Say("audit: naive %s is not a count: every stage counts right, the average is what is wrong; the audit cannot see it", n)
			continue
		}
		var flagged []audit.Finding
		for _, f := range rep.Findings {
			if f.Check == name && f.Status.Failed() {
				flagged = append(flagged, f)
			}
		}
		d.result.AuditFlags[n] = len(flagged) > 0
		if len(flagged) == 0 {
			d.Say("audit: naive %s (%s): no bucket differs in this run", n, name)
			continue
		}
		f := flagged[0]
		d.Say("audit: naive %s (%s) flagged in %d buckets, e.g. %s %s: %s %d upstream, %d downstream", n, name, len(flagged),
			f.Tenant, f.Bucket.Format("15:04"), strings.ToUpper(string(f.Status)), f.Upstream, f.Downstream)
	}
	return rep, nil
}

// AuditTruth is the ground truth of the audit's stages the harness knows.
func AuditTruth(want Expected) map[string]float64 {
	var rollup float64
	for _, m := range want.Metrics {
		rollup += float64(m.PRsMerged + m.ReviewComments + m.Deployments + m.Incidents)
	}
	return map[string]float64{
		audit.StageFirstSeen: float64(want.Events), devmetrics.StageRollup: rollup,
		audit.TableStage("normalized_events"): float64(want.Events), audit.TableStage("employee_metrics_window"): float64(want.Events),
		audit.TableStage("employee_metrics_hourly"): rollup, audit.SinkStage("normalized_events"): float64(want.Events),
	}
}

// WriteAuditTotals prints each stage's total over every bucket, with the
// ground truth where the harness knows one.
func WriteAuditTotals(w io.Writer, rep *audit.Report, truth map[string]float64) {
	width := len("stage")
	for _, s := range rep.Stages {
		width = max(width, len(s))
	}
	fmt.Fprintf(w, "    %-*s %14s %14s\n", width, "stage", "audit", "ground truth")
	for _, s := range rep.Stages {
		var n uint64
		for _, b := range rep.Buckets {
			n += b.Counts[s]
		}
		t := "-"
		if v, ok := truth[s]; ok {
			t = num(v)
		}
		fmt.Fprintf(w, "    %-*s %14d %14s\n", width, s, n, t)
	}
	fmt.Fprintf(w, "    %d buckets: %d ok, %d lost, %d duplicated\n", len(rep.Buckets), rep.OKCount, rep.Lost, rep.Duplicated)
}

// topicCounts counts a topic's records per organisation and hour of event
// time, decoded as the processor decodes them: what a full scan of the
// topic gives the audit.
func topicCounts(ctx context.Context, brokers []string, topic string, partitions int) ([]audit.Total, error) {
	counts := map[audit.Key]uint64{}
	stage := "kafka." + topic
	err := ScanTopic(ctx, brokers, topic, partitions, func(m kafka.Message) {
		ev, err := devmetrics.Decode(m)
		if err != nil {
			return // not counted, or poison
		}
		counts[audit.Key{Stage: stage, Tenant: ev.OrgID, Bucket: audit.BucketOf(ev.Time, time.Hour)}]++
	})
	if err != nil {
		return nil, err
	}
	out := make([]audit.Total, 0, len(counts))
	for k, n := range counts {
		out = append(out, audit.Total{Key: k, Count: n})
	}
	return out, nil
}
