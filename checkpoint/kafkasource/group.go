package kafkasource

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// keyGroup is the consumer group attribute of the OpenTelemetry messaging
// semantic conventions.
const keyGroup = "messaging.consumer.group.name"

// groupWatch looks, once a generation, for two deployment mistakes the
// code can see but that break nothing it could refuse: more processor
// instances than partitions (some read nothing, yet look healthy), and a
// partition count that changes under a running pipeline (the producers'
// key->partition routing changes with it).
type groupWatch struct {
	idle    metric.Float64Gauge
	changes metric.Int64Counter

	mu         sync.Mutex
	partitions map[string]int // the last partition count seen per topic
}

func newGroupWatch(mp metric.MeterProvider) (*groupWatch, error) {
	m := meter.New(mp, "checkpoint/kafkasource")
	w := &groupWatch{
		idle: m.Gauge("exactlyonce.kafkasource.group.idle_members", "{member}",
			"Members of the consumer group that the last generation gave no partition (more instances than partitions)."),
		changes: m.Counter("exactlyonce.kafkasource.topic.partition_changes", "{change}",
			"Changes of a subscribed topic's partition count seen by a running Source (keys move between partitions)."),
		partitions: map[string]int{},
	}
	return w, m.Err()
}

// generationStarted logs gen and starts its check, which Run's wg awaits.
func (s *Source) generationStarted(gen *kafka.Generation, wg *sync.WaitGroup) {
	s.log.Info("kafkasource: new generation", "generation", gen.ID, "member", gen.MemberID,
		"assignments", fmt.Sprint(gen.Assignments))
	wg.Add(1)
	// A function started by Generation.Start ends the generation when it
	// returns, so the check waits for the generation's end after it is done.
	// Its requests end with the generation: a check of a generation that is
	// already over would report a group that no longer exists.
	gen.Start(func(gctx context.Context) {
		defer wg.Done()
		s.checkGeneration(gctx, gen)
		<-gctx.Done()
	})
}

// checkGeneration compares the subscribed topics' partition counts with
// those seen before, and the group's members with its partitions. It only
// logs and counts; a failed request skips the check (the next generation
// checks again).
func (s *Source) checkGeneration(ctx context.Context, gen *kafka.Generation) {
	tr := dialerTransport(s.opts.Dialer)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(s.group.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: s.group.Topics})
	if err != nil {
		s.log.Debug("kafkasource: generation check: metadata", "err", err)
		return
	}
	counts := s.notePartitions(ctx, meta)
	partitions := 0
	for _, n := range counts {
		partitions += n
	}
	mine := 0
	for _, as := range gen.Assignments {
		mine += len(as)
	}

	resp, err := cl.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{s.group.ID}})
	if err != nil || len(resp.Groups) != 1 || resp.Groups[0].Error != nil || resp.Groups[0].GroupState != "Stable" {
		// A group that is rebalancing again has no settled assignment to
		// count; the next generation's check counts it.
		s.log.Debug("kafkasource: generation check: describe group", "err", err)
		if mine == 0 && ctx.Err() == nil {
			s.log.Warn("kafkasource: this member got no partition: it reads nothing; add partitions or run fewer instances",
				"group", s.group.ID, "generation", gen.ID, "partitions", partitions)
		}
		return
	}
	var assigned []int
	for _, m := range resp.Groups[0].Members {
		n := 0
		for _, t := range m.MemberAssignments.Topics {
			n += len(t.Partitions)
		}
		assigned = append(assigned, n)
	}
	s.reportIdle(ctx, "generation", int(gen.ID), assigned, partitions, mine)
}

// reportIdle records how many of a settled group's members own no
// partition (assigned holds each member's partition count) and warns when
// some do. round names the generation or epoch, of kind "generation" or
// "epoch".
func (s *Source) reportIdle(ctx context.Context, kind string, round int, assigned []int, partitions, mine int) {
	idle := 0
	for _, n := range assigned {
		if n == 0 {
			idle++
		}
	}
	s.watch.idle.Record(context.WithoutCancel(ctx), float64(idle),
		metric.WithAttributes(attribute.String(keyGroup, s.group.ID)))
	if idle == 0 {
		return
	}
	members := len(assigned)
	msg := fmt.Sprintf("kafkasource: members %d > partitions %d: %d members idle; add partitions or run fewer instances",
		members, partitions, idle)
	if members <= partitions {
		// Enough partitions in all, but the balancer assigns each topic on
		// its own: a topic with fewer partitions than members leaves some idle.
		msg = fmt.Sprintf("kafkasource: %d of %d members got no partition of the %d partitions; add partitions to the smaller topics or run fewer instances",
			idle, members, partitions)
	}
	s.log.Warn(msg, "group", s.group.ID, kind, round, "members", members, "partitions", partitions,
		"idle", idle, "this_member_idle", mine == 0)
}

// notePartitions records the partition count of every subscribed topic in
// meta, reports a count that changed since it was last seen, and returns
// the counts.
func (s *Source) notePartitions(ctx context.Context, meta *kafka.MetadataResponse) map[string]int {
	counts := map[string]int{}
	for _, t := range meta.Topics {
		if t.Error == nil && !t.Internal && s.subscribed(t.Name) && len(t.Partitions) > 0 {
			counts[t.Name] = len(t.Partitions)
		}
	}
	w := s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, topic := range slices.Sorted(maps.Keys(counts)) {
		n := counts[topic]
		old, seen := w.partitions[topic]
		w.partitions[topic] = n
		if !seen || old == n {
			continue
		}
		w.changes.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String(meter.KeyTopic, topic)))
		// Why it matters: a producer's partitioner picks hash(key) modulo
		// the count, so from now on a key's new records land in another
		// partition than its old ones, and state kept per partition (a
		// chain's dedup keys, its windows) sees the key twice, split.
		s.log.Warn(fmt.Sprintf("kafkasource: topic %q partition count changed from %d to %d: key->partition routing changed, "+
			"so keys move to other partitions; dedup and windows keyed by partition see a key's old and new records apart "+
			"(duplicates across the move are not dropped, windows of a key are split)", topic, old, n),
			"topic", topic, "old_partitions", old, "new_partitions", n)
	}
	return counts
}
