package kafkasink_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestConsumerProtocolHandover: a kafkasource -> kafkasink pipeline under
// kafkasource.ProtocolConsumer, one instance, then a second that joins
// while records flow, so that half the partitions move with their
// transactions: a read_committed reader finds every input record in the
// output exactly once.
func TestConsumerProtocolHandover(t *testing.T) {
	const (
		parts    = 4
		perRound = 600
	)
	if impl := testkit.KafkaImplementation(t); impl == testkit.KafkaApache39 {
		t.Skipf("the consumer group protocol needs Apache Kafka 4 or kfake (%s=%s)", testkit.EnvKafka, impl)
	}
	brokers := testkit.Kafka(t)
	in, out := testkit.Name(t, "in"), testkit.Name(t, "out")
	testkit.CreateTopic(t, brokers, in, parts)
	testkit.CreateTopic(t, brokers, out, parts)
	group, prefix := testkit.Name(t, "g"), testkit.Name(t, "tx")
	dir := filepath.Join(t.TempDir(), "store")

	produce := func(round int) {
		ctx := context.Background()
		p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
		require.NoError(t, err)
		defer p.Close()
		for part := range parts {
			var recs []kafkatxn.Record
			for i := range perRound {
				recs = append(recs, kafkatxn.Record{Value: fmt.Appendf(nil, "p%d-r%d-%d", part, round, i)})
			}
			_, err := p.Produce(ctx, in, part, recs...)
			require.NoError(t, err)
		}
	}
	type instance struct {
		store *checkpoint.Store
		stop  func()
	}
	start := func() instance {
		storage, err := checkpoint.NewFSStorage(dir)
		require.NoError(t, err)
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(t, err)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 50 * time.Millisecond})
		require.NoError(t, err)
		newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
			s, err := kafkasink.New(brokers, prefix, p, kafkasink.Options{BatchSize: 50})
			if err != nil {
				return nil, err
			}
			return &kafkasource.Processor{
				Participants: map[string]checkpoint.Participant{"out": s},
				Process: func(ctx context.Context, m kafka.Message) error {
					time.Sleep(10 * time.Millisecond) // records still flow when the partitions move
					return s.Add(ctx, out, m.Partition, kafkatxn.Record{Value: m.Value})
				},
			}, nil
		}
		src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{in},
			Protocol: kafkasource.ProtocolConsumer}, coord, newProc,
			kafkasource.Options{MaxWait: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- src.Run(ctx) }()
		stopped := false
		stop := func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				assert.NoError(t, err)
			case <-time.After(time.Minute):
				t.Error("Run did not return")
			}
			coord.Close()
		}
		t.Cleanup(stop)
		return instance{store: store, stop: stop}
	}

	produce(0)
	a := start()
	// Some of round 0 is checkpointed, so that the handover moves state.
	require.Eventually(t, func() bool {
		cp, err := a.store.Latest(context.Background(), checkpoint.TopicPartition{Topic: in, Partition: 0})
		return err == nil && cp.NextOffset > 0
	}, 2*time.Minute, 20*time.Millisecond)
	b := start()
	produce(1)

	// Every partition checkpointed at the end of round 1, twice: the
	// second checkpoint's barrier came after the first's completion, which
	// committed its transaction.
	total := int64(2 * perRound)
	firstAtEnd := make([]checkpoint.ID, parts)
	members := map[string]bool{}
	require.Eventually(t, func() bool {
		all := true
		for p := range parts {
			cp, err := a.store.Latest(context.Background(), checkpoint.TopicPartition{Topic: in, Partition: p})
			if err != nil || cp.NextOffset < total {
				all = false
				continue
			}
			members[cp.Member] = true
			if firstAtEnd[p] == 0 {
				firstAtEnd[p] = cp.ID
			}
			all = all && cp.ID > firstAtEnd[p]
		}
		return all
	}, 3*time.Minute, 20*time.Millisecond, "every partition checkpointed at its end")
	a.stop()
	b.stop()
	assert.Len(t, members, 2, "both instances own partitions at the end")

	got := readCommitted(t, brokers, out, parts)
	for round := range 2 {
		for part := range parts {
			for i := range perRound {
				v := fmt.Sprintf("p%d-r%d-%d", part, round, i)
				assert.Equal(t, 1, got[v], "%s", v)
				delete(got, v)
			}
		}
	}
	assert.Empty(t, got, "nothing else in the output")
}
