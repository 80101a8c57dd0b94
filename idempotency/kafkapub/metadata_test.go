package kafkapub_test

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/testkit"
)

func TestReadMetadata(t *testing.T) {
	tests := []struct {
		name string
		give idempotency.Delivery
		want kafkapub.Metadata
	}{
		{"github", idempotency.Delivery{Key: "d1", Source: "github", Event: "push", HookID: "42"},
			kafkapub.Metadata{EventID: "d1", Source: "github", EventType: "push", HookID: "42"}},
		{"jira retry", idempotency.Delivery{Key: "j1", Source: "jira", Event: "jira:issue_updated", Retry: 3},
			kafkapub.Metadata{EventID: "j1", Source: "jira", EventType: "jira:issue_updated", Retry: 3}},
	}
	for _, tt := range tests {
		got, err := kafkapub.ReadMetadata(kafka.Message{Headers: kafkapub.Headers(tt.give)})
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.want, got, tt.name)
	}
	_, err := kafkapub.ReadMetadata(kafka.Message{})
	assert.ErrorIs(t, err, kafkapub.ErrNoMetadata)
	_, err = kafkapub.ReadMetadata(kafka.Message{Headers: []kafka.Header{{Key: kafkapub.HeaderEventID, Value: []byte("d")}, {Key: kafkapub.HeaderRetry, Value: []byte("x")}}})
	assert.ErrorIs(t, err, kafkapub.ErrNoMetadata)
}

// The header values share one buffer: appending to one must not change
// the next (the claim check appends headers, a caller may append bytes).
func TestHeadersValuesApart(t *testing.T) {
	hs := kafkapub.Headers(idempotency.Delivery{Key: "d1", Source: "github", Event: "push", HookID: "42", Retry: 7})
	want := []kafka.Header{
		{Key: kafkapub.HeaderEventID, Value: []byte("d1")},
		{Key: kafkapub.HeaderSource, Value: []byte("github")},
		{Key: kafkapub.HeaderEventType, Value: []byte("push")},
		{Key: kafkapub.HeaderHookID, Value: []byte("42")},
		{Key: kafkapub.HeaderRetry, Value: []byte("7")},
	}
	require.Equal(t, want, hs)
	for i := range hs {
		_ = append(hs[i].Value, "XXXXXXXX"...)
	}
	assert.Equal(t, want, hs)
	empty := kafkapub.Headers(idempotency.Delivery{Key: "d2"})
	assert.NotNil(t, empty[1].Value, "an empty source is an empty value, not a null one")
	assert.Len(t, empty, 2)
}

// Publish writes the metadata and the delivery's partition key (its
// tenant, not its delivery id, so one tenant's events keep their order and
// their windows); a consumer reads them back from the record with
// ReadMetadata. Both publishers agree.
func TestPublishMetadataAndPartitionKey(t *testing.T) {
	brokers := testkit.Kafka(t)
	tests := []struct {
		name string
		give func(t *testing.T, topic string) func(context.Context, idempotency.Delivery) error
	}{
		{"Publisher", func(t *testing.T, topic string) func(context.Context, idempotency.Delivery) error {
			return newPublisher(t, brokers, topic, kafkapub.Options{SkipDurabilityCheck: true}).Publish
		}},
		{"IdempotentPublisher", func(t *testing.T, topic string) func(context.Context, idempotency.Delivery) error {
			p, err := kafkapub.NewIdempotent(context.Background(), brokers, topic, kafkapub.Options{SkipDurabilityCheck: true})
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, p.Close()) })
			return p.Publish
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := testkit.Name(t, "meta")
			testkit.CreateTopic(t, brokers, topic, 3)
			publish := tt.give(t, topic)
			d := idempotency.Delivery{Key: "d1", Source: "github", Event: "pull_request", HookID: "42", Partition: "github/acme", Body: []byte(`{}`)}
			require.NoError(t, publish(context.Background(), d))

			r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: topic, Partition: partitionOf(t, "github/acme", 3), MaxWait: 100 * time.Millisecond})
			defer r.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := r.ReadMessage(ctx)
			require.NoError(t, err)
			assert.Equal(t, "github/acme", string(m.Key))
			md, err := kafkapub.ReadMetadata(m)
			require.NoError(t, err)
			assert.Equal(t, kafkapub.Metadata{EventID: "d1", Source: "github", EventType: "pull_request", HookID: "42"}, md)
		})
	}
}

func partitionOf(t *testing.T, key string, n int) int {
	t.Helper()
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: []byte(key)}, parts...)
}
