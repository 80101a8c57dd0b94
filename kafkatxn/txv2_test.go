package kafkatxn_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// markers returns the first n transaction markers of topic's partition 0
// (read uncommitted, from offset 0), in log order, waiting for them: the
// coordinator writes them after EndTxn returned.
func markers(t *testing.T, brokers []string, topic string, n int) []kafkawire.Batch {
	t.Helper()
	f := kafkawire.Fetcher{Dialer: &kafka.Dialer{Timeout: 10 * time.Second}, Brokers: brokers, Topic: topic,
		MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond, Uncommitted: true}
	defer f.Close()
	var out []kafkawire.Batch
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		require.True(t, time.Now().Before(deadline), "%d of %d markers after 30 s", len(out), n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		bs, _, err := f.FetchBatches(ctx)
		cancel()
		require.NoError(t, err)
		for _, b := range bs {
			if b.Control {
				out = append(out, b)
			}
			f.Next = max(f.Next, b.LastOffset+1)
		}
	}
	return out
}

// TestTxProducerTransactionVersion runs transactions with the protocol the
// broker offers and with transactions v1 forced, and tells them apart by
// what the broker wrote: with transactions v2 (KIP-890 part 2; Apache
// Kafka 4.x with transaction.version 2, the default of a new 4.4 cluster)
// the coordinator bumps the epoch when the transaction ends and writes the
// markers with the bumped epoch, and EndTxn v5 hands that epoch back (the
// next transaction runs with it, no InitProducerId between); with v1 the
// markers carry the transaction's own epoch, and the producer bumps the
// epoch itself. Either way each transaction has its own epoch, and
// CommitPrepared of a committed transaction, repeated, says committed.
func TestTxProducerTransactionVersion(t *testing.T) {
	brokers := testkit.Kafka(t)
	impl := testkit.KafkaImplementation(t)
	ctx := context.Background()
	for _, forceV1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceV1=%v", forceV1), func(t *testing.T) {
			topic := testkit.Name(t, "tv")
			testkit.CreateTopic(t, brokers, topic, 1)
			var log bytes.Buffer
			p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{TransactionsV1: forceV1,
				Logger: slog.New(slog.NewTextHandler(&log, nil))})
			require.NoError(t, err)
			defer p.Close()
			want := 1
			switch {
			case forceV1:
			case impl == testkit.KafkaFake:
				want = p.TransactionVersion() // as kfake's version says
			case impl != testkit.KafkaApache39:
				// A new 4.x cluster finalizes transaction.version 2, unless
				// the test-compat line formats it with 1.
				want = 2
				if v := testkit.KafkaTransactionVersion(t); v != 0 {
					want = v
				}
			}
			require.Equal(t, want, p.TransactionVersion())
			assert.Contains(t, log.String(), fmt.Sprintf("transaction_version=%d", want), "the log line says which")

			var txns []kafkatxn.Txn
			for i := range 3 {
				_, err := p.Produce(ctx, topic, 0, rec(fmt.Sprintf("r%d", i)))
				require.NoError(t, err)
				txn := p.Txn()
				assert.Equal(t, want, txn.Version)
				require.NoError(t, p.Commit(ctx))
				txns = append(txns, txn)
				if want == 2 {
					// EndTxn v5 answered with the next epoch.
					assert.Equal(t, txn.Epoch+1, p.Txn().Epoch, "epoch after commit %d", i)
				}
			}
			ms := markers(t, brokers, topic, len(txns))
			for i, m := range ms {
				assert.True(t, m.Commit)
				assert.Equal(t, txns[i].ProducerID, m.ProducerID)
				switch {
				case want == 2 && impl == testkit.KafkaFake:
					// kfake bumps the epoch at EndTxn v5 but writes the
					// marker with the transaction's epoch; CommitPrepared
					// takes either (a marker with the epoch or a later one).
					assert.Contains(t, []int16{txns[i].Epoch, txns[i].Epoch + 1}, m.ProducerEpoch, "marker %d", i)
				case want == 2:
					assert.Equal(t, txns[i].Epoch+1, m.ProducerEpoch, "marker %d: bumped by the coordinator", i)
				default:
					assert.Equal(t, txns[i].Epoch, m.ProducerEpoch, "marker %d: the transaction's epoch", i)
				}
				if i > 0 {
					assert.Greater(t, txns[i].Epoch, txns[i-1].Epoch, "each transaction has its own epoch")
				}
			}
			// The last transaction is still the id's latest: EndTxn
			// repeated answers committed; the earlier ones are settled by
			// their markers.
			for _, txn := range txns {
				require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, txn, kafkatxn.TxOptions{}))
			}
			assertExactly(t, []string{"r0", "r1", "r2"}, readCommitted(t, brokers, topic, 1))
		})
	}
}

// TestTxProducerTransactionAbortable: a Produce answered with KIP-890's
// TRANSACTION_ABORTABLE (kfake injects it) makes the transaction
// abortable, not the producer fenced: Commit refuses, Abort clears it, and
// the next transaction commits; none of the aborted one's records is read.
func TestTxProducerTransactionAbortable(t *testing.T) {
	k := testkit.StartKfake(t)
	brokers := k.Brokers()
	topic := testkit.Name(t, "txab")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 2, p.TransactionVersion(), "kfake offers transactions v2")

	_, err = p.Produce(ctx, topic, 0, rec("a"))
	require.NoError(t, err)
	k.Cluster().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.TransactionAbortable, Count: 1})
	_, err = p.Produce(ctx, topic, 0, rec("b"))
	require.ErrorIs(t, err, kafkatxn.ErrAbortable)
	assert.False(t, kafkatxn.IsFenced(err))
	assert.ErrorIs(t, p.Commit(ctx), kafkatxn.ErrAbortable, "the transaction cannot commit")
	require.NoError(t, p.Abort(ctx))

	_, err = p.Produce(ctx, topic, 0, rec("c"))
	require.NoError(t, err)
	require.NoError(t, p.Commit(ctx))
	assertExactly(t, []string{"c"}, readCommitted(t, brokers, topic, 1))
}

// TestTxProducerCommitOutcomeUnknown: a Commit whose EndTxn is never
// answered with an outcome (REQUEST_TIMED_OUT until DeliveryTimeout, as
// kfake injects it) wraps ErrOutcomeUnknown, not a definite failure;
// calling Commit again once the coordinator answers commits the
// transaction once. Both protocols, on kfake, whose requests are observed:
// v2 sends EndTxn v5 and Produce v12 and no AddPartitionsToTxn, v1 (forced)
// EndTxn below v5 and AddPartitionsToTxn.
func TestTxProducerCommitOutcomeUnknown(t *testing.T) {
	for _, forceV1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceV1=%v", forceV1), func(t *testing.T) {
			k := testkit.StartKfake(t)
			brokers := k.Brokers()
			topic := testkit.Name(t, "txu")
			testkit.CreateTopic(t, brokers, topic, 1)
			c := k.Cluster()
			var mu sync.Mutex
			versions := map[string][]int16{}
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce, kmsg.EndTxn, kmsg.AddPartitionsToTxn}, Count: -1, Observe: true,
				When: func(r kmsg.Request) bool {
					mu.Lock()
					defer mu.Unlock()
					name := kmsg.NameForKey(r.Key())
					versions[name] = append(versions[name], r.GetVersion())
					return true
				}})
			ctx := context.Background()
			p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{TransactionsV1: forceV1,
				ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: 300 * time.Millisecond, InitialBackoff: time.Millisecond}})
			require.NoError(t, err)
			defer p.Close()

			_, err = p.Produce(ctx, topic, 0, rec("a"))
			require.NoError(t, err)
			h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.RequestTimedOut, Count: -1})
			err = p.Commit(ctx)
			require.ErrorIs(t, err, kafkatxn.ErrOutcomeUnknown)
			assert.False(t, kafkatxn.IsFenced(err))
			h.Remove()
			require.NoError(t, p.Commit(ctx), "the same commit again")
			_, err = p.Produce(ctx, topic, 0, rec("b"))
			require.NoError(t, err)
			require.NoError(t, p.Commit(ctx))
			assertExactly(t, []string{"a", "b"}, readCommitted(t, brokers, topic, 1))

			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, versions["EndTxn"])
			if forceV1 {
				assert.Less(t, slices.Max(versions["EndTxn"]), int16(5), "v1: %v", versions)
				assert.Less(t, slices.Max(versions["Produce"]), int16(12), "v1: %v", versions)
				assert.NotEmpty(t, versions["AddPartitionsToTxn"], "v1 adds partitions itself")
			} else {
				assert.Equal(t, []int16{5}, slices.Compact(versions["EndTxn"]), "v2: %v", versions)
				assert.Equal(t, []int16{12}, slices.Compact(versions["Produce"]), "v2: %v", versions)
				assert.Empty(t, versions["AddPartitionsToTxn"], "v2: the Produce adds the partition")
			}
		})
	}
}
