package demo

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// Expected is what ClickHouse must hold once the pipeline caught up:
// computed here from the events the generator built, independently of the
// pipeline (the normalizer included).
type Expected struct {
	Events  int
	Metrics map[string]devmetrics.Metrics // org|employee|unix hour → the hour's metrics
	counts  map[string]uint64             // org|employee|unix hour → its events: the final row's version
	// deployments and incidents per org|employee|unix hour, as the
	// ReplacingMergeTree tables must count them: one row per deployment or
	// incident, in the hour it was deployed or opened.
	deployments, incidents           map[string]uint64
	DeploymentsTotal, IncidentsTotal int
}

func hourKey(org, employee string, t time.Time) string {
	return fmt.Sprintf("%s|%s|%d", org, employee, t.Truncate(time.Hour).Unix())
}

func Expect(ds []Delivery) Expected {
	e := Expected{Metrics: map[string]devmetrics.Metrics{}, counts: map[string]uint64{}, deployments: map[string]uint64{}, incidents: map[string]uint64{}}
	deployed := map[string]bool{}
	opened := map[string]bool{}
	for _, d := range ds {
		if d.Want == nil {
			continue
		}
		ev := *d.Want
		e.Events++
		k := hourKey(ev.OrgID, ev.EmployeeID, ev.Time)
		e.Metrics[k] = devmetrics.Agg{}.Add(e.Metrics[k], ev)
		e.counts[k]++
		switch ev.Type {
		case devmetrics.TypeDeployment:
			if id := ev.OrgID + "|" + ev.Subject; !deployed[id] {
				deployed[id] = true
				e.deployments[k]++
				e.DeploymentsTotal++
			}
		case devmetrics.TypeIncidentOpened, devmetrics.TypeIncidentTransitioned:
			if id := ev.OrgID + "|" + ev.Subject; !opened[id] {
				opened[id] = true
				e.incidents[hourKey(ev.OrgID, ev.EmployeeID, ev.Opened)]++
				e.IncidentsTotal++
			}
		}
	}
	return e
}

// OtherWriterOrg starts the organisation of every row that the chaos run's
// second writer (harness/internal/chaos) inserts into the pipeline's tables beside
// the processors; no generated event has such an organisation. Observe and
// the audit leave those rows out.
const OtherWriterOrg = "chaos-writer-"

// mine is the condition on org_id that leaves out the second writer's rows.
const mine = "NOT startsWith(toString(org_id), '" + OtherWriterOrg + "')"

// Observed is what ClickHouse holds.
type Observed struct {
	Rows, Distinct uint64
	Hourly         map[string]devmetrics.Metrics // employee_metrics_hourly; Reviews is 1 when an average exists
	HourlyAvg      map[string]float64
	Window         map[string]devmetrics.Metrics // employee_metrics_window FINAL
	WindowAvg      map[string]float64
	Deployments    map[string]uint64 // deployments FINAL
	Incidents      map[string]uint64 // incidents FINAL
}

func Observe(ctx context.Context, addr, db string) (Observed, error) {
	o := Observed{Hourly: map[string]devmetrics.Metrics{}, HourlyAvg: map[string]float64{}, Window: map[string]devmetrics.Metrics{},
		WindowAvg: map[string]float64{}, Deployments: map[string]uint64{}, Incidents: map[string]uint64{}}
	conn, err := ch.Dial(ctx, ch.Options{Address: addr, DialTimeout: 5 * time.Second})
	if err != nil {
		return o, err
	}
	defer conn.Close()

	var rows, distinct proto.ColUInt64
	if err := conn.Do(ctx, ch.Query{
		Body:   "SELECT count() AS n, uniqExact(source, event_id) AS d FROM " + db + ".normalized_events WHERE " + mine,
		Result: proto.Results{{Name: "n", Data: &rows}, {Name: "d", Data: &distinct}},
	}); err != nil {
		return o, err
	}
	o.Rows, o.Distinct = rows[0], distinct[0]

	var org, emp proto.ColStr
	var hour proto.ColInt64
	var prs, comments, reviews, deps, incs proto.ColUInt64
	var avg proto.ColFloat64
	read := func(into map[string]devmetrics.Metrics, avgs map[string]float64) func(context.Context, proto.Block) error {
		return func(context.Context, proto.Block) error {
			for i := range prs.Rows() {
				k := fmt.Sprintf("%s|%s|%d", org.Row(i), emp.Row(i), hour[i])
				into[k] = devmetrics.Metrics{PRsMerged: prs[i], ReviewComments: comments[i], Reviews: reviews[i],
					Deployments: deps[i], Incidents: incs[i]}
				avgs[k] = avg[i]
			}
			return nil
		}
	}
	results := proto.Results{{Name: "o", Data: &org}, {Name: "e", Data: &emp}, {Name: "h", Data: &hour},
		{Name: "p", Data: &prs}, {Name: "c", Data: &comments}, {Name: "r", Data: &reviews}, {Name: "a", Data: &avg},
		{Name: "d", Data: &deps}, {Name: "i", Data: &incs}}
	// The rollup: -Merge of the view's states. An average of no reviews is
	// the empty state, which avgMerge gives as nan: the column was never
	// diluted with zeros.
	if err := conn.Do(ctx, ch.Query{
		Body: "SELECT CAST(org_id, 'String') AS o, employee_id AS e, toInt64(toUnixTimestamp(hour)) AS h, " +
			"sumMerge(prs_merged) AS p, sumMerge(review_comments) AS c, toUInt64(NOT isNaN(avgMerge(review_latency_s))) AS r, " +
			"avgMerge(review_latency_s) AS a, sumMerge(deployments) AS d, sumMerge(incidents) AS i FROM " + db +
			".employee_metrics_hourly WHERE " + mine + " GROUP BY org_id, employee_id, hour",
		Result: results, OnResult: read(o.Hourly, o.HourlyAvg),
	}); err != nil {
		return o, err
	}
	// FINAL: a ReplacingMergeTree collapses rewritten windows only when parts
	// merge; FINAL applies the collapse at read time.
	if err := conn.Do(ctx, ch.Query{
		Body: "SELECT org_id AS o, employee_id AS e, toInt64(toUnixTimestamp(window_start)) AS h, prs_merged AS p, " +
			"review_comments AS c, reviews AS r, ifNull(avg_review_latency_s, nan) AS a, deployments AS d, incidents AS i FROM " +
			db + ".employee_metrics_window FINAL WHERE " + mine,
		Result: results, OnResult: read(o.Window, o.WindowAvg),
	}); err != nil {
		return o, err
	}
	var n proto.ColUInt64
	for table, into := range map[string]map[string]uint64{"deployments": o.Deployments, "incidents": o.Incidents} {
		at := map[string]string{"deployments": "deployed_at", "incidents": "opened_at"}[table]
		if err := conn.Do(ctx, ch.Query{
			Body: "SELECT CAST(org_id, 'String') AS o, employee_id AS e, toInt64(toUnixTimestamp(toStartOfHour(" + at + "))) AS h, " +
				"count() AS n FROM " + db + "." + table + " FINAL WHERE " + mine + " GROUP BY o, e, h",
			Result: proto.Results{{Name: "o", Data: &org}, {Name: "e", Data: &emp}, {Name: "h", Data: &hour}, {Name: "n", Data: &n}},
			OnResult: func(context.Context, proto.Block) error {
				for i := range n.Rows() {
					into[fmt.Sprintf("%s|%s|%d", org.Row(i), emp.Row(i), hour[i])] = n[i]
				}
				return nil
			},
		}); err != nil {
			return o, err
		}
	}
	return o, nil
}

// Diff lists every difference between what ClickHouse must hold and what it
// holds; empty means exact.
func Diff(e Expected, o Observed) []string {
	var d []string
	if o.Rows != uint64(e.Events) || o.Distinct != uint64(e.Events) {
		d = append(d, fmt.Sprintf("normalized_events: %d rows, %d distinct, want %d of each", o.Rows, o.Distinct, e.Events))
	}
	for _, k := range union(e.Metrics, o.Window) {
		want, got := e.Metrics[k], o.Window[k]
		if want != (devmetrics.Metrics{PRsMerged: got.PRsMerged, ReviewComments: got.ReviewComments, Reviews: got.Reviews,
			Deployments: got.Deployments, Incidents: got.Incidents, ReviewLatencyS: want.ReviewLatencyS}) ||
			!sameAvg(want, o.WindowAvg[k]) {
			d = append(d, fmt.Sprintf("employee_metrics_window %s: %+v avg %g, want %+v avg %g", k, got, o.WindowAvg[k], want, avgOf(want)))
		}
	}
	for _, k := range union(e.Metrics, o.Hourly) {
		want, got := e.Metrics[k], o.Hourly[k]
		hasAvg := uint64(0)
		if want.Reviews > 0 {
			hasAvg = 1
		}
		if got != (devmetrics.Metrics{PRsMerged: want.PRsMerged, ReviewComments: want.ReviewComments, Reviews: hasAvg,
			Deployments: want.Deployments, Incidents: want.Incidents}) || !sameAvg(want, o.HourlyAvg[k]) {
			d = append(d, fmt.Sprintf("employee_metrics_hourly %s: %+v avg %g, want %+v avg %g", k, got, o.HourlyAvg[k], want, avgOf(want)))
		}
	}
	for name, pair := range map[string][2]map[string]uint64{"deployments": {e.deployments, o.Deployments}, "incidents": {e.incidents, o.Incidents}} {
		for _, k := range union(pair[0], pair[1]) {
			if pair[0][k] != pair[1][k] {
				d = append(d, fmt.Sprintf("%s FINAL %s: %d, want %d", name, k, pair[1][k], pair[0][k]))
			}
		}
	}
	return d
}

func avgOf(m devmetrics.Metrics) float64 {
	if m.Reviews == 0 {
		return math.NaN()
	}
	return m.ReviewLatencyS / float64(m.Reviews)
}

// sameAvg compares an average review latency: absent (nan) exactly when
// there was no review, else equal up to the rounding of sums added in
// another order (Kafka's, not generation order).
func sameAvg(want devmetrics.Metrics, got float64) bool {
	a := avgOf(want)
	if math.IsNaN(a) || math.IsNaN(got) {
		return math.IsNaN(a) && math.IsNaN(got)
	}
	return math.Abs(a-got) <= 1e-9*math.Max(1, math.Abs(a))
}

func union[V any](a, b map[string]V) []string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func Summarize(d []string) string {
	if len(d) > 10 {
		d = append(d[:10:10], fmt.Sprintf("... and %d more", len(d)-10))
	}
	return strings.Join(d, "\n  ")
}
