package kafkatxn_test

// What the Java clients do and the SDK's readers did not (issue 42): each
// test here failed before its fix, on Apache Kafka.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// createTopic creates topic with one partition and the given configs.
func createTopic(t *testing.T, brokers []string, topic string, configs map[string]string) {
	t.Helper()
	var entries []kafka.ConfigEntry
	for k, v := range configs {
		entries = append(entries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	res, err := cl.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: -1, ConfigEntries: entries,
	}}})
	require.NoError(t, err)
	require.NoError(t, res.Errors[topic])
}

// TestReaderLogAppendTime: on a topic with
// message.timestamp.type=LogAppendTime the broker stamps each batch with
// its append time, and a Reader reports that time for every record, as the
// Java consumer does, not the producer's CreateTime still in the records.
// On a CreateTime topic it reports the producer's time.
func TestReaderLogAppendTime(t *testing.T) {
	brokers := testkit.Kafka(t)
	appendTopic, createTopicName := testkit.Name(t, "logtime"), testkit.Name(t, "createtime")
	createTopic(t, brokers, appendTopic, map[string]string{"message.timestamp.type": "LogAppendTime"})
	createTopic(t, brokers, createTopicName, map[string]string{"message.timestamp.type": "CreateTime"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The records carry a CreateTime an hour old: far from any append
	// time, inside the broker's log.message.timestamp.*.ms bounds.
	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer p.Close()
	created := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
	before := time.Now().Add(-time.Second)
	for _, topic := range []string{appendTopic, createTopicName} {
		_, err = p.Produce(ctx, topic, 0,
			kafkatxn.Record{Value: []byte("a"), Time: created},
			kafkatxn.Record{Value: []byte("b"), Time: created.Add(time.Second)})
		require.NoError(t, err)
	}
	after := time.Now().Add(time.Second)

	ms := testkit.ReadTopic(t, brokers, appendTopic, 0)
	require.Len(t, ms, 2)
	for _, m := range ms {
		assert.True(t, m.Time.After(before) && m.Time.Before(after),
			"record %s: time %v, want the broker's append time between %v and %v", m.Value, m.Time, before, after)
	}
	assert.Equal(t, ms[0].Time, ms[1].Time, "one batch, one append time")

	ms = testkit.ReadTopic(t, brokers, createTopicName, 0)
	require.Len(t, ms, 2)
	assert.Equal(t, created, ms[0].Time)
	assert.Equal(t, created.Add(time.Second), ms[1].Time)
}

// TestReaderNullAndEmpty: a Reader tells a null key, value or header value
// (nil) from an empty one ([]byte{}), as the Java consumer does: a null
// value is a tombstone, an empty one is not.
func TestReaderNullAndEmpty(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "nulls")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Produce(ctx, topic, 0,
		kafkatxn.Record{Key: nil, Value: nil, Headers: []kafkatxn.Header{{Key: "h", Value: nil}}},
		kafkatxn.Record{Key: []byte{}, Value: []byte{}, Headers: []kafkatxn.Header{{Key: "h", Value: []byte{}}}},
		kafkatxn.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kafkatxn.Header{{Key: "h", Value: []byte("x")}}})
	require.NoError(t, err)

	ms := testkit.ReadTopic(t, brokers, topic, 0)
	require.Len(t, ms, 3)
	tests := []struct {
		name      string
		got, want []byte
	}{
		{"null key", ms[0].Key, nil},
		{"null value", ms[0].Value, nil},
		{"null header value", ms[0].Headers[0].Value, nil},
		{"empty key", ms[1].Key, []byte{}},
		{"empty value", ms[1].Value, []byte{}},
		{"empty header value", ms[1].Headers[0].Value, []byte{}},
		{"key", ms[2].Key, []byte("k")},
		{"value", ms[2].Value, []byte("v")},
		{"header value", ms[2].Headers[0].Value, []byte("x")},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want == nil, tt.got == nil, "%s: got %#v, want %#v", tt.name, tt.got, tt.want)
		assert.Equal(t, tt.want, tt.got, tt.name)
	}
}

// TestReaderFetchEndsWithContext: a Fetch waiting at the end of the log
// (the broker's MaxWait far longer than the context) returns an error that
// matches the context's: context.DeadlineExceeded at a deadline,
// context.Canceled at a cancel, not the i/o timeout that interrupted the
// read.
func TestReaderFetchEndsWithContext(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "idle")
	testkit.CreateTopic(t, brokers, topic, 1)
	p, err := kafkatxn.NewProducer(context.Background(), brokers, kafkatxn.ProducerOptions{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Produce(context.Background(), topic, 0, rec("first")) // the partition has a leader
	require.NoError(t, err)
	r, err := kafkatxn.NewReader(brokers, topic, 0, 1, kafkatxn.ReaderOptions{MaxWait: 20 * time.Second})
	require.NoError(t, err)
	defer r.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err = r.Fetch(ctx)
	cancel()
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	_, err = r.Fetch(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}

// TestCommitPreparedPastOpenTransaction: a transaction whose epoch has
// moved on is settled from its marker in the log, and another producer's
// transaction, open since before that marker, holds the last stable
// offset below it. CommitPrepared must read past the last stable offset
// (read_uncommitted) to find the marker; read_committed it retried until
// its delivery timeout with CONCURRENT_TRANSACTIONS.
func TestCommitPreparedPastOpenTransaction(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "lso")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: 20 * time.Second}}

	own, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-own", opts)
	require.NoError(t, err)
	defer own.Close()
	_, err = own.Produce(ctx, topic, 0, rec("own"))
	require.NoError(t, err)
	txn := own.Txn()

	other, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-other", opts)
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Produce(ctx, topic, 0, rec("open")) // stays open: the LSO stops here
	require.NoError(t, err)

	require.NoError(t, own.Commit(ctx))                  // its marker lies past the LSO
	_, err = own.Produce(ctx, topic, 0, rec("own-next")) // the next transaction: the epoch moves on
	require.NoError(t, err)
	require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, txn, opts), "the committed transaction, settled from the log")

	require.NoError(t, own.Commit(ctx))
	require.NoError(t, other.Abort(ctx))
	assertExactly(t, []string{"own", "own-next"}, readCommitted(t, brokers, topic, 1))
}
