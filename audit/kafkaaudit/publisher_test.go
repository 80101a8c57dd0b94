package kafkaaudit_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/produce"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/kafkaaudit"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// readDeltas reads every delta of topic, in each partition's order, until
// want have been read or 30 s passed.
func readDeltas(t *testing.T, brokers []string, topic string, want int) []audit.Delta {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []audit.Delta
	for len(out) < want {
		m, err := r.ReadMessage(ctx)
		require.NoError(t, err, "read %d of %d deltas", len(out), want)
		d, err := audit.DecodeDelta(m.Value)
		require.NoError(t, err)
		assert.Equal(t, d.Tenant, string(m.Key), "keyed by tenant")
		out = append(out, d)
	}
	return out
}

// fold sums the deltas as the processor folds them: each (source, number)
// once.
func fold(ds []audit.Delta) map[audit.Key]uint64 {
	seen := map[[2]any]bool{}
	out := map[audit.Key]uint64{}
	for _, d := range ds {
		id := [2]any{d.Source, d.Seq}
		if seen[id] {
			continue
		}
		seen[id] = true
		out[audit.Key{Stage: d.Stage, Tenant: d.Tenant, Bucket: d.Bucket}] += d.Count
	}
	return out
}

// Wrap counts the deliveries whose side effect succeeded and that classify
// takes, in the bucket of their event time; Flush sends one delta per
// stage, tenant and bucket, numbered from 1, and nothing when nothing was
// counted since.
func TestPublisherCountsAcceptedDeliveries(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "audit")
	testkit.CreateTopic(t, brokers, topic, 1)
	p, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw", Transport: &kafka.Transport{}})
	require.NoError(t, err)
	defer p.Close()
	at := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
	effect := p.Wrap(func(_ context.Context, d idempotency.Delivery) error {
		if d.Key == "fails" {
			return errors.New("broker down")
		}
		return nil
	}, func(d idempotency.Delivery) (string, time.Time, bool) {
		return string(d.Body), at, d.Key != "ping"
	})
	for _, d := range []idempotency.Delivery{
		{Key: "1", Body: []byte("org-a")}, {Key: "2", Body: []byte("org-a")}, {Key: "3", Body: []byte("org-b")},
		{Key: "fails", Body: []byte("org-a")}, {Key: "ping", Body: []byte("org-a")},
	} {
		_ = effect(context.Background(), d)
	}
	p.Add(audit.StageAccepted, "org-a", at.Add(time.Minute), 4)
	require.Eventually(t, func() bool { return p.Flush(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, p.Flush(context.Background()), "nothing new: nothing sent")

	ds := readDeltas(t, brokers, topic, 3)
	bucket := audit.BucketOf(at, audit.DefaultBucket)
	assert.Equal(t, map[audit.Key]uint64{
		{Stage: audit.StageAccepted, Tenant: "org-a", Bucket: bucket}:                  2,
		{Stage: audit.StageAccepted, Tenant: "org-b", Bucket: bucket}:                  1,
		{Stage: audit.StageAccepted, Tenant: "org-a", Bucket: bucket.Add(time.Minute)}: 4,
	}, fold(ds))
	var seqs []uint64
	for _, d := range ds {
		assert.Equal(t, "gw", d.Source)
		seqs = append(seqs, d.Seq)
	}
	assert.ElementsMatch(t, []uint64{1, 2, 3}, seqs)
}

// warmUp sends one delta (tenant "warm") until the broker takes it: a
// topic just created may answer NOT_LEADER for a moment, and the tests
// after it want their own failures only.
func warmUp(t *testing.T, p *kafkaaudit.Publisher, at time.Time) {
	t.Helper()
	p.Add(audit.StageAccepted, "warm", at, 1)
	require.Eventually(t, func() bool { return p.Flush(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
}

// lostAcks is a Transport to a real broker that loses the answer of the
// first fail produce requests after the broker wrote them, as a cut
// connection does.
type lostAcks struct {
	kafka.Transport
	fail atomic.Int32
}

func (l *lostAcks) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	resp, err := l.Transport.RoundTrip(ctx, addr, req)
	if _, ok := req.(*produce.Request); ok && err == nil && l.fail.Add(-1) >= 0 {
		return nil, errors.New("connection reset (injected after the write)")
	}
	return resp, err
}

// A send whose acknowledgement was lost is sent again with the same
// numbers, and counts added meanwhile get numbers of their own: the topic
// holds a delta twice, and folding each number once gives the counts
// exactly.
func TestPublisherResendsUnderTheSameNumbers(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "audit")
	testkit.CreateTopic(t, brokers, topic, 1)
	tr := &lostAcks{}
	p, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw", Transport: tr})
	require.NoError(t, err)
	defer p.Close()
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	warmUp(t, p, at)
	p.Add(audit.StageAccepted, "org-a", at, 5)
	tr.fail.Store(1)
	require.Error(t, p.Flush(context.Background()), "the answer was lost")
	p.Add(audit.StageAccepted, "org-a", at, 2)
	require.NoError(t, p.Flush(context.Background()))

	ds := readDeltas(t, brokers, topic, 4)[1:]
	assert.Equal(t, []uint64{2, 2, 3}, []uint64{ds[0].Seq, ds[1].Seq, ds[2].Seq}, "delta 2 twice, then the new counts")
	assert.Equal(t, ds[0], ds[1])
	assert.Equal(t, map[audit.Key]uint64{{Stage: audit.StageAccepted, Tenant: "org-a", Bucket: at}: 7}, fold(ds))
}

// Close stops Run and sends what is left; a second Close does nothing.
func TestPublisherCloseSendsTheRest(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "audit")
	testkit.CreateTopic(t, brokers, topic, 1)
	p, err := kafkaaudit.New(brokers, topic, kafkaaudit.Options{Source: "gw", Interval: time.Hour, Transport: &kafka.Transport{}})
	require.NoError(t, err)
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	warmUp(t, p, at)
	done := make(chan error, 1)
	go func() { done <- p.Run(context.Background()) }()
	p.Add(audit.StageAccepted, "org-a", at, 3)
	require.NoError(t, p.Close())
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	assert.NoError(t, p.Close(), "twice")
	ds := readDeltas(t, brokers, topic, 2)[1:]
	assert.Equal(t, map[audit.Key]uint64{{Stage: audit.StageAccepted, Tenant: "org-a", Bucket: at}: 3}, fold(ds))
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name    string
		brokers []string
		topic   string
		opts    kafkaaudit.Options
	}{
		{"no brokers", nil, "t", kafkaaudit.Options{}},
		{"no topic", []string{"b:9092"}, "", kafkaaudit.Options{}},
		{"bucket not whole seconds", []string{"b:9092"}, "t", kafkaaudit.Options{Bucket: 1500 * time.Millisecond}},
		{"negative interval", []string{"b:9092"}, "t", kafkaaudit.Options{Interval: -time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kafkaaudit.New(tt.brokers, tt.topic, tt.opts)
			assert.ErrorIs(t, err, audit.ErrInvalidOptions)
		})
	}
}
