package demo

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// A run with Config.Naive runs one joint the naive way beside the correct
// pipeline, on the same deliveries and faults (package devmetrics, type
// Naive, says what each one does), and prints the naive and the correct
// figure side by side. The correct path must still be exact; the naive one
// is reported, never required, since a bug that needs a fault may miss it
// in a run (the report says so).

// Figure is one line of the naive report: a metric's ground truth, the
// naive joint's figure and the correct pipeline's.
type Figure struct {
	Metric                string
	Truth, Naive, Correct float64
}

// hasNaive reports whether joint n runs the naive way.
func (d *Pipeline) hasNaive(n devmetrics.Naive) bool { return slices.Contains(d.naives, n) }

// naiveTopic is where the naive gateway publishes.
func (d *Pipeline) naiveTopic() string { return d.Topic + "_naive" }

// setUpNaive creates what the naive joint needs once the servers run.
func (d *Pipeline) setUpNaive(ctx context.Context) error {
	conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	var queries []string
	for _, n := range d.naives {
		queries = append(queries, devmetrics.NaiveDDL(d.DB, n)...)
	}
	if d.hasNaive(devmetrics.NaiveMerge) {
		// Background merges are held back on the ReplacingMergeTree tables
		// (no part is small enough to merge), as on a server whose merges
		// lag behind the inserts: the read sees the versions a merge would
		// collapse later. A table setting, so that it survives the
		// ClickHouse restarts (SYSTEM STOP MERGES would not).
		for _, t := range []string{"deployments", "incidents", "employee_metrics_window"} {
			queries = append(queries, "ALTER TABLE "+d.DB+"."+t+" MODIFY SETTING max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1")
		}
	}
	for _, q := range queries {
		if err := conn.Do(ctx, ch.Query{Body: q}); err != nil {
			return fmt.Errorf("naive joints: %w", err)
		}
	}
	return nil
}

// startNaiveGateway starts the naive gateway beside the correct one, on a
// topic of its own, with the same injected faults.
func (d *Pipeline) startNaiveGateway(ctx context.Context) error {
	if err := createTopic(ctx, d.Servers.Brokers, d.naiveTopic(), d.Config.Partitions); err != nil {
		return err
	}
	args := []string{"-naive=gateway", "-pipeline=devmetrics", "-idempotent-producer", "-brokers=" + strings.Join(d.Servers.Brokers, ","),
		"-topic=" + d.naiveTopic(), "-retry-after=1s", d.LogLevel(), "-audit-topic=" + d.AuditTopic(), "-audit-stage=" + naiveGatewayStage}
	if d.Config.Faults {
		args = append(args, "-inject-publish-failures=0.03", fmt.Sprintf("-inject-seed=%d", d.Config.Seed+100))
	}
	gw, err := StartGateway(ctx, d.Binaries.Gateway, args, d.GatewayEnv, d.Output("gateway-naive"))
	if err != nil {
		return fmt.Errorf("naive gateway: %w", err)
	}
	d.Cleanups = append(d.Cleanups, func() { _ = gw.Stop() })
	d.naiveProv = &Provider{Client: &http.Client{Timeout: 10 * time.Second}, BaseURL: gw.URL()}
	d.naiveGW = gw
	d.Say("naive gateway (examples/gateway -naive gateway, pid %d) on %s beside the correct one: each delivery goes to both; it answers 2xx before Kafka acknowledged the event", gw.PID(), gw.URL())
	return nil
}

// deliverNaive sends d to the naive gateway as the provider would: Jira
// retries 408, 409, 425, 429 and 5xx, GitHub never retries (the naive
// gateway answers 2xx anyway). Answers are not checked: the naive
// gateway's figure is what reached Kafka.
func (d *Pipeline) deliverNaive(ctx context.Context, dl Delivery, dup bool) {
	n := 1
	if dup {
		n = 2
	}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			start := time.Now()
			for attempt := 0; ctx.Err() == nil; attempt++ {
				status, _, _, err := d.naiveProv.post(ctx, dl, attempt)
				if dl.Provider == "github" || (err == nil && !retried(status)) || time.Since(start) > jiraRetryWindow {
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// naiveFigures computes the report of the naive joint, once the correct
// pipeline is exact.
func (d *Pipeline) naiveFigures(ctx context.Context, naive devmetrics.Naive, want Expected) ([]Figure, error) {
	conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, Database: d.DB, DialTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	q := func(query string) (float64, error) {
		var v proto.ColFloat64
		err := conn.Do(ctx, ch.Query{Body: "SELECT ifNull(toFloat64(" + query + "), nan) AS v", Result: proto.Results{{Name: "v", Data: &v}}})
		if err != nil {
			return 0, fmt.Errorf("%s: %w", query, err)
		}
		return v[0], nil
	}
	var sum struct{ prs, comments, deployments, incidents, reviews, latency float64 }
	for _, m := range want.Metrics {
		sum.prs += float64(m.PRsMerged)
		sum.comments += float64(m.ReviewComments)
		sum.deployments += float64(m.Deployments)
		sum.incidents += float64(m.Incidents)
		sum.reviews += float64(m.Reviews)
		sum.latency += m.ReviewLatencyS
	}
	var lines []line
	switch naive {
	case devmetrics.NaiveGateway:
		_, naive, err := topicDeliveries(ctx, d.Servers.Brokers, d.naiveTopic(), d.Config.Partitions)
		if err != nil {
			return nil, err
		}
		_, right, err := topicDeliveries(ctx, d.Servers.Brokers, d.Topic, d.Config.Partitions)
		if err != nil {
			return nil, err
		}
		return []Figure{{Metric: "events in Kafka (distinct deliveries)", Truth: float64(want.Events), Naive: float64(naive), Correct: float64(right)}}, nil
	case devmetrics.NaiveSink:
		lines = []line{
			{"rows in the events table", float64(want.Events), "(SELECT count() FROM naive_sink_events)", "(SELECT count() FROM normalized_events)"},
			{"distinct events in it", float64(want.Events), "(SELECT uniqExact(source, event_id) FROM naive_sink_events)", "(SELECT uniqExact(source, event_id) FROM normalized_events)"},
			{"events lost", 0, "(SELECT " + strconv.Itoa(want.Events) + " - uniqExact(source, event_id) FROM naive_sink_events)",
				"(SELECT " + strconv.Itoa(want.Events) + " - uniqExact(source, event_id) FROM normalized_events)"},
			{"events written twice or more", 0, "(SELECT count() - uniqExact(source, event_id) FROM naive_sink_events)",
				"(SELECT count() - uniqExact(source, event_id) FROM normalized_events)"},
		}
	case devmetrics.NaiveMerge:
		lines = []line{
			{"deployments", sum.deployments, "(SELECT count() FROM deployments)", "(SELECT count() FROM deployments FINAL)"},
			{"incidents", sum.incidents, "(SELECT count() FROM incidents)", "(SELECT count() FROM incidents FINAL)"},
			{"merged PRs (window table)", sum.prs, "(SELECT sum(prs_merged) FROM employee_metrics_window)", "(SELECT sum(prs_merged) FROM employee_metrics_window FINAL)"},
			{"review comments (window table)", sum.comments, "(SELECT sum(review_comments) FROM employee_metrics_window)", "(SELECT sum(review_comments) FROM employee_metrics_window FINAL)"},
		}
	case devmetrics.NaiveMV:
		lines = []line{
			{"merged PRs (hourly rollup)", sum.prs, "(SELECT sumMerge(prs_merged) FROM naive_hourly)", "(SELECT sumMerge(prs_merged) FROM employee_metrics_hourly)"},
			{"review comments (hourly rollup)", sum.comments, "(SELECT sumMerge(review_comments) FROM naive_hourly)", "(SELECT sumMerge(review_comments) FROM employee_metrics_hourly)"},
			{"deployments (hourly rollup)", sum.deployments, "(SELECT sumMerge(deployments) FROM naive_hourly)", "(SELECT sumMerge(deployments) FROM employee_metrics_hourly)"},
			{"incidents (hourly rollup)", sum.incidents, "(SELECT sumMerge(incidents) FROM naive_hourly)", "(SELECT sumMerge(incidents) FROM employee_metrics_hourly)"},
			{"rows in the events table", float64(want.Events), "(SELECT count() FROM naive_mv_events)", "(SELECT count() FROM normalized_events)"},
		}
	case devmetrics.NaiveAvg:
		lines = []line{
			{"average review latency (s)", sum.latency / sum.reviews,
				"(SELECT avgMerge(review_latency_s) FROM mv_naive_avg_hourly)", "(SELECT avgMerge(review_latency_s) FROM employee_metrics_hourly)"},
		}
		naive, err := d.hourAvgs(ctx, conn, "mv_naive_avg_hourly")
		if err != nil {
			return nil, err
		}
		right, err := d.hourAvgs(ctx, conn, "employee_metrics_hourly")
		if err != nil {
			return nil, err
		}
		wrong := func(got map[string]float64) (n float64) {
			keys := make(map[string]devmetrics.Metrics, len(got))
			for k := range got {
				keys[k] = want.Metrics[k]
			}
			for _, k := range union(want.Metrics, keys) {
				a, ok := got[k]
				if !ok {
					a = math.NaN()
				}
				if !sameAvg(want.Metrics[k], a) {
					n++
				}
			}
			return n
		}
		hours := Figure{Metric: "employee-hours whose average is wrong", Truth: 0, Naive: wrong(naive), Correct: wrong(right)}
		figs, err := d.queryFigures(q, lines)
		return append(figs, hours), err
	}
	return d.queryFigures(q, lines)
}

type line struct {
	metric       string
	truth        float64
	naive, right string // queries
}

// queryFigures runs each line's two queries.
func (d *Pipeline) queryFigures(q func(string) (float64, error), lines []line) ([]Figure, error) {
	figs := make([]Figure, 0, len(lines))
	for _, l := range lines {
		naive, err := q(l.naive)
		if err != nil {
			return nil, err
		}
		right, err := q(l.right)
		if err != nil {
			return nil, err
		}
		figs = append(figs, Figure{Metric: l.metric, Truth: l.truth, Naive: naive, Correct: right})
	}
	return figs, nil
}

// hourAvgs reads the average review latency of every employee-hour of a
// rollup table (nan for an hour without reviews in the correct one).
func (d *Pipeline) hourAvgs(ctx context.Context, conn *ch.Client, table string) (map[string]float64, error) {
	var org, emp proto.ColStr
	var hour proto.ColInt64
	var avg proto.ColFloat64
	out := map[string]float64{}
	err := conn.Do(ctx, ch.Query{
		Body: "SELECT CAST(org_id, 'String') AS o, employee_id AS e, toInt64(toUnixTimestamp(hour)) AS h, avgMerge(review_latency_s) AS a FROM " +
			table + " GROUP BY org_id, employee_id, hour",
		Result: proto.Results{{Name: "o", Data: &org}, {Name: "e", Data: &emp}, {Name: "h", Data: &hour}, {Name: "a", Data: &avg}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range avg.Rows() {
				out[fmt.Sprintf("%s|%s|%d", org.Row(i), emp.Row(i), hour[i])] = avg[i]
			}
			return nil
		},
	})
	return out, err
}

// same compares two figures up to the rounding of float sums.
func same(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a)) }

// reportNaive prints the figures side by side and says whether the naive
// joint showed its bug. It fails only if the correct column is not exact.
func (d *Pipeline) reportNaive(naive devmetrics.Naive, figs []Figure) (shows bool, err error) {
	what := map[devmetrics.Naive]string{
		devmetrics.NaiveGateway: "the gateway answers 2xx before Kafka acknowledged (a background publish that fails is lost; the provider does not retry a 2xx)",
		devmetrics.NaiveSink:    "a buffering sink outside the checkpoints (flushed every 1,000 rows or 5 s when a record arrives, a batch dropped after its retries)",
		devmetrics.NaiveMerge:   "ReplacingMergeTree tables read without FINAL (merges held back on them: the read sees what it sees before a merge)",
		devmetrics.NaiveMV:      "inserts without deduplicate_blocks_in_dependent_materialized_views (a batch replayed after a kill is dropped by the events table but counted again by its rollup view)",
		devmetrics.NaiveAvg:     "the hourly rollup averaging every event, 0 for an event that is no review (the avgState(toFloat64(0)) placeholder)",
	}[naive]
	d.Say("naive %s: %s; beside it the correct pipeline, on the same deliveries and faults:", naive, what)
	width := len("metric")
	for _, f := range figs {
		width = max(width, len(f.Metric))
	}
	row := func(metric, truth, naive, correct string) {
		fmt.Fprintf(d.Config.Stdout, "    %-*s %14s %14s %14s\n", width, metric, truth, naive, correct)
	}
	row("metric", "ground truth", "naive", "correct")
	for _, f := range figs {
		row(f.Metric, num(f.Truth), num(f.Naive), num(f.Correct))
		if !same(f.Truth, f.Correct) {
			err = fmt.Errorf("naive %s: the correct pipeline's %s is %s, want %s", naive, f.Metric, num(f.Correct), num(f.Truth))
		}
		if !same(f.Truth, f.Naive) {
			shows = true
		}
	}
	if shows {
		d.Say("naive %s: its figures are wrong, the correct pipeline's exact", naive)
	} else {
		d.Say("naive %s: no difference in this run: the faults that expose it did not hit it this time (run again, or with more -events or -kills)", naive)
	}
	return shows, err
}

func num(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprintf("%.1f", f)
}
