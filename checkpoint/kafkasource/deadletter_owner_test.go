package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestDeadLetterTwoOwners: an owner that lost its partition without
// knowing (paused past its session timeout) and the partition's next owner
// meet the same poison record. Each looks in the dead-letter topic before
// writing, so both can find it missing; the record must still land once.
// The old owner looked first, then the new owner wrote it; the old owner's
// write must fail (fenced), not add a second copy. Then a write of the old
// owner that was in flight when the new owner looked: aborted, never
// visible, while the new owner's copy is. Before dead letters were written
// in transactions, both owners' writes landed.
func TestDeadLetterTwoOwners(t *testing.T) {
	brokers := testkit.Kafka(t)
	dlq := testkit.Name(t, "dlq")
	testkit.CreateTopic(t, brokers, dlq, 1)
	group := testkit.Name(t, "owners")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	owner := func(topic string) *deadLetters {
		d, err := newDeadLetters(DeadLetter{Topic: dlq}, group, brokers, kafka.DefaultDialer,
			checkpoint.TopicPartition{Topic: topic, Partition: 3})
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	poison := func(topic string, offset int64) kafka.Message {
		return kafka.Message{Topic: topic, Partition: 3, Offset: offset, Key: []byte("k"), Value: []byte("garbage"),
			Headers: []kafka.Header{{Key: "event-id", Value: []byte("ev-" + strconv.FormatInt(offset, 10))}}}
	}
	cause := errors.New("invalid syntax")

	t.Run("the old owner looked first", func(t *testing.T) {
		old, next := owner("looked"), owner("looked")
		require.NoError(t, old.ready(ctx)) // found nothing
		already, err := next.write(ctx, poison("looked", 7), cause)
		require.NoError(t, err)
		assert.False(t, already)
		_, err = old.write(ctx, poison("looked", 7), cause)
		require.Error(t, err, "the old owner wrote a second copy")
		assert.True(t, kafkatxn.IsFenced(err), "want fenced, got %v", err)

		// The owner after a restart finds the record and writes nothing.
		already, err = owner("looked").write(ctx, poison("looked", 7), cause)
		require.NoError(t, err)
		assert.True(t, already)
	})

	t.Run("the old owner's write was in flight", func(t *testing.T) {
		old, next := owner("inflight"), owner("inflight")
		require.NoError(t, old.ready(ctx))
		_, err := old.p.Produce(ctx, dlq, old.partition, kafkatxn.Record{Value: []byte("garbage"), Headers: []kafkatxn.Header{
			{Key: HeaderDeadLetterTopic, Value: []byte("inflight")},
			{Key: HeaderDeadLetterPartition, Value: []byte("3")},
			{Key: HeaderDeadLetterOffset, Value: []byte("9")},
		}})
		require.NoError(t, err)
		already, err := next.write(ctx, poison("inflight", 9), cause)
		require.NoError(t, err)
		assert.False(t, already, "the old owner's uncommitted write was taken for a dead letter")
		require.Error(t, old.p.Commit(ctx), "the old owner committed after the new owner looked")
	})

	// What a read_committed consumer of the dead-letter topic sees.
	seen := map[string]int{}
	for _, m := range testkit.ReadTopic(t, brokers, dlq, 0) {
		o, err := ParseDeadLetter(m)
		require.NoError(t, err)
		assert.Equal(t, "invalid syntax", o.Err)
		seen[o.Topic+"/"+strconv.FormatInt(o.Offset, 10)]++
	}
	assert.Equal(t, map[string]int{"looked/7": 1, "inflight/9": 1}, seen)
}

// TestDeadLetterOptions: the dead-letter writer dials through a
// *kafka.Transport's settings, so another RoundTripper is refused with
// ErrInvalidOptions instead of being ignored; and a chain of the
// dead-letter topic itself (a Group.TopicRegex matching it) is refused
// rather than feed its dead letters back to itself.
func TestDeadLetterOptions(t *testing.T) {
	_, err := newDeadLetters(DeadLetter{Topic: "dlq", Transport: roundTripperFunc(nil)}, "g", []string{"localhost:9092"},
		kafka.DefaultDialer, checkpoint.TopicPartition{Topic: "t"})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "*kafka.Transport")

	_, err = newDeadLetters(DeadLetter{Topic: "dlq"}, "g", []string{"localhost:9092"},
		kafka.DefaultDialer, checkpoint.TopicPartition{Topic: "dlq", Partition: 1})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "a topic the chain reads")

	d, err := newDeadLetters(DeadLetter{Topic: "dlq"}, "g", []string{"localhost:9092"},
		kafka.DefaultDialer, checkpoint.TopicPartition{Topic: "t", Partition: 1})
	require.NoError(t, err)
	assert.Equal(t, "g-deadletter-t-1", d.txid, "the documented default transactional id")
	require.NoError(t, d.Close())
}

type roundTripperFunc func(context.Context, net.Addr, kafka.Request) (kafka.Response, error)

func (f roundTripperFunc) RoundTrip(ctx context.Context, addr net.Addr, req kafka.Request) (kafka.Response, error) {
	return f(ctx, addr, req)
}

// TestDeadLetterErrorRetryable: a dead-letter write that failed on Kafka
// or the network, its own timeouts included, restarts the chain (the
// restarted writer fences the old transaction and finds what committed);
// a fenced writer, a cancelled one and a refusal do not. Under load 50 a
// produce past the 10 s delivery timeout used to end Run.
func TestDeadLetterErrorRetryable(t *testing.T) {
	tests := []struct {
		name string
		give error
		want bool
	}{
		{"produce outcome unknown", fmt.Errorf("kafkatxn: produce dlq/0: %w: delivery timeout: %w", kafkatxn.ErrOutcomeUnknown, context.DeadlineExceeded), true},
		{"scan past its bound", fmt.Errorf("read dead-letter topic: %w", context.DeadlineExceeded), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"fenced", fmt.Errorf("kafkatxn: commit: %w", kafkatxn.ErrFenced), false},
		{"cancelled", fmt.Errorf("produce: %w", context.Canceled), false},
		{"no such topic", errors.New("kafkasource: dead-letter topic dlq does not exist"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fmt.Errorf("chain: %w", &deadLetterError{tt.give})
			assert.Equal(t, tt.want, IsRetryable(err))
			assert.ErrorIs(t, err, tt.give)
		})
	}
}
