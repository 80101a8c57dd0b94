package kafkafault_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

const topic = "events"

// start runs a one-broker kfake with an injector and topic (1 partition).
func start(t *testing.T) (*kafkafault.Injector, string) {
	t.Helper()
	inj := kafkafault.New()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(inj.Listen), kfake.SeedTopics(1, topic, "other"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	inj.Attach(c)
	return inj, c.ListenAddrs()[0]
}

// writer is a kafka-go producer as the gateway configures it, with
// attempts tries per message.
func writer(addr string, attempts int) *kafka.Writer {
	return &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, RequiredAcks: kafka.RequireAll,
		MaxAttempts: attempts, BatchTimeout: time.Millisecond, WriteBackoffMin: time.Millisecond,
		WriteBackoffMax: 10 * time.Millisecond}
}

// records returns the values in the topic's only partition.
func records(t *testing.T, addr string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(addr)}
	var vals []string
	for offset := int64(0); ; {
		resp, err := cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: offset, MaxWait: 10 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, resp.Error)
		n := 0
		for {
			r, err := resp.Records.ReadRecord()
			if err != nil {
				break
			}
			v, err := readAll(r.Value)
			require.NoError(t, err)
			vals = append(vals, v)
			offset = r.Offset + 1
			n++
		}
		if offset >= resp.HighWatermark || n == 0 {
			return vals
		}
	}
}

func readAll(b kafka.Bytes) (string, error) {
	if b == nil {
		return "", nil
	}
	buf := make([]byte, b.Len())
	_, err := b.Read(buf)
	return string(buf), err
}

// writeErr returns the error of the only message of a failed WriteMessages.
func writeErr(t *testing.T, err error) error {
	t.Helper()
	var we kafka.WriteErrors
	require.ErrorAs(t, err, &we)
	require.Len(t, we, 1)
	return we[0]
}

func hits(inj *kafkafault.Injector, k kafkafault.Kind) int { return inj.Stats()[k].Hits }

// TestProduceError: a refused produce reaches the client as a retriable
// error and writes nothing; the next produce goes through.
func TestProduceError(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceError}))

	err := writeErr(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	var kerr kafka.Error
	require.ErrorAs(t, err, &kerr)
	assert.Equal(t, kafka.NotEnoughReplicas, kerr)
	assert.True(t, kerr.Temporary())
	assert.Empty(t, records(t, addr), "a refused produce writes nothing")

	require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("b")}))
	assert.Equal(t, []string{"b"}, records(t, addr), "only one request is failed")
	assert.Equal(t, kafkafault.Counts{Injected: 1, Hits: 1}, inj.Stats()[kafkafault.ProduceError])
}

// TestProduceTimeout: the client hears REQUEST_TIMED_OUT for a write that
// happened, so its retry duplicates the record.
func TestProduceTimeout(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceTimeout}))

	err := writeErr(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	var kerr kafka.Error
	require.ErrorAs(t, err, &kerr)
	assert.Equal(t, kafka.RequestTimedOut, kerr)
	assert.Equal(t, []string{"a"}, records(t, addr), "the timed-out produce was written")
	assert.Equal(t, 1, hits(inj, kafkafault.ProduceTimeout))
}

// TestProduceLostAck: the broker writes the batch and the client never hears
// back: a client that does not retry sees a failure for a record that is in
// the log, a client that retries writes it twice.
func TestProduceLostAck(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceLostAck}))
	err := writeErr(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	require.Error(t, err, "the acknowledgement never arrives")
	var kerr kafka.Error
	assert.False(t, errors.As(err, &kerr), "no broker error: the connection closed (%v)", err)
	assert.Equal(t, []string{"a"}, records(t, addr), "yet the record is in the log")

	retrying := writer(addr, 3)
	defer retrying.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceLostAck}))
	require.NoError(t, retrying.WriteMessages(t.Context(), kafka.Message{Value: []byte("b")}))
	assert.Equal(t, []string{"a", "b", "b"}, records(t, addr), "the retry after the lost ack duplicates the record")
	assert.Equal(t, kafkafault.Counts{Injected: 2, Hits: 2}, inj.Stats()[kafkafault.ProduceLostAck])
}

// TestFetchError: a fetch is answered NOT_LEADER_FOR_PARTITION once.
func TestFetchError(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.FetchError, Topic: topic, Count: 2}))

	cl := &kafka.Client{Addr: kafka.TCP(addr)}
	for range 2 {
		resp, err := cl.Fetch(t.Context(), &kafka.FetchRequest{Topic: topic, Partition: 0, MaxWait: 10 * time.Millisecond})
		require.NoError(t, err)
		assert.ErrorIs(t, resp.Error, kafka.NotLeaderForPartition)
	}
	assert.Equal(t, []string{"a"}, records(t, addr), "the third fetch is answered")
	assert.Equal(t, 2, hits(inj, kafkafault.FetchError))
}

// TestCommitError: a refused offset commit stores nothing; the retry does.
func TestCommitError(t *testing.T) {
	inj, addr := start(t)
	cl := &kafka.Client{Addr: kafka.TCP(addr)}
	commit := func() error {
		resp, err := cl.OffsetCommit(t.Context(), &kafka.OffsetCommitRequest{GroupID: "g", GenerationID: -1,
			Topics: map[string][]kafka.OffsetCommit{topic: {{Partition: 0, Offset: 7}}}})
		require.NoError(t, err)
		return resp.Topics[topic][0].Error
	}
	committed := func() int64 {
		resp, err := cl.OffsetFetch(t.Context(), &kafka.OffsetFetchRequest{GroupID: "g", Topics: map[string][]int{topic: {0}}})
		require.NoError(t, err)
		if len(resp.Topics[topic]) == 0 {
			return -1
		}
		return resp.Topics[topic][0].CommittedOffset
	}
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.CommitError, Group: "other"}))
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.CommitError, Group: "g"}))

	err := commit()
	assert.ErrorIs(t, err, kafka.GroupCoordinatorNotAvailable)
	assert.Equal(t, int64(-1), committed(), "a refused commit stores no offset")
	require.NoError(t, commit())
	assert.Equal(t, int64(7), committed())
	assert.Equal(t, kafkafault.Counts{Injected: 2, Hits: 1}, inj.Stats()[kafkafault.CommitError],
		"the fault for another group hit nothing")
}

// TestGroupError: JoinGroup, then Heartbeat are refused, each once, and a
// consumer group still forms and reads.
func TestGroupError(t *testing.T) {
	inj, addr := start(t)
	cl := &kafka.Client{Addr: kafka.TCP(addr)}
	join := &kafka.JoinGroupRequest{GroupID: "g", SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second,
		ProtocolType: "consumer", Protocols: []kafka.GroupProtocol{{Name: "range",
			Metadata: kafka.GroupProtocolSubscription{Topics: []string{topic}}}}}
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.GroupError}))
	resp, err := cl.JoinGroup(t.Context(), join)
	require.NoError(t, err)
	assert.ErrorIs(t, resp.Error, kafka.GroupCoordinatorNotAvailable)
	assert.Equal(t, 1, hits(inj, kafkafault.GroupError))

	// A real consumer through a refused JoinGroup, SyncGroup or Heartbeat.
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.GroupError, Count: 3}))
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, GroupID: "g", Topic: topic,
		HeartbeatInterval: 100 * time.Millisecond, JoinGroupBackoff: 50 * time.Millisecond, MaxAttempts: 5,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, MaxWait: 50 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := r.FetchMessage(ctx)
	require.NoError(t, err)
	assert.Equal(t, "a", string(m.Value))
	assert.Equal(t, kafkafault.Counts{Injected: 2, Hits: 4}, inj.Stats()[kafkafault.GroupError])
}

// TestDropConnections: every open connection is closed under its client.
func TestDropConnections(t *testing.T) {
	inj, addr := start(t)
	conns := make([]*kafka.Conn, 3)
	for i := range conns {
		c, err := kafka.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.ReadPartitions(topic)
		require.NoError(t, err)
		conns[i] = c
	}
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.DropConnections}))
	for i, c := range conns {
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err := c.ReadPartitions(topic)
		assert.Error(t, err, "connection %d", i)
		var ne net.Error
		assert.False(t, errors.As(err, &ne) && ne.Timeout(), "closed, not timed out: %v", err)
	}
	assert.Equal(t, 3, hits(inj, kafkafault.DropConnections))

	c, err := kafka.Dial("tcp", addr)
	require.NoError(t, err, "new connections are served")
	defer c.Close()
	_, err = c.ReadPartitions(topic)
	require.NoError(t, err)
}

// TestSlow: answers are held back by Delay while the fault lasts, long
// enough for a client with a shorter deadline to time out.
func TestSlow(t *testing.T) {
	inj, addr := start(t)
	c, err := kafka.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	const delay = 400 * time.Millisecond
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.Slow, Delay: delay, Duration: time.Minute}))

	start := time.Now()
	_, err = c.ReadPartitions(topic)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), delay, "the answer was held back")

	impatient := &kafka.Client{Addr: kafka.TCP(addr), Timeout: delay / 4}
	_, err = impatient.Metadata(t.Context(), &kafka.MetadataRequest{Topics: []string{topic}})
	assert.Error(t, err, "a client with a shorter timeout gives up")

	inj.Clear()
	_, err = c.ReadPartitions(topic)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, hits(inj, kafkafault.Slow), 2)
}

// TestCountUntilClear: Count -1 fails every request until Clear.
func TestCountUntilClear(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceError, Count: -1}))
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceLostAck, Count: -1}))
	for range 3 {
		require.Error(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("x")}))
	}
	inj.Clear()
	require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("y")}))
	assert.Equal(t, []string{"y"}, records(t, addr), "a refused produce never reaches the lost-ack layer")
	assert.Equal(t, 3, hits(inj, kafkafault.ProduceError))
}

// TestTopicSelector: a produce fault for another topic leaves this one be.
func TestTopicSelector(t *testing.T) {
	inj, addr := start(t)
	w := writer(addr, 1)
	defer w.Close()
	require.NoError(t, inj.Inject(kafkafault.Fault{Kind: kafkafault.ProduceError, Topic: "other"}))
	require.NoError(t, w.WriteMessages(t.Context(), kafka.Message{Value: []byte("a")}))
	assert.Equal(t, 0, hits(inj, kafkafault.ProduceError))
}

func TestInjectRejects(t *testing.T) {
	tests := []struct {
		give kafkafault.Fault
		want error
	}{
		{kafkafault.Fault{Kind: "boom"}, kafkafault.ErrUnknownKind},
		{kafkafault.Fault{Kind: kafkafault.ProduceError, Count: -2}, kafkafault.ErrInvalid},
		{kafkafault.Fault{Kind: kafkafault.Slow, Delay: -time.Second}, kafkafault.ErrInvalid},
		{kafkafault.Fault{Kind: kafkafault.FetchError, Code: 32000}, kafkafault.ErrInvalid},
	}
	inj, _ := start(t)
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.give), func(t *testing.T) {
			assert.ErrorIs(t, inj.Inject(tt.give), tt.want)
		})
	}
	assert.ErrorIs(t, kafkafault.New().Inject(kafkafault.Fault{Kind: kafkafault.FetchError}), kafkafault.ErrNotAttached)
	assert.Empty(t, inj.Stats(), "a rejected fault is not counted")
}

// TestClient drives an injector through its HTTP endpoint.
func TestClient(t *testing.T) {
	inj, addr := start(t)
	srv := httptest.NewServer(inj.Handler())
	defer srv.Close()
	c := kafkafault.Client{URL: srv.URL}
	ctx := t.Context()

	require.NoError(t, c.Inject(ctx, kafkafault.Fault{Kind: kafkafault.ProduceError}))
	assert.ErrorIs(t, c.Inject(ctx, kafkafault.Fault{Kind: "boom"}), kafkafault.ErrRejected)
	w := writer(addr, 1)
	defer w.Close()
	require.Error(t, w.WriteMessages(ctx, kafka.Message{Value: []byte("a")}))
	require.NoError(t, c.Inject(ctx, kafkafault.Fault{Kind: kafkafault.ProduceError, Count: -1}))
	require.NoError(t, c.Clear(ctx))
	require.NoError(t, w.WriteMessages(ctx, kafka.Message{Value: []byte("b")}))
	s, err := c.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, kafkafault.Stats{kafkafault.ProduceError: {Injected: 2, Hits: 1}}, s)
}
