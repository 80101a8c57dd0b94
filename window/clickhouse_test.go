package window_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// activity is a normalized webhook event: a review carries its latency, a
// merge carries none.
type activity struct {
	Type      string // "pr.reviewed" or "pr.merged"
	LatencyS  float64
	Employee  string
	EventTime time.Time
}

// reviewLatency averages the latency of review events only: a user-defined
// aggregator built on window.Avg. Merges add no sample, so a window with
// merges only has no average at all.
type reviewLatency struct{ window.Avg[float64] }

func (r reviewLatency) Add(acc window.Mean, a activity) window.Mean {
	if a.Type != "pr.reviewed" {
		return acc
	}
	return r.Avg.Add(acc, a.LatencyS)
}

// The article's bonus bug against the real server: a materialized view that
// reserves an average column with avgState(toFloat64(0)) dilutes every
// average with one zero per event, and reports 0 for an hour without a
// single review. The window operator's averages, written to a
// ReplacingMergeTree(version) twice over and read with FINAL, are exact and
// NULL where there is nothing to average.
func TestClickHouseAveragesExactWherePlaceholderDilutes(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	c := testkit.DialClickHouse(t, addr, db)
	ctx := t.Context()
	exec := func(q string) { require.NoError(t, c.Do(ctx, ch.Query{Body: q}), q) }

	hour := time.Date(2026, 10, 28, 10, 0, 0, 0, time.UTC)
	var events []activity
	add := func(typ, who string, at time.Duration, latency float64) {
		events = append(events, activity{Type: typ, Employee: who, EventTime: hour.Add(at), LatencyS: latency})
	}
	add("pr.reviewed", "alice", 5*time.Minute, 120)
	add("pr.merged", "alice", 7*time.Minute, 0)
	add("pr.reviewed", "alice", 20*time.Minute, 360.5)
	add("pr.reviewed", "bob", 21*time.Minute, 30)
	add("pr.merged", "bob", 40*time.Minute, 0)
	add("pr.merged", "bob", 70*time.Minute, 0) // bob, 11:00: no review at all
	add("pr.reviewed", "alice", 75*time.Minute, 45)
	add("pr.reviewed", "alice", 50*time.Minute, 600) // 25 minutes late: within allowed lateness
	add("pr.merged", "alice", 125*time.Minute, 0)

	// The seed's pipeline: raw events, an hourly rollup fed by a view that
	// reserves the latency column with a zero sample per event, and the
	// real latencies written into the same rollup as avg states.
	exec(`CREATE TABLE normalized_events (employee_id String, event_time DateTime, event_type String, latency_s Float64)
		ENGINE = ReplacingMergeTree ORDER BY (employee_id, event_time, event_type)`)
	for _, name := range []string{"metrics_placeholder", "metrics_neutral"} {
		exec(`CREATE TABLE ` + name + ` (employee_id String, window_end DateTime,
			pr_merged AggregateFunction(sum, UInt32), pr_review_latency_s AggregateFunction(avg, Float64))
			ENGINE = AggregatingMergeTree ORDER BY (employee_id, window_end)`)
	}
	view := `CREATE MATERIALIZED VIEW %s TO %s AS
		SELECT employee_id, toStartOfHour(event_time) AS window_end,
		       sumState(toUInt32(event_type = 'pr.merged')) AS pr_merged,
		       %s AS pr_review_latency_s
		FROM normalized_events GROUP BY employee_id, window_end`
	exec(fmt.Sprintf(view, "mv_placeholder", "metrics_placeholder", "avgState(toFloat64(0))"))
	exec(fmt.Sprintf(view, "mv_neutral", "metrics_neutral", "avgStateIf(toFloat64(0), 0)")) // the article's fix

	var who, typ proto.ColStr
	var when proto.ColDateTime
	var lat proto.ColFloat64
	for _, e := range events {
		who.Append(e.Employee)
		when.Append(e.EventTime)
		typ.Append(e.Type)
		lat.Append(e.LatencyS)
	}
	require.NoError(t, c.Do(ctx, ch.Query{
		Body:  "INSERT INTO normalized_events VALUES",
		Input: proto.Input{{Name: "employee_id", Data: &who}, {Name: "event_time", Data: &when}, {Name: "event_type", Data: &typ}, {Name: "latency_s", Data: &lat}},
	}))
	for _, name := range []string{"metrics_placeholder", "metrics_neutral"} {
		exec(`INSERT INTO ` + name + ` SELECT employee_id, toStartOfHour(event_time), sumState(toUInt32(0)), avgState(latency_s)
			FROM normalized_events WHERE event_type = 'pr.reviewed' GROUP BY employee_id, toStartOfHour(event_time)`)
	}

	// This package: one operator over the same events.
	clk := time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)
	op, err := window.New(window.Tumbling(time.Hour), window.Checkpointable[activity, window.Mean, float64](reviewLatency{}), window.Options{
		MaxOutOfOrderness: time.Minute,
		AllowedLateness:   30 * time.Minute,
		IdleTimeout:       time.Minute,
		Now:               func() time.Time { return clk },
	})
	require.NoError(t, err)
	var out window.Output[activity, float64]
	for _, e := range events {
		require.NoError(t, op.Add(window.Event[activity]{Key: e.Employee, Time: e.EventTime, Value: e}, &out))
	}
	clk = clk.Add(24 * time.Hour) // the stream goes quiet: idleness closes the rest
	op.Tick(&out)
	require.Empty(t, out.Late)
	require.Equal(t, window.Counters{Emitted: uint64(len(out.Rows))}, op.Counters())
	reemitted := 0
	for _, r := range out.Rows {
		if r.Key == "alice" && r.Start.Equal(hour) {
			reemitted++
		}
	}
	require.Equal(t, 2, reemitted, "alice's first hour is emitted, then re-emitted for the late review")

	exec(`CREATE TABLE review_latency_hourly (employee_id String, window_start DateTime, window_end DateTime,
		version UInt64, avg_latency_s Nullable(Float64))
		ENGINE = ReplacingMergeTree(version) ORDER BY (employee_id, window_start, window_end)`)
	insertRows := func(rows []window.Row[float64]) {
		var who proto.ColStr
		var start, end proto.ColDateTime
		var version proto.ColUInt64
		avg := proto.NewColNullable[float64](new(proto.ColFloat64))
		for _, r := range rows {
			who.Append(r.Key)
			start.Append(r.Start)
			end.Append(r.End)
			version.Append(r.Version)
			if r.Valid {
				avg.Append(proto.NewNullable(r.Result))
			} else {
				avg.Append(proto.Null[float64]())
			}
		}
		require.NoError(t, c.Do(ctx, ch.Query{
			Body: "INSERT INTO review_latency_hourly VALUES",
			Input: proto.Input{{Name: "employee_id", Data: &who}, {Name: "window_start", Data: &start},
				{Name: "window_end", Data: &end}, {Name: "version", Data: &version}, {Name: "avg_latency_s", Data: avg}},
		}))
	}
	insertRows(out.Rows)
	reversed := slices.Clone(out.Rows)
	slices.Reverse(reversed)
	insertRows(reversed) // at-least-once: everything again, newest first
	insertRows(out.Rows[:1])

	// The truth, straight from the events.
	type cell struct {
		employee string
		hour     time.Time
	}
	sum, n, all := map[cell]float64{}, map[cell]int{}, map[cell]int{}
	for _, e := range events {
		k := cell{e.Employee, e.EventTime.Truncate(time.Hour)}
		all[k]++
		if e.Type == "pr.reviewed" {
			sum[k] += e.LatencyS
			n[k]++
		}
	}

	type result struct {
		employee string
		hour     time.Time
		avg      proto.Nullable[float64]
	}
	query := func(q string) []result {
		var who proto.ColStr
		var h proto.ColDateTime
		avg := proto.NewColNullable[float64](new(proto.ColFloat64))
		var res []result
		require.NoError(t, c.Do(ctx, ch.Query{
			Body:   q,
			Result: proto.Results{{Name: "employee_id", Data: &who}, {Name: "hour", Data: &h}, {Name: "avg", Data: avg}},
			OnResult: func(_ context.Context, _ proto.Block) error {
				for i := range who.Rows() {
					res = append(res, result{who.Row(i), h.Row(i).UTC(), avg.Row(i)})
				}
				return nil
			},
		}), q)
		return res
	}
	placeholder := query(`SELECT employee_id, window_end AS hour, toNullable(avgMerge(pr_review_latency_s)) AS avg
		FROM metrics_placeholder GROUP BY employee_id, window_end ORDER BY employee_id, window_end`)
	neutral := query(`SELECT employee_id, window_end AS hour, toNullable(avgMerge(pr_review_latency_s)) AS avg
		FROM metrics_neutral GROUP BY employee_id, window_end ORDER BY employee_id, window_end`)
	ours := query(`SELECT employee_id, window_start AS hour, avg_latency_s AS avg
		FROM review_latency_hourly FINAL ORDER BY employee_id, window_start`)

	require.Len(t, placeholder, len(all))
	require.Len(t, ours, len(all))
	for i, r := range ours {
		k := cell{r.employee, r.hour}
		require.Contains(t, all, k)
		p := placeholder[i]
		require.Equal(t, k, cell{p.employee, p.hour})
		if n[k] == 0 {
			assert.False(t, r.avg.IsSet(), "%v: no reviews, no average (NULL)", k)
			assert.Equal(t, proto.NewNullable(0.0), p.avg, "%v: the placeholder invents an average of 0", k)
			continue
		}
		exact := sum[k] / float64(n[k])
		assert.Equal(t, proto.NewNullable(exact), r.avg, "%v: window average is exact", k)
		diluted := sum[k] / float64(n[k]+all[k])
		assert.InDelta(t, diluted, p.avg.Value, 1e-9, "%v: one zero sample per event", k)
		assert.Less(t, p.avg.Value, exact, "%v: the placeholder drags the average down", k)
		assert.InDelta(t, exact, neutral[i].avg.Value, 1e-9, "%v: avgStateIf(0, 0) is a true neutral element", k)
	}
	// What ReplacingMergeTree keeps for alice's first hour is the late
	// re-emission, not the first firing.
	assert.Equal(t, proto.NewNullable((120+360.5+600)/3), ours[0].avg)
	assert.False(t, math.IsNaN(ours[0].avg.Value))
}

// Early firings against the real server: while an hour fills, the hourly
// per-employee rows read with FINAL show the events so far (partial rows
// appear before the window closes), and once it closes FINAL holds exactly
// the final result, with every row inserted twice (at-least-once).
func TestClickHouseEarlyFiringsThenFinal(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	c := testkit.DialClickHouse(t, addr, db)
	ctx := t.Context()
	require.NoError(t, c.Do(ctx, ch.Query{Body: `CREATE TABLE merged_hourly (employee_id String, window_start DateTime,
		window_end DateTime, version UInt64, merged UInt64)
		ENGINE = ReplacingMergeTree(version) ORDER BY (employee_id, window_start, window_end)`}))

	insert := func(rows []window.Row[uint64]) {
		var who proto.ColStr
		var start, end proto.ColDateTime
		var version, merged proto.ColUInt64
		for range 2 {
			for _, r := range rows {
				who.Append(r.Key)
				start.Append(r.Start)
				end.Append(r.End)
				version.Append(r.Version)
				merged.Append(r.Result)
			}
		}
		require.NoError(t, c.Do(ctx, ch.Query{
			Body: "INSERT INTO merged_hourly VALUES",
			Input: proto.Input{{Name: "employee_id", Data: &who}, {Name: "window_start", Data: &start},
				{Name: "window_end", Data: &end}, {Name: "version", Data: &version}, {Name: "merged", Data: &merged}},
		}))
	}
	final := func() map[string]uint64 {
		var who proto.ColStr
		var h proto.ColDateTime
		var merged proto.ColUInt64
		got := map[string]uint64{}
		require.NoError(t, c.Do(ctx, ch.Query{
			Body:   "SELECT employee_id, window_start, merged FROM merged_hourly FINAL",
			Result: proto.Results{{Name: "employee_id", Data: &who}, {Name: "window_start", Data: &h}, {Name: "merged", Data: &merged}},
			OnResult: func(context.Context, proto.Block) error {
				for i := range who.Rows() {
					got[who.Row(i)+" "+h.Row(i).UTC().Format("15:04")] = merged.Row(i)
				}
				return nil
			},
		}))
		return got
	}

	hour := time.Date(2026, 10, 28, 10, 0, 0, 0, time.UTC)
	clk := hour
	op, err := window.New(window.Tumbling(time.Hour), window.Count[string]{}, window.Options{
		MaxOutOfOrderness: time.Minute,
		IdleTimeout:       -1,
		Early:             window.EarlyFiring{Interval: time.Minute},
		Now:               func() time.Time { return clk },
	})
	require.NoError(t, err)
	var out window.Output[string, uint64]
	truth := map[string]uint64{}
	// Three employees merge pull requests through the 10:00 hour; the
	// processing clock runs with event time.
	for m := range 60 {
		for i, who := range []string{"alice", "bob", "carol"} {
			if m%(i+2) != 0 {
				continue
			}
			require.NoError(t, op.Add(window.Event[string]{Key: who, Time: hour.Add(time.Duration(m) * time.Minute), Value: "pr.merged"}, &out))
			truth[who+" 10:00"]++
		}
		clk = hour.Add(time.Duration(m)*time.Minute + 30*time.Second)
		op.Tick(&out)
		if m == 29 {
			for _, r := range out.Rows {
				require.True(t, r.Early, "only partial rows before the hour closes")
			}
			insert(out.Rows)
			out.Reset()
			so := map[string]uint64{}
			for k := range truth {
				so[k] = truth[k]
			}
			assert.Equal(t, so, final(), "at 10:29:30 the current hour shows its events so far")
		}
	}
	op.EndInput(&out)
	insert(out.Rows)
	assert.Equal(t, truth, final(), "FINAL: exactly the final result")
}

// Session rows in a real ReplacingMergeTree(version, deleted) ordered by
// (employee, session start), every batch inserted twice (at-least-once):
// read with FINAL after each batch, the table holds no session that
// overlaps another of its employee, and at the end it holds exactly the
// sessions of the sorted events, although late events bridged sessions
// already in the table.
func TestClickHouseSessionsFinal(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	c := testkit.DialClickHouse(t, addr, db)
	ctx := t.Context()
	require.NoError(t, c.Do(ctx, ch.Query{Body: `CREATE TABLE sessions (employee_id String, session_start DateTime,
		session_end DateTime, version UInt64, deleted UInt8, events UInt64)
		ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (employee_id, session_start)`}))
	insert := func(rows []window.Row[uint64]) {
		var who proto.ColStr
		var start, end proto.ColDateTime
		var version, events proto.ColUInt64
		var deleted proto.ColUInt8
		for range 2 {
			for _, r := range rows {
				who.Append(r.Key)
				start.Append(r.Start)
				end.Append(r.End)
				version.Append(r.Version)
				deleted.Append(boolByte(r.Deleted))
				events.Append(r.Result)
			}
		}
		require.NoError(t, c.Do(ctx, ch.Query{
			Body: "INSERT INTO sessions VALUES",
			Input: proto.Input{{Name: "employee_id", Data: &who}, {Name: "session_start", Data: &start},
				{Name: "session_end", Data: &end}, {Name: "version", Data: &version}, {Name: "deleted", Data: &deleted},
				{Name: "events", Data: &events}},
		}))
	}
	type sess struct {
		who        string
		start, end time.Time
		events     uint64
	}
	final := func() []sess {
		var who proto.ColStr
		var start, end proto.ColDateTime
		var events proto.ColUInt64
		var got []sess
		require.NoError(t, c.Do(ctx, ch.Query{
			Body: "SELECT employee_id, session_start, session_end, events FROM sessions FINAL ORDER BY employee_id, session_start",
			Result: proto.Results{{Name: "employee_id", Data: &who}, {Name: "session_start", Data: &start},
				{Name: "session_end", Data: &end}, {Name: "events", Data: &events}},
			OnResult: func(context.Context, proto.Block) error {
				for i := range who.Rows() {
					got = append(got, sess{who.Row(i), start.Row(i).UTC(), end.Row(i).UTC(), events.Row(i)})
				}
				return nil
			},
		}))
		return got
	}

	const gap = 10 * time.Minute
	hour := time.Date(2026, 10, 28, 10, 0, 0, 0, time.UTC)
	type arrival struct {
		who     string
		at, due time.Time
	}
	r := rand.New(rand.NewPCG(3, 3))
	var evs []arrival
	base := time.Duration(0)
	for range 300 {
		base += time.Duration(r.IntN(240)) * time.Second
		if r.IntN(8) == 0 {
			base += time.Hour
		}
		at := hour.Add(base)
		evs = append(evs, arrival{who: []string{"alice", "bob"}[r.IntN(2)], at: at, due: at.Add(time.Duration(r.IntN(40)) * time.Minute)})
	}
	slices.SortStableFunc(evs, func(a, b arrival) int { return a.due.Compare(b.due) })

	op, err := window.New(window.Session(gap), window.Count[string]{}, window.Options{
		MaxOutOfOrderness: 5 * time.Minute,
		AllowedLateness:   35 * time.Minute, // every delay is within out-of-orderness plus lateness
		IdleTimeout:       -1,
	})
	require.NoError(t, err)
	var out window.Output[string, uint64]
	deletions := 0
	for i, e := range evs {
		require.NoError(t, op.Add(window.Event[string]{Key: e.who, Time: e.at, Value: "pr.merged"}, &out))
		if i%50 == 49 {
			for _, r := range out.Rows {
				deletions += int(boolByte(r.Deleted))
			}
			insert(out.Rows)
			out.Reset()
			got := final()
			for j := 1; j < len(got); j++ {
				if got[j].who == got[j-1].who {
					require.True(t, got[j].start.After(got[j-1].end), "overlapping or touching sessions in the table: %v %v", got[j-1], got[j])
				}
			}
		}
	}
	op.EndInput(&out)
	require.Empty(t, out.Late)
	insert(out.Rows)
	require.NotZero(t, deletions, "late events bridged sessions already written")

	slices.SortFunc(evs, func(a, b arrival) int { return cmp.Or(strings.Compare(a.who, b.who), a.at.Compare(b.at)) })
	var want []sess
	for i, e := range evs {
		if i > 0 && evs[i-1].who == e.who && e.at.Sub(evs[i-1].at) <= gap {
			want[len(want)-1].end = e.at.Add(gap)
			want[len(want)-1].events++
			continue
		}
		want = append(want, sess{e.who, e.at, e.at.Add(gap), 1})
	}
	assert.Equal(t, want, final())
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
