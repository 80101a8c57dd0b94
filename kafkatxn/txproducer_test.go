package kafkatxn_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// readCommitted reads topic's partitions to their end, read_committed
// (testkit.ReadTopic, through a Reader), and counts the values.
func readCommitted(t testing.TB, brokers []string, topic string, partitions int) map[string]int {
	t.Helper()
	got := map[string]int{}
	for p := range partitions {
		for _, m := range testkit.ReadTopic(t, brokers, topic, p) {
			got[string(m.Value)]++
		}
	}
	return got
}

func rec(v string) kafkatxn.Record { return kafkatxn.Record{Value: []byte(v)} }

// assertExactly checks that got holds every value of want once and nothing
// else.
func assertExactly(t *testing.T, want []string, got map[string]int) {
	t.Helper()
	for _, v := range want {
		assert.Equal(t, 1, got[v], "record %s", v)
	}
	assert.Len(t, got, len(want), "records read: %v", got)
}

// TestTxProducerCommitAbort writes transactions over two partitions that
// commit and abort in turn: a read_committed Reader sees each committed
// record once and no aborted one, and every transaction has its own epoch.
func TestTxProducerCommitAbort(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txc")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()

	var want []string
	epochs := map[int16]bool{}
	for i := range 6 {
		for part := range 2 {
			v1, v2 := fmt.Sprintf("t%d-p%d-a", i, part), fmt.Sprintf("t%d-p%d-b", i, part)
			_, err := p.Produce(ctx, topic, part, rec(v1), rec(v2))
			require.NoError(t, err)
			if i%2 == 0 {
				want = append(want, v1, v2)
			}
		}
		txn := p.Txn()
		assert.Len(t, txn.Partitions, 2)
		assert.False(t, epochs[txn.Epoch], "epoch %d reused", txn.Epoch)
		epochs[txn.Epoch] = true
		if i%2 == 0 {
			require.NoError(t, p.Commit(ctx))
		} else {
			require.NoError(t, p.Abort(ctx))
		}
	}
	require.NoError(t, p.Commit(ctx), "a commit with nothing written does nothing")
	assertExactly(t, want, readCommitted(t, brokers, topic, 2))
}

// TestTxProducerZombieFenced starts a second producer of the same
// transactional id while the first has a transaction open: the first (the
// zombie) gets ErrFenced on its next produce and commit, an error no
// classifier takes for a retriable one, and its records are never visible.
func TestTxProducerZombieFenced(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txz")
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	txid := topic + "-tx"

	zombie, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer zombie.Close()
	_, err = zombie.Produce(ctx, topic, 0, rec("zombie-1"))
	require.NoError(t, err)

	owner, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer owner.Close()

	_, err = zombie.Produce(ctx, topic, 0, rec("zombie-2"))
	require.Error(t, err)
	assert.True(t, kafkatxn.IsFenced(err), "%v", err)
	assert.False(t, kafkatxn.IsOutcomeUnknown(err))
	assert.False(t, kafkasource.IsRetryable(err), "a fenced producer must not look retriable: %v", err)
	var kerr kafka.Error
	assert.False(t, errors.As(err, &kerr), "the broker's error code must not be in the chain")
	err = zombie.Commit(ctx)
	assert.True(t, kafkatxn.IsFenced(err), "%v", err)

	_, err = owner.Produce(ctx, topic, 0, rec("owner-1"))
	require.NoError(t, err)
	require.NoError(t, owner.Commit(ctx))
	assertExactly(t, []string{"owner-1"}, readCommitted(t, brokers, topic, 1))
}

// TestCommitPrepared resolves recorded transactions as a restore does:
// one still open is committed; committing it again, and again after its
// producer went on to later transactions (so its epoch is no longer
// current), returns nil without committing anything else; one that was
// aborted (its id fenced before the commit) returns ErrAborted.
func TestCommitPrepared(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txp")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	txid := topic + "-tx"

	p1, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	_, err = p1.Produce(ctx, topic, 0, rec("prepared-0"))
	require.NoError(t, err)
	_, err = p1.Produce(ctx, topic, 1, rec("prepared-1"))
	require.NoError(t, err)
	prepared := p1.Txn()
	require.NoError(t, p1.Close()) // the process dies before its commit
	assert.Empty(t, readCommitted(t, brokers, topic, 2), "nothing visible before the commit")

	require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, prepared, kafkatxn.TxOptions{}))
	require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, prepared, kafkatxn.TxOptions{}), "a repeated commit")

	// The next owner fences, writes a transaction it commits and leaves
	// one open; the old transaction's epoch is long gone.
	p2, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p2.Close()
	_, err = p2.Produce(ctx, topic, 0, rec("next-0"))
	require.NoError(t, err)
	require.NoError(t, p2.Commit(ctx))
	_, err = p2.Produce(ctx, topic, 0, rec("open-0"))
	require.NoError(t, err)
	require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, prepared, kafkatxn.TxOptions{}),
		"a committed transaction whose epoch moved on")
	assertExactly(t, []string{"prepared-0", "prepared-1", "next-0"}, readCommitted(t, brokers, topic, 2))

	// p2's open transaction is aborted by the next owner: resolving it
	// says so instead of pretending its records were written.
	open := p2.Txn()
	p3, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p3.Close()
	err = kafkatxn.CommitPrepared(ctx, brokers, open, kafkatxn.TxOptions{})
	assert.ErrorIs(t, err, kafkatxn.ErrAborted)
	assertExactly(t, []string{"prepared-0", "prepared-1", "next-0"}, readCommitted(t, brokers, topic, 2))

	empty := kafkatxn.Txn{TransactionalID: txid, ProducerID: open.ProducerID, Epoch: open.Epoch}
	assert.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, empty, kafkatxn.TxOptions{}), "nothing to commit")
}

// TestCommitPreparedNoMarkerSaysWhy gives CommitPrepared a transaction
// whose epoch moved on but whose recorded partition holds no marker of it
// (a checkpoint naming the wrong first partition): the lookup ends at
// DeliveryTimeout, and its error says what was seen on both sides, the
// log and the coordinator, so that whoever meets it can tell why.
func TestCommitPreparedNoMarkerSaysWhy(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txp")
	testkit.CreateTopic(t, brokers, topic, 2)
	ctx := context.Background()
	txid := topic + "-tx"

	p, err := kafkatxn.NewTxProducer(ctx, brokers, txid, kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Produce(ctx, topic, 0, rec("a"))
	require.NoError(t, err)
	txn := p.Txn()
	require.NoError(t, p.Commit(ctx))
	_, err = p.Produce(ctx, topic, 0, rec("b")) // the epoch moves on (v1: bumped here)
	require.NoError(t, err)
	require.NoError(t, p.Commit(ctx))

	txn.Partitions = []kafkatxn.TxnPartition{{Topic: topic, Partition: 1, FirstOffset: 0}} // never written
	opts := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{DeliveryTimeout: 2 * time.Second}}
	err = kafkatxn.CommitPrepared(ctx, brokers, txn, opts)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, kafkatxn.ErrAborted, "no marker is no outcome")
	msg := err.Error()
	assert.Contains(t, msg, "EndTxn answered")
	assert.Contains(t, msg, fmt.Sprintf("no marker of producer %d in %s/1 from offset 0", txn.ProducerID, topic))
	// The state after a commit: Kafka says CompleteCommit, kfake Empty.
	assert.Regexp(t, fmt.Sprintf(`coordinator: (%s|%s), producer %d, epoch`, kafkatxn.StateCompleteCommit, kafkatxn.StateEmpty, txn.ProducerID), msg)
}

// TestTxProducerCoordinatorFaults runs transactions while the transaction
// coordinator moves between three brokers before every transaction
// (kfake's RehashCoordinators), while it answers NOT_COORDINATOR and
// CONCURRENT_TRANSACTIONS, and while produce acknowledgements are lost:
// every committed record is read once.
func TestTxProducerCoordinatorFaults(t *testing.T) {
	for _, v1 := range []bool{false, true} {
		t.Run(fmt.Sprintf("forceV1=%v", v1), func(t *testing.T) { testTxProducerCoordinatorFaults(t, v1) })
	}
}

// testTxProducerCoordinatorFaults runs TestTxProducerCoordinatorFaults with
// transactions v2 (kfake offers them: partitions join with their first
// Produce, which meets CONCURRENT_TRANSACTIONS), or v1 forced (they join
// with AddPartitionsToTxn, which does).
func testTxProducerCoordinatorFaults(t *testing.T, forceV1 bool) {
	k := testkit.StartKfake(t, kfake.NumBrokers(3))
	brokers := k.Brokers()
	topic := testkit.Name(t, "txf")
	testkit.CreateTopic(t, brokers, topic, 2)
	c := k.Cluster()
	c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ConcurrentTransactions, Count: 2},
		kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, Err: kerr.NotCoordinator, Count: 3},
		kfake.Fault{Keys: []kmsg.Key{kmsg.AddPartitionsToTxn}, Err: kerr.ConcurrentTransactions, Count: 3},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.ConcurrentTransactions, Count: 3},
	)
	loseAcks(c, 4)
	ctx := context.Background()
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{
		ProducerOptions: kafkatxn.ProducerOptions{InitialBackoff: time.Millisecond}, TransactionsV1: forceV1,
	})
	require.NoError(t, err)
	defer p.Close()
	if forceV1 {
		require.Equal(t, 1, p.TransactionVersion())
	} else {
		require.Equal(t, 2, p.TransactionVersion(), "kfake offers transactions v2")
	}
	var want []string
	for i := range 10 {
		c.RehashCoordinators()
		for part := range 2 {
			for j := range 3 {
				v := fmt.Sprintf("t%d-p%d-%d", i, part, j)
				_, err := p.Produce(ctx, topic, part, rec(v))
				require.NoError(t, err, "produce %s", v)
				want = append(want, v)
			}
		}
		require.NoError(t, p.Commit(ctx), "commit %d", i)
	}
	assertExactly(t, want, readCommitted(t, brokers, topic, 2))
}

// TestTxProducerBrokerRestart kills the Apache Kafka broker with SIGKILL in
// the middle of transactions and starts it again on its log directory,
// three times: the producer reconnects, finds the coordinator again and
// goes on. A transaction whose commit returned nil is read once; one that
// failed is started over by a new producer of the id (which fences and
// aborts it), as a restarted sink would; at the end every record is read
// exactly once. Kafka keeps open transactions in its transaction log across
// the kill.
//
// TestTxProducerKfakeRestart runs the same on kfake, stopped with SIGTERM:
// after a SIGKILL kfake forgets open transactions, writes no abort marker
// and does not always notice the cut transaction, so the producer's next
// commit marker commits its orphaned records.
func TestTxProducerBrokerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a broker process")
	}
	srv := testkit.StartApacheKafka(t)
	testTxProducerRestart(t, srv.Brokers(), srv.Kill, srv.Start)
}

// TestTxProducerKfakeRestart is TestTxProducerBrokerRestart on a kfake
// broker process, stopped cleanly (see there).
func TestTxProducerKfakeRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a broker process")
	}
	srv := testkit.StartKfakeProcess(t)
	testTxProducerRestart(t, srv.Brokers(), srv.Stop, srv.Start)
}

func testTxProducerRestart(t *testing.T, brokers []string, stop, start func()) {
	topic := "txkill"
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	// A real broker takes seconds to come back: the delivery timeout covers
	// a restart on a loaded machine.
	opts := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{InitialBackoff: 20 * time.Millisecond, DeliveryTimeout: 2 * time.Minute}}
	p, err := kafkatxn.NewTxProducer(ctx, brokers, "txkill-tx", opts)
	require.NoError(t, err)
	defer func() { p.Close() }()

	const per = 20
	done, restarted := make(chan struct{}), make(chan struct{})
	var want []string
	var during atomic.Int64 // transactions committed while the broker restarted
	go func() {
		defer close(done)
		for i := 0; ; {
			select {
			case <-restarted:
				return
			default:
			}
			var vals []string
			err := func() error {
				for j := range per {
					v := strconv.Itoa(i) + "-" + strconv.Itoa(j)
					if _, err := p.Produce(ctx, topic, 0, rec(v)); err != nil {
						return err
					}
					vals = append(vals, v)
					time.Sleep(time.Millisecond) // transactions are open across the restarts
				}
				return p.Commit(ctx)
			}()
			if err != nil {
				// Start over as a restarted producer does: fence, which
				// aborts whatever the failed transaction wrote.
				t.Logf("transaction %d: %v; starting over", i, err)
				p.Close()
				for {
					if p, err = kafkatxn.NewTxProducer(ctx, brokers, "txkill-tx", opts); err == nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				continue
			}
			want = append(want, vals...)
			i++
			during.Add(1)
		}
	}()
	// Each restart comes once a transaction committed since the last, and
	// the producer stops once one committed after the third.
	for k := range 4 {
		deadline := time.Now().Add(3 * time.Minute)
		for during.Load() <= int64(k) {
			require.True(t, time.Now().Before(deadline), "no transaction committed after restart %d", k)
			time.Sleep(10 * time.Millisecond)
		}
		if k == 3 {
			break
		}
		time.Sleep(50 * time.Millisecond) // into the next transaction
		stop()
		time.Sleep(200 * time.Millisecond)
		start()
	}
	close(restarted)
	<-done
	t.Logf("%d transactions committed across the restarts", during.Load())
	assert.Greater(t, during.Load(), int64(3))
	assertExactly(t, want, readCommitted(t, brokers, topic, 1))
}

// TestTxProducerSendOffsets commits consumer-group offsets inside
// transactions: an aborted transaction's offsets are not committed, a
// committed one's are, with its records.
func TestTxProducerSendOffsets(t *testing.T) {
	brokers := testkit.Kafka(t)
	topic := testkit.Name(t, "txo")
	testkit.CreateTopic(t, brokers, topic, 1)
	group := topic + "-group"
	ctx := context.Background()
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	fetchCommitted := func() int64 {
		cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second}
		res, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: {0}}})
		require.NoError(t, err)
		if errors.Is(res.Error, kafka.GroupIdNotFound) {
			return -1 // nothing was ever committed
		}
		require.NoError(t, res.Error)
		return res.Topics[topic][0].CommittedOffset
	}

	_, err = p.Produce(ctx, topic, 0, rec("aborted"))
	require.NoError(t, err)
	require.NoError(t, p.SendOffsets(ctx, group, -1, "", map[string]map[int]int64{topic: {0: 7}}))
	require.NoError(t, p.Abort(ctx))
	assert.Equal(t, int64(-1), fetchCommitted(), "an aborted transaction commits no offset")

	_, err = p.Produce(ctx, topic, 0, rec("committed"))
	require.NoError(t, err)
	require.NoError(t, p.SendOffsets(ctx, group, -1, "", map[string]map[int]int64{topic: {0: 9}}))
	require.NoError(t, p.Commit(ctx))
	// EndTxn returns before the coordinator wrote the markers, and the
	// offsets of the transaction are visible only after them: Apache Kafka
	// 3.9 answered -1 right after Commit (OffsetFetch below v7 has no
	// require_stable), kfake and 4.4 had them at once.
	assert.Eventually(t, func() bool { return fetchCommitted() == 9 }, time.Minute, 20*time.Millisecond)
	assertExactly(t, []string{"committed"}, readCommitted(t, brokers, topic, 1))
}
