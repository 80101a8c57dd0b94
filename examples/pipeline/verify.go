package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// expected is what ClickHouse must hold once the pipeline caught up: computed
// here from the distinct events the providers delivered, independently of the
// pipeline.
type expected struct {
	events  int
	hourly  map[string]uint64 // org|unix hour → events
	minutes map[string]minute // org|unix ms of window start → aggregate
}

type minute struct {
	count    uint64
	sum, max float64
}

func expect(events []Event) expected {
	e := expected{events: len(events), hourly: map[string]uint64{}, minutes: map[string]minute{}}
	for _, ev := range events {
		e.hourly[fmt.Sprintf("%s|%d", ev.OrgID, ev.Time.Truncate(time.Hour).Unix())]++
		k := fmt.Sprintf("%s|%d", ev.OrgID, ev.Time.Truncate(time.Minute).UnixMilli())
		m := e.minutes[k]
		if m.count == 0 || ev.LatencyS > m.max {
			m.max = ev.LatencyS
		}
		m.count++
		m.sum += ev.LatencyS
		e.minutes[k] = m
	}
	return e
}

// observed is what ClickHouse holds.
type observed struct {
	rows, distinct uint64
	hourly         map[string]uint64
	minutes        map[string]minute
	minuteAvg      map[string]float64
}

func observe(ctx context.Context, addr, db string) (observed, error) {
	o := observed{hourly: map[string]uint64{}, minutes: map[string]minute{}, minuteAvg: map[string]float64{}}
	conn, err := ch.Dial(ctx, ch.Options{Address: addr, DialTimeout: 5 * time.Second})
	if err != nil {
		return o, err
	}
	defer conn.Close()

	var rows, distinct proto.ColUInt64
	if err := conn.Do(ctx, ch.Query{
		Body:   "SELECT count(), uniqExact(source, event_id) FROM " + db + ".events",
		Result: proto.Results{{Name: "count()", Data: &rows}, {Name: "uniqExact(source, event_id)", Data: &distinct}},
	}); err != nil {
		return o, err
	}
	o.rows, o.distinct = rows[0], distinct[0]

	var org proto.ColStr
	var hour proto.ColUInt32
	var n proto.ColUInt64
	if err := conn.Do(ctx, ch.Query{
		Body:   "SELECT CAST(org_id, 'String') AS o, toUInt32(hour) AS h, sum(events) AS n FROM " + db + ".events_hourly GROUP BY org_id, hour",
		Result: proto.Results{{Name: "o", Data: &org}, {Name: "h", Data: &hour}, {Name: "n", Data: &n}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range n.Rows() {
				o.hourly[fmt.Sprintf("%s|%d", org.Row(i), hour[i])] += n[i]
			}
			return nil
		},
	}); err != nil {
		return o, err
	}

	var key proto.ColStr
	var start proto.ColInt64
	var count proto.ColUInt64
	var avg, mx proto.ColFloat64
	// FINAL: a ReplacingMergeTree collapses rewritten windows only when parts
	// merge; FINAL applies the collapse at read time.
	if err := conn.Do(ctx, ch.Query{
		Body: "SELECT org_id, toUnixTimestamp64Milli(window_start) AS s, events, " +
			"ifNull(avg_latency_s, nan) AS a, ifNull(max_latency_s, nan) AS m FROM " + db + ".org_minute FINAL",
		Result: proto.Results{{Name: "org_id", Data: &key}, {Name: "s", Data: &start}, {Name: "events", Data: &count},
			{Name: "a", Data: &avg}, {Name: "m", Data: &mx}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range count.Rows() {
				k := fmt.Sprintf("%s|%d", key.Row(i), start[i])
				o.minutes[k] = minute{count: count[i], max: mx[i]}
				o.minuteAvg[k] = avg[i]
			}
			return nil
		},
	}); err != nil {
		return o, err
	}
	return o, nil
}

// diff lists every difference between what ClickHouse must hold and what it
// holds; empty means exact.
func diff(e expected, o observed) []string {
	var d []string
	if o.rows != uint64(e.events) || o.distinct != uint64(e.events) {
		d = append(d, fmt.Sprintf("events: %d rows, %d distinct, want %d of each", o.rows, o.distinct, e.events))
	}
	for _, k := range union(e.hourly, o.hourly) {
		if e.hourly[k] != o.hourly[k] {
			d = append(d, fmt.Sprintf("events_hourly %s: %d, want %d", k, o.hourly[k], e.hourly[k]))
		}
	}
	for _, k := range union(e.minutes, o.minutes) {
		want, got := e.minutes[k], o.minutes[k]
		wantAvg := want.sum / float64(want.count)
		if want.count != got.count || want.max != got.max || !near(wantAvg, o.minuteAvg[k]) {
			d = append(d, fmt.Sprintf("org_minute %s: count %d avg %g max %g, want count %d avg %g max %g",
				k, got.count, o.minuteAvg[k], got.max, want.count, wantAvg, want.max))
		}
	}
	return d
}

// near compares averages whose sums were added in another order (Kafka's
// order, not generation order): equal up to floating-point rounding.
func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(a))
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

func summarize(d []string) string {
	if len(d) > 10 {
		d = append(d[:10:10], fmt.Sprintf("... and %d more", len(d)-10))
	}
	return strings.Join(d, "\n  ")
}
