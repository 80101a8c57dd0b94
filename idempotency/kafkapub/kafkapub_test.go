package kafkapub_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// messageCount returns how many messages the topic's partitions hold.
func messageCount(t *testing.T, brokers []string, topic string, partitions int) int64 {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...)}
	reqs := make([]kafka.OffsetRequest, partitions)
	for i := range reqs {
		reqs[i] = kafka.LastOffsetOf(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Right after the topic is made, a broker may answer NOT_LEADER until
	// its partitions have leaders: ask again until every partition answers.
	for {
		res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
		require.NoError(t, err)
		var n int64
		var perr error
		for _, p := range res.Topics[topic] {
			perr = errors.Join(perr, p.Error)
			n += p.LastOffset
		}
		if perr == nil {
			return n
		}
		if ctx.Err() != nil {
			require.NoError(t, perr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func newPublisher(t *testing.T, brokers []string, topic string, opts kafkapub.Options) *kafkapub.Publisher {
	t.Helper()
	p, err := kafkapub.New(context.Background(), brokers, topic, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return p
}

func TestPublishWritesKeyedMessageWithEventID(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "events")
	testkit.CreateTopic(t, brokers, topic, 4)
	p := newPublisher(t, brokers, topic, kafkapub.Options{
		PartitionKey: func(d idempotency.Delivery) ([]byte, error) { return []byte("org-7"), nil },
	})

	ctx := context.Background()
	for _, k := range []string{"d1", "d2", "d3"} {
		require.NoError(t, p.Publish(ctx, idempotency.Delivery{Key: k, Source: "github", Body: []byte(`{"k":"` + k + `"}`)}))
	}
	require.Equal(t, int64(3), messageCount(t, brokers, topic, 4), "acknowledged before Publish returned")

	// One key, one partition, publish order.
	var got []string
	for part := range 4 {
		for _, m := range testkit.ReadTopic(t, brokers, topic, part) {
			assert.Equal(t, "org-7", string(m.Key))
			assert.Equal(t, []kafka.Header{
				{Key: kafkapub.HeaderEventID, Value: []byte(eventID(m))},
				{Key: kafkapub.HeaderSource, Value: []byte("github")},
			}, m.Headers)
			assert.Equal(t, `{"k":"`+eventID(m)+`"}`, string(m.Value))
			got = append(got, eventID(m))
		}
	}
	assert.Equal(t, []string{"d1", "d2", "d3"}, got)
}

// eventID returns the event id header of m.
func eventID(m kafka.Message) string {
	for _, h := range m.Headers {
		if h.Key == kafkapub.HeaderEventID {
			return string(h.Value)
		}
	}
	return ""
}

func TestDurabilityCheck(t *testing.T) {
	tests := []struct {
		name     string
		extra    []kfake.Opt
		want     kafkapub.Durability
		wantWarn bool
	}{
		{
			name:     "one broker",
			want:     kafkapub.Durability{MinInSyncReplicas: 1, ReplicationFactor: 1},
			wantWarn: true,
		},
		{
			name:     "three replicas, min.insync.replicas 1",
			extra:    []kfake.Opt{kfake.NumBrokers(3)},
			want:     kafkapub.Durability{MinInSyncReplicas: 1, ReplicationFactor: 3},
			wantWarn: true,
		},
		{
			name:     "three replicas, min.insync.replicas 2",
			extra:    []kfake.Opt{kfake.NumBrokers(3), kfake.BrokerConfigs(map[string]string{"min.insync.replicas": "2"})},
			want:     kafkapub.Durability{MinInSyncReplicas: 2, ReplicationFactor: 3},
			wantWarn: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := testkit.StartKfake(t, tt.extra...)
			topic := testkit.Name(t, "events")
			testkit.CreateTopic(t, k.Brokers(), topic, 2)
			var logs bytes.Buffer
			p := newPublisher(t, k.Brokers(), topic, kafkapub.Options{
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			d, err := p.CheckDurability(context.Background())
			require.NoError(t, err)
			tt.want.Topic = topic
			assert.Equal(t, tt.want, d)
			assert.Equal(t, tt.wantWarn, d.Weak())
			if tt.wantWarn {
				assert.Contains(t, logs.String(), "acks=all is weaker than it sounds")
				assert.NotEmpty(t, d.Reason())
			} else {
				assert.NotContains(t, logs.String(), "level=WARN")
			}
		})
	}
}

func TestDurabilityCheckFailureOnlyWarns(t *testing.T) {
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	p, err := kafkapub.New(ctx, []string{testkit.FreeAddr(t)}, "events", kafkapub.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	defer p.Close()
	assert.Contains(t, logs.String(), "could not check")
}

func TestPublishFailsWhenKafkaIsGone(t *testing.T) {
	p := newPublisher(t, []string{testkit.FreeAddr(t)}, "events", kafkapub.Options{SkipDurabilityCheck: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := p.Publish(ctx, idempotency.Delivery{Key: "d1", Body: []byte(`{}`)})
	require.Error(t, err)
	assert.True(t, kafkapub.IsOutcomeUnknown(err), "a transport error may hide a written message")
}

func TestCloseTwice(t *testing.T) {
	brokers := testkit.Kafka(t)
	p, err := kafkapub.New(context.Background(), brokers, "events", kafkapub.Options{SkipDurabilityCheck: true})
	require.NoError(t, err)
	assert.NoError(t, p.Close())
	assert.NoError(t, p.Close())
	assert.Error(t, p.Publish(context.Background(), idempotency.Delivery{Key: "d", Body: []byte(`{}`)}))
}

func TestIsOutcomeUnknown(t *testing.T) {
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"nil", nil, false},
		{"broker refused", kafka.MessageSizeTooLarge, false},
		{"broker refused, wrapped", kafka.WriteErrors{kafka.NotEnoughReplicas}, false},
		{"written, not replicated", kafka.NotEnoughReplicasAfterAppend, true},
		{"request timed out", kafka.WriteErrors{kafka.RequestTimedOut}, true},
		{"deadline", context.DeadlineExceeded, true},
		{"transport", errors.New("connection reset by peer"), true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, kafkapub.IsOutcomeUnknown(tt.give), tt.name)
	}
}

func TestNewValidates(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		brokers []string
		topic   string
		opts    kafkapub.Options
	}{
		{"no brokers", nil, "t", kafkapub.Options{}},
		{"no topic", []string{"127.0.0.1:1"}, "", kafkapub.Options{}},
		{"negative batch timeout", []string{"127.0.0.1:1"}, "t", kafkapub.Options{BatchTimeout: -1}},
	}
	for _, tt := range tests {
		_, err := kafkapub.New(ctx, tt.brokers, tt.topic, tt.opts)
		assert.ErrorIs(t, err, kafkapub.ErrInvalidOptions, tt.name)
	}
}

// A produce the broker applies but answers REQUEST_TIMED_OUT is retried by
// kafka-go: the message lands twice although Publish returned nil. This is
// the duplicate the package docs promise and the event-id header absorbs.
func TestPublishRetryWritesTwice(t *testing.T) {
	k := testkit.StartKfake(t)
	topic := testkit.Name(t, "events")
	testkit.CreateTopic(t, k.Brokers(), topic, 1)
	p := newPublisher(t, k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true})
	k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut})

	require.NoError(t, p.Publish(context.Background(), idempotency.Delivery{Key: "d1", Body: []byte(`{}`)}))
	assert.Equal(t, int64(2), messageCount(t, k.Brokers(), topic, 1), "the timed-out attempt was written too")
}

// When kafka-go retried a batch, its last answer says nothing about the
// earlier attempts: one may have been written before its answer was lost.
// Publish must then report the outcome as unknown, whatever the last answer.
func TestPublishOutcomeAfterRetries(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		faults      []kfake.Fault
		wantCount   int64
		wantUnknown bool
	}{
		{
			name:        "written, then refused",
			maxAttempts: 3,
			faults: []kfake.Fault{
				{Err: kerr.RequestTimedOut},
				{Err: kerr.NotEnoughReplicas, Count: -1},
			},
			wantCount:   1,
			wantUnknown: true,
		},
		{
			name:        "refused on every attempt",
			maxAttempts: 3,
			faults:      []kfake.Fault{{Err: kerr.NotEnoughReplicas, Count: -1}},
			wantCount:   0,
			wantUnknown: true, // indistinguishable from the case above
		},
		{
			name:        "one attempt, refused",
			maxAttempts: 1,
			faults:      []kfake.Fault{{Err: kerr.NotEnoughReplicas, Count: -1}},
			wantCount:   0,
			wantUnknown: false,
		},
		{
			name:        "non-retriable refusal",
			maxAttempts: 3,
			faults:      []kfake.Fault{{Err: kerr.MessageTooLarge, Count: -1}},
			wantCount:   0,
			wantUnknown: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := testkit.StartKfake(t)
			topic := testkit.Name(t, "events")
			testkit.CreateTopic(t, k.Brokers(), topic, 1)
			p := newPublisher(t, k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true, MaxAttempts: tt.maxAttempts})
			for _, f := range tt.faults {
				f.Keys, f.Topic = []kmsg.Key{kmsg.Produce}, topic
				k.Cluster().Fault(f)
			}

			err := p.Publish(context.Background(), idempotency.Delivery{Key: "d1", Body: []byte(`{}`)})
			require.Error(t, err)
			assert.Equal(t, tt.wantCount, messageCount(t, k.Brokers(), topic, 1))
			assert.Equal(t, tt.wantUnknown, kafkapub.IsOutcomeUnknown(err), "%v", err)
			var ke kafka.Error
			assert.ErrorAs(t, err, &ke, "the broker's answer stays matchable")
		})
	}
}

// A broker that accepts connections and never answers must not hang New:
// the durability check is bounded by WriteTimeout even without a deadline.
func TestDurabilityCheckBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	})

	var logs bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		p, err := kafkapub.New(context.Background(), []string{l.Addr().String()}, "events", kafkapub.Options{
			WriteTimeout: 200 * time.Millisecond,
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if assert.NoError(t, err) {
			assert.NoError(t, p.Close())
		}
	}()
	select {
	case <-done:
		assert.Contains(t, logs.String(), "could not check")
	case <-time.After(5 * time.Second):
		t.Fatal("New hung on a silent broker")
	}
}

// acks=all must be on the wire: kafka-go's zero value is acks=none, and
// acks=1 lets the leader alone acknowledge.
func TestPublishRequiresAllAcks(t *testing.T) {
	k := testkit.StartKfake(t)
	topic := testkit.Name(t, "events")
	testkit.CreateTopic(t, k.Brokers(), topic, 1)
	p := newPublisher(t, k.Brokers(), topic, kafkapub.Options{SkipDurabilityCheck: true})
	acks := make(chan int16, 16)
	k.Cluster().ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster().KeepControl()
		select {
		case acks <- r.(*kmsg.ProduceRequest).Acks:
		default:
		}
		return nil, nil, false // let the broker answer
	})

	require.NoError(t, p.Publish(context.Background(), idempotency.Delivery{Key: "d1", Body: []byte(`{}`)}))
	require.NotEmpty(t, acks)
	assert.Equal(t, int16(-1), <-acks)
}
