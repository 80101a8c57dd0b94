package kafkapub_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestPublisherRecoversAfterClusterFaults publishes from several
// goroutines, each a provider redelivering a delivery until it is
// acknowledged, while the three-broker cluster goes through the faults a
// deployment sees: a partition leader killed with SIGKILL and restarted,
// then two brokers stopped (the ISR below min.insync.replicas) and started.
// Once the cluster is whole again, publishes must succeed again (kafka-go's
// Writer and Transport cache connections and metadata and did not always
// recover: every publish ended with an unknown outcome for minutes). The
// topic then holds every acknowledged delivery, and a delivery more than
// once only as often as it had attempts of unknown outcome: a refused
// attempt wrote nothing. MaxAttempts is 1, so kafka-go retries nothing
// behind Publish's back and every copy is accounted for. make test-cluster
// runs it (testkit.SkipUnlessKafkaCluster).
func TestPublisherRecoversAfterClusterFaults(t *testing.T) {
	testkit.SkipUnlessKafkaCluster(t)
	kb := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{Nodes: 3, Controllers: 1})
	brokers := kb.Brokers()
	require.Len(t, brokers, 3, "the controller serves no clients")
	topic := testkit.Name(t, "webhooks")
	const partitions = 3
	testkit.CreateTopic(t, brokers, topic, partitions)

	logs := &syncBuffer{}
	pub := newPublisher(t, brokers, topic, kafkapub.Options{
		MaxAttempts: 1,
		Logger:      slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})

	led := newLedger()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() { provider(pub, led, stop, fmt.Sprintf("w%d-", w)) })
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	waitAcks := func(n int64, within time.Duration) {
		want := led.acks.Load() + n
		for deadline := time.Now().Add(within); time.Now().Before(deadline) && led.acks.Load() < want; {
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitAcks(200, time.Minute)
	require.Positive(t, led.acks.Load(), "publishes succeed on a healthy cluster")

	// A partition leader killed mid-publish, then restarted on its logs.
	leader := leaderOf(t, brokers, topic, 0)
	require.Positive(t, leader)
	kb.KillNode(leader)
	require.Eventually(t, func() bool {
		l := leaderOf(t, brokers, topic, 0)
		return l > 0 && l != leader
	}, time.Minute, 200*time.Millisecond, "partition 0 elects a new leader")
	waitAcks(100, 20*time.Second)
	kb.StartNode(leader)
	waitWhole(t, brokers, topic)

	// Two brokers stopped: the ISR falls below min.insync.replicas and every
	// produce is refused, then they come back.
	down := []int{leader%3 + 1, (leader+1)%3 + 1}
	for _, id := range down {
		kb.StopNode(id)
	}
	failed := led.failures.Load()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && led.failures.Load() < failed+50; {
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range down {
		kb.StartNode(id)
	}
	waitWhole(t, brokers, topic)
	t.Logf("cluster whole again: %s", led)

	// The cluster is healthy: publishes succeed again, ten in a row.
	ok := 0
	for i, deadline := 0, time.Now().Add(90*time.Second); ok < 10 && time.Now().Before(deadline); i++ {
		key := fmt.Sprintf("probe-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := pub.Publish(ctx, idempotency.Delivery{Key: key, Source: "github", Body: []byte(`{}`)})
		cancel()
		led.record(key, err)
		if err != nil {
			ok = 0
			time.Sleep(200 * time.Millisecond)
			continue
		}
		ok++
	}
	require.Equal(t, 10, ok, "publishes succeed again within 90 s of the cluster being whole: %s", led)
	halt()
	t.Logf("done: %s", led)
	t.Logf("publisher warnings:\n%s", logs)

	copies := map[string]int{}
	for _, m := range scanTopic(t, brokers, topic, partitions) {
		md, err := kafkapub.ReadMetadata(m)
		require.NoError(t, err)
		copies[md.EventID]++
	}
	led.mu.Lock()
	defer led.mu.Unlock()
	var acked, extra int
	for key, o := range led.m {
		c := copies[key]
		delete(copies, key)
		bound := o.unknown
		if o.acked {
			acked++
			bound++
			assert.GreaterOrEqual(t, c, 1, "acknowledged %s is in the topic", key)
		}
		assert.LessOrEqual(t, c, bound, "%s: %d copies, %+v: only an attempt of unknown outcome may add one", key, c, *o)
		extra += max(0, c-1)
	}
	assert.Empty(t, copies, "nothing in the topic that was not published")
	t.Logf("%d deliveries acknowledged; %d copies beyond the first, each after an unknown outcome", acked, extra)
}

// provider publishes deliveries prefix0, prefix1, ... one after another,
// each until it is acknowledged, as a webhook provider redelivers after a
// 503, until stop is closed.
func provider(pub *kafkapub.Publisher, led *ledger, stop <-chan struct{}, prefix string) {
	for i := 0; ; i++ {
		key := fmt.Sprintf("%s%d", prefix, i)
		for {
			select {
			case <-stop:
				return
			default:
			}
			// The Handler's SideEffectTimeout.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := pub.Publish(ctx, idempotency.Delivery{Key: key, Source: "github", Body: []byte(`{"n":1}`)})
			cancel()
			led.record(key, err)
			if err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// outcome is what Publish answered for one delivery's attempts.
type outcome struct {
	acked   bool
	unknown int // attempts that may have written it
	failed  int // attempts refused: nothing written
}

// ledger records every attempt's answer by delivery key.
type ledger struct {
	mu       sync.Mutex
	m        map[string]*outcome
	acks     atomic.Int64
	failures atomic.Int64
	unknowns atomic.Int64
}

func newLedger() *ledger { return &ledger{m: map[string]*outcome{}} }

func (l *ledger) record(key string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	o := l.m[key]
	if o == nil {
		o = &outcome{}
		l.m[key] = o
	}
	switch {
	case err == nil:
		o.acked = true
		l.acks.Add(1)
	case kafkapub.IsOutcomeUnknown(err):
		o.unknown++
		l.unknowns.Add(1)
		l.failures.Add(1)
	default:
		o.failed++
		l.failures.Add(1)
	}
}

func (l *ledger) String() string {
	return fmt.Sprintf("%d acknowledged, %d unknown, %d refused", l.acks.Load(), l.unknowns.Load(), l.failures.Load()-l.unknowns.Load())
}

// leaderOf returns the node id of partition's leader, as the first broker
// that answers says (a connection of its own: kafka-go's transport caches
// metadata), or -1.
func leaderOf(t *testing.T, brokers []string, topic string, partition int) int {
	t.Helper()
	for _, b := range brokers {
		conn, err := kafka.DialContext(context.Background(), "tcp", b)
		if err != nil {
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		parts, err := conn.ReadPartitions(topic)
		_ = conn.Close()
		if err != nil {
			continue
		}
		for _, p := range parts {
			if p.ID == partition && p.Error == nil && p.Leader.Host != "" {
				return p.Leader.ID
			}
		}
		return -1
	}
	return -1
}

// waitWhole waits until every broker is back in every partition's ISR.
func waitWhole(t *testing.T, brokers []string, topic string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, b := range brokers {
			conn, err := kafka.Dial("tcp", b)
			if err != nil {
				return false
			}
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			parts, err := conn.ReadPartitions(topic)
			_ = conn.Close()
			if err != nil || len(parts) == 0 {
				return false
			}
			for _, p := range parts {
				if p.Error != nil || len(p.Isr) != len(brokers) {
					return false
				}
			}
		}
		return true
	}, 2*time.Minute, 250*time.Millisecond, "every partition's ISR holds all %d brokers", len(brokers))
}

// scanTopic reads every record of topic's partitions.
func scanTopic(t *testing.T, brokers []string, topic string, partitions int) []kafka.Message {
	t.Helper()
	var out []kafka.Message
	for p := range partitions {
		out = append(out, testkit.ReadTopic(t, brokers, topic, p)...)
	}
	return out
}

// syncBuffer is a bytes.Buffer for a logger shared by goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
