package kafkatxn_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// readAll reads every record of topic's partitions (read_uncommitted, so
// nothing is hidden) and counts the values.
func readAll(t testing.TB, brokers []string, topic string, partitions int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for p := range partitions {
		end := endOffset(t, brokers, topic, p)
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: p, MaxWait: 50 * time.Millisecond})
		for off := int64(0); off < end; {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			m, err := r.ReadMessage(ctx)
			cancel()
			require.NoError(t, err)
			got[string(m.Value)]++
			off = m.Offset + 1
		}
		require.NoError(t, r.Close())
	}
	return got
}

// loseAcks makes the broker answer every n-th produce request with
// REQUEST_TIMED_OUT after it wrote the batch: the client sees a failure for
// a write that happened, as after an acknowledgement lost on the wire.
func loseAcks(c *kfake.Cluster, n int) {
	var mu sync.Mutex
	count := 0
	c.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1,
		When: func(kmsg.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			count++
			return count%n == 0
		},
	})
}

// TestProducerLostAcks publishes with acknowledgements lost after the write:
// the idempotent Producer retries with the same sequence number and the
// broker drops the copy, so every record is in the log exactly once, in
// order. The same schedule with kafka-go's Writer (the baseline) leaves
// duplicates, which shows the faults do hit written batches.
func TestProducerLostAcks(t *testing.T) {
	const n, partitions = 200, 2
	k := testkit.StartKfake(t)
	brokers := k.Brokers()
	topic := testkit.Name(t, "idem")
	testkit.CreateTopic(t, brokers, topic, partitions)
	loseAcks(k.Cluster(), 3)
	ctx := context.Background()

	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{InitialBackoff: time.Millisecond})
	require.NoError(t, err)
	defer p.Close()
	var wg sync.WaitGroup
	for part := range partitions {
		wg.Go(func() {
			for i := range n {
				v := strconv.Itoa(part) + "-" + strconv.Itoa(i)
				_, err := p.Produce(ctx, topic, part, kafkatxn.Record{Value: []byte(v)})
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	got := readAll(t, brokers, topic, partitions)
	assert.Len(t, got, n*partitions)
	for v, c := range got {
		assert.Equal(t, 1, c, "record %s", v)
	}

	// Baseline: kafka-go's Writer with retries duplicates.
	base := topic + "-baseline"
	testkit.CreateTopic(t, brokers, base, 1)
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: base, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, MaxAttempts: 5, Balancer: &kafka.LeastBytes{}, Transport: &kafka.Transport{}}
	defer w.Close()
	for i := range 60 {
		require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: []byte(strconv.Itoa(i))}))
	}
	dups := 0
	for _, c := range readAll(t, brokers, base, 1) {
		dups += c - 1
	}
	assert.Positive(t, dups, "the baseline writer should have written duplicates")
	t.Logf("baseline kafka-go Writer: %d duplicates of 60", dups)
}

// TestProducerBrokerKill9 kills the Apache Kafka broker with SIGKILL while
// a producer writes, restarts it on the same log directory, and checks that
// every record acknowledged or retried is in the log exactly once: Kafka
// rebuilds its producer sequence windows from the log, and the Producer's
// search for a batch of unknown outcome covers the rest.
// TestProducerKfakeKill9 is the same on kfake, which forgets the windows.
func TestProducerBrokerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker process")
	}
	testProducerKill9(t, testkit.StartApacheKafka(t))
}

// TestProducerKfakeKill9 is TestProducerBrokerKill9 on a kfake broker
// process, which forgets its producer sequence windows on SIGKILL: the
// Producer's own search for a batch of unknown outcome at work.
func TestProducerKfakeKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker process")
	}
	testProducerKill9(t, testkit.StartKfakeProcess(t))
}

// killableBroker is a broker process a test kills and starts again.
type killableBroker interface {
	Brokers() []string
	Kill()
	Start()
}

func testProducerKill9(t *testing.T, srv killableBroker) {
	brokers := srv.Brokers()
	topic := "idemkill"
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	// A real broker takes seconds to come back: the delivery timeout covers
	// a restart on a loaded machine.
	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{InitialBackoff: 20 * time.Millisecond, DeliveryTimeout: 2 * time.Minute})
	require.NoError(t, err)
	defer p.Close()

	const n = 1000
	done := make(chan struct{})
	var acked atomic.Int64
	go func() {
		defer close(done)
		for i := range n {
			_, err := p.Produce(ctx, topic, 0, kafkatxn.Record{Value: []byte(strconv.Itoa(i))})
			if !assert.NoError(t, err, "record %d", i) {
				return
			}
			acked.Add(1)
			time.Sleep(time.Millisecond) // slow enough to be killed mid-stream
		}
	}()
	// Each kill comes once the producer got going again after the last.
	for k := range 3 {
		waitAcked(t, &acked, int64(k+1)*n/5, done)
		srv.Kill()
		time.Sleep(200 * time.Millisecond)
		srv.Start()
	}
	<-done
	require.Equal(t, int64(n), acked.Load())
	got := readAll(t, brokers, topic, 1)
	assert.Len(t, got, n)
	for v, c := range got {
		assert.Equal(t, 1, c, "record %s", v)
	}
}

// waitAcked waits until acked reaches want, or the producer stopped.
func waitAcked(t *testing.T, acked *atomic.Int64, want int64, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for acked.Load() < want {
		select {
		case <-done:
			return
		case <-time.After(5 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "%d of %d acknowledged", acked.Load(), want)
	}
}
