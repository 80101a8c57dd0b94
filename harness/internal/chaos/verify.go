package chaos

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// verify waits until every Kafka record is checkpointed and ClickHouse
// holds exactly what was sent, or the convergence timeout passes, and
// fills the result with what ClickHouse holds.
func (c *chaos) verify(ctx context.Context, events []demo.Delivery) error {
	d := c.d
	want := demo.Expect(events)
	c.res.Counted, c.res.Accepted = want.Events, c.delivered.Load()
	c.res.ProcessorExits = d.Supervisor.Failures()
	c.collectFaults()
	timeout := max(demo.ConvergeTimeout(), time.Duration(c.cfg.Events/500)*time.Second)
	deadline := time.Now().Add(timeout)
	var (
		got demo.Observed
		gap []string
	)
	for {
		lag, lagErr := demo.CheckpointLag(ctx, d.Servers.Brokers, d.Topic, c.cfg.Partitions, d.Supervisor.Joined())
		o, err := demo.Observe(ctx, d.Servers.ClickHouseAddr, d.DB)
		if err == nil {
			got, gap = o, demo.Diff(want, o)
			if len(gap) == 0 && lagErr == nil && lag == 0 {
				break
			}
			if o.Rows > uint64(want.Events) {
				break // a duplicate never goes away
			}
		} else {
			gap = []string{err.Error()}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if len(gap) == 0 {
				gap = []string{fmt.Sprintf("exact, but records not yet checkpointed after %v (lag %d, %v)", timeout, lag, lagErr)}
			}
			break
		}
		c.setStatus(fmt.Sprintf("converging: %d rows of %d", o.Rows, want.Events))
		time.Sleep(500 * time.Millisecond)
	}
	c.res.Differences = gap
	c.res.Verified = true
	c.res.Pass = len(gap) == 0
	if !c.res.Pass {
		c.res.Differences = append(append(c.diagnose(ctx), c.missing(ctx, events)), c.res.Differences...)
	}
	c.fill(want, got)
	if p50, p99, err := c.latency(ctx, events); err == nil {
		c.res.LatencyP50, c.res.LatencyP99 = p50, p99
	} else {
		c.say("latency: %v", err)
	}
	return nil
}

// diagnose says where each partition and the consumer group stand, for a
// run that did not converge.
func (c *chaos) diagnose(ctx context.Context) []string {
	d := c.d
	var out []string
	client, closeClient := demo.KafkaClient(d.Servers.Brokers, 5*time.Second)
	defer closeClient()
	all := make([]int, c.cfg.Partitions)
	for p := range all {
		all[p] = p
	}
	committed := map[int]int64{}
	if resp, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: d.Supervisor.Group, Topics: map[string][]int{d.Topic: all}}); err == nil {
		for _, p := range resp.Topics[d.Topic] {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	for p := range all {
		end := int64(-1)
		if conn, err := kafka.DialLeader(ctx, "tcp", d.Servers.Brokers[0], d.Topic, p); err == nil {
			end, _ = conn.ReadLastOffset()
			_ = conn.Close()
		}
		out = append(out, fmt.Sprintf("partition %d: end offset %d, committed %d", p, end, committed[p]))
	}
	if g, err := demo.DescribeGroup(ctx, d.Servers.Brokers, d.Supervisor.Group, d.Supervisor.ConsumerProtocol); err == nil {
		out = append(out, fmt.Sprintf("group %s: %s, %d members", d.Supervisor.Group, g.State, len(g.Members)))
		for _, m := range g.Members {
			out = append(out, fmt.Sprintf("  member %s: partitions by topic %v", m.ID, m.Assigned))
		}
	} else {
		out = append(out, "describe group: "+err.Error())
	}
	var pids []int
	for i := range c.cfg.Instances {
		if cmd := d.Supervisor.CmdOf(i); cmd != nil {
			pids = append(pids, cmd.Process.Pid)
		}
	}
	out = append(out, fmt.Sprintf("processors running: %v; starts %d, kills %d, exits on their own %d", pids, d.Supervisor.Starts(), d.Supervisor.Kills(), d.Supervisor.Failures()))
	return out
}

// fill puts what ClickHouse holds beside the ground truth.
func (c *chaos) fill(want demo.Expected, got demo.Observed) {
	r := c.res
	r.Lost = max(int64(want.Events)-int64(got.Distinct), 0)
	r.Duplicated = int64(got.Rows) - int64(got.Distinct)
	var deployments, incidents uint64
	for _, n := range got.Deployments {
		deployments += n
	}
	for _, n := range got.Incidents {
		incidents += n
	}
	r.Tables = map[string]uint64{
		"normalized_events":             got.Rows,
		"employee_metrics_hourly":       uint64(len(got.Hourly)),
		"employee_metrics_window FINAL": uint64(len(got.Window)),
		"deployments FINAL":             deployments,
		"incidents FINAL":               incidents,
	}
	type sums struct{ merged, comments, reviews, latency, deployments, incidents, hours float64 }
	var w, win, hr sums
	for _, m := range want.Metrics {
		w.merged += float64(m.PRsMerged)
		w.comments += float64(m.ReviewComments)
		w.reviews += float64(m.Reviews)
		w.latency += m.ReviewLatencyS
		w.deployments += float64(m.Deployments)
		w.incidents += float64(m.Incidents)
		w.hours++
	}
	for k, m := range got.Window {
		win.merged += float64(m.PRsMerged)
		win.comments += float64(m.ReviewComments)
		win.reviews += float64(m.Reviews)
		if a := got.WindowAvg[k]; !math.IsNaN(a) {
			win.latency += a * float64(m.Reviews)
		}
		win.deployments += float64(m.Deployments)
		win.incidents += float64(m.Incidents)
		win.hours++
	}
	hourlyReviews := 0.0
	for k, m := range got.Hourly {
		hr.merged += float64(m.PRsMerged)
		hr.comments += float64(m.ReviewComments)
		hr.deployments += float64(m.Deployments)
		hr.incidents += float64(m.Incidents)
		hr.hours++
		// The rollup keeps an average, not a count, of reviews: weigh it
		// with the ground truth's count to compare the total latency.
		if a := got.HourlyAvg[k]; !math.IsNaN(a) {
			hr.latency += a * float64(want.Metrics[k].Reviews)
			hourlyReviews += float64(want.Metrics[k].Reviews)
		}
	}
	avg := func(total, n float64) float64 {
		if n == 0 {
			return math.NaN()
		}
		return total / n
	}
	nan := math.NaN()
	r.Metrics = []MetricCheck{
		{"employee-hours", w.hours, win.hours, hr.hours},
		{"merged PRs", w.merged, win.merged, hr.merged},
		{"review comments", w.comments, win.comments, hr.comments},
		{"reviews", w.reviews, win.reviews, nan},
		{"average review latency (s)", avg(w.latency, w.reviews), avg(win.latency, win.reviews), avg(hr.latency, hourlyReviews)},
		{"deployments", w.deployments, win.deployments, hr.deployments},
		{"incidents", w.incidents, win.incidents, hr.incidents},
		{"deployments FINAL rows", float64(want.DeploymentsTotal), float64(deployments), nan},
		{"incidents FINAL rows", float64(want.IncidentsTotal), float64(incidents), nan},
	}
}

// latency returns the p50 and p99 of the time from each counted event's
// first send to its row's insert (the earliest, for a replayed one).
func (c *chaos) latency(ctx context.Context, events []demo.Delivery) (p50, p99 time.Duration, err error) {
	sent := make(map[string]int64, len(events))
	for i, e := range events {
		if e.Want != nil {
			sent[e.Want.EventID] = c.sentAt[i].Load()
		}
	}
	conn, err := ch.Dial(ctx, ch.Options{Address: c.d.Servers.ClickHouseAddr, DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	var (
		ids proto.ColStr
		at  proto.ColInt64
		lat []int64
	)
	err = conn.Do(ctx, ch.Query{
		Body:   fmt.Sprintf("SELECT event_id, toUnixTimestamp64Milli(min(chaos_inserted_at)) AS at FROM %s.normalized_events GROUP BY event_id", c.d.DB),
		Result: proto.Results{{Name: "event_id", Data: &ids}, {Name: "at", Data: &at}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range ids.Rows() {
				if s, ok := sent[ids.Row(i)]; ok && s > 0 {
					lat = append(lat, at.Row(i)-s)
				}
			}
			ids.Reset()
			at.Reset()
			return nil
		},
	})
	if err != nil {
		return 0, 0, err
	}
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("no row matched a sent event")
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return time.Duration(lat[min(len(lat)-1, int(p*float64(len(lat))))]) * time.Millisecond
	}
	return q(0.50), q(0.99), nil
}

// missing says, for the counted events ClickHouse lacks, whether Kafka holds
// them (the processors skipped them) or not (acknowledged to the provider
// but never written, or lost by the broker).
func (c *chaos) missing(ctx context.Context, events []demo.Delivery) string {
	d := c.d
	conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, DialTimeout: 5 * time.Second})
	if err != nil {
		return "missing events: " + err.Error()
	}
	defer conn.Close()
	have := map[string]bool{}
	var ids proto.ColStr
	err = conn.Do(ctx, ch.Query{
		Body:   fmt.Sprintf("SELECT event_id FROM %s.normalized_events", d.DB),
		Result: proto.Results{{Name: "event_id", Data: &ids}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range ids.Rows() {
				have[ids.Row(i)] = true
			}
			ids.Reset()
			return nil
		},
	})
	if err != nil {
		return "missing events: " + err.Error()
	}
	inKafka, err := topicEventIDs(ctx, d.Servers.Brokers, d.Topic, c.cfg.Partitions)
	if err != nil {
		return "missing events: read Kafka: " + err.Error()
	}
	var inK, notK []string
	for i, e := range events {
		if e.Want == nil || have[e.Want.EventID] {
			continue
		}
		desc := fmt.Sprintf("#%d %s %s", i, e.Provider, e.Want.EventID)
		if p, ok := inKafka[e.Want.EventID]; ok {
			inK = append(inK, desc+" "+p)
		} else {
			notK = append(notK, desc)
		}
	}
	if len(inK)+len(notK) == 0 {
		return "no counted event is missing from ClickHouse"
	}
	return fmt.Sprintf("missing from ClickHouse: %d events in Kafka (%s), %d not in Kafka (%s)",
		len(inK), strings.Join(inK[:min(len(inK), 8)], ", "), len(notK), strings.Join(notK[:min(len(notK), 8)], ", "))
}

// topicEventIDs returns the event id of every record of topic, with where
// it lies ("p/offset").
func topicEventIDs(ctx context.Context, brokers []string, topic string, partitions int) (map[string]string, error) {
	out := map[string]string{}
	err := demo.ScanTopic(ctx, brokers, topic, partitions, func(m kafka.Message) {
		if md, err := kafkapub.ReadMetadata(m); err == nil {
			if _, ok := out[md.EventID]; !ok {
				out[md.EventID] = fmt.Sprintf("%d/%d", m.Partition, m.Offset)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
