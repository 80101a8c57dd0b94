package kafkatxn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// setTransactionVersion finalizes the cluster's transaction.version at
// level (UpdateFeatures, as kafka-features.sh does; kafka-go lacks it).
func setTransactionVersion(t *testing.T, brokers []string, level int16) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer cl.Close()
	req := kmsg.NewPtrUpdateFeaturesRequest()
	req.TimeoutMillis = 30000
	u := kmsg.NewUpdateFeaturesRequestFeatureUpdate()
	u.Feature, u.MaxVersionLevel, u.UpgradeType = "transaction.version", level, 1
	if level < 2 {
		u.UpgradeType = 2 // a safe downgrade
	}
	req.FeatureUpdates = append(req.FeatureUpdates, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Zero(t, res.ErrorCode, "update features: %v", res.ErrorMessage)
	for _, r := range res.Results {
		require.Zero(t, r.ErrorCode, "update %s: %v", r.Feature, r.ErrorMessage)
	}
}

// TestTxProducerFollowsTransactionVersion runs on an Apache Kafka 4.4
// broker of its own whose transaction.version is set to 1 and back to 2,
// as an operator does with kafka-features.sh: a producer started while it
// is 1 runs transactions v1 (markers with the transaction's own epoch),
// one started after it is 2 again runs v2 (markers with the bumped
// epoch), and each commits. Then one producer keeps running while the
// level goes 2 to 1 and back to 2: it follows each change at a
// transaction start, and read_committed sees every committed transaction
// exactly once and no aborted one, also when the level changes under an
// open transaction.
func TestTxProducerFollowsTransactionVersion(t *testing.T) {
	if testkit.KafkaImplementation(t) != testkit.KafkaApache4 {
		t.Skip("transaction.version is a Kafka 4 feature")
	}
	if testing.Short() {
		t.Skip("starts a broker of its own")
	}
	brokers := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{}).Brokers()
	ctx := context.Background()
	for _, level := range []int16{1, 2} {
		setTransactionVersion(t, brokers, level)
		topic := testkit.Name(t, "tvl") + string(rune('0'+level))
		testkit.CreateTopic(t, brokers, topic, 1)
		// The feature reaches every broker with the metadata log: wait
		// until a new producer sees it.
		var p *kafkatxn.TxProducer
		require.Eventually(t, func() bool {
			var err error
			if p, err = kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{}); err != nil {
				return false
			}
			if p.TransactionVersion() == int(level) {
				return true
			}
			p.Close()
			return false
		}, time.Minute, 100*time.Millisecond, "transaction.version %d", level)
		_, err := p.Produce(ctx, topic, 0, rec("a"))
		require.NoError(t, err)
		txn := p.Txn()
		assert.Equal(t, int(level), txn.Version)
		require.NoError(t, p.Commit(ctx))
		ms := markers(t, brokers, topic, 1)
		want := txn.Epoch
		if level == 2 {
			want++
		}
		assert.Equal(t, want, ms[0].ProducerEpoch, "transaction.version %d", level)
		require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, txn, kafkatxn.TxOptions{}))
		assertExactly(t, []string{"a"}, readCommitted(t, brokers, topic, 1))
		p.Close()
	}
	followRunning(t, brokers)
}

// followRunning runs transactions on one producer, two in five aborted,
// while transaction.version goes from 2 to 1 and back to 2, first
// between two transactions, then under an open transaction (committed
// and aborted), as an operator's change may land.
func followRunning(t *testing.T, brokers []string) {
	ctx := context.Background()
	topic := testkit.Name(t, "tvrun")
	testkit.CreateTopic(t, brokers, topic, 1)
	p, err := kafkatxn.NewTxProducer(ctx, brokers, topic+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 2, p.TransactionVersion())
	kafkatxn.SetVersionRecheck(p, 0) // read the level at every transaction start
	var committed []string
	n := 0
	// run ends transactions until one ran with version want, and two more.
	run := func(want int) {
		seen := -1
		deadline := time.Now().Add(2 * time.Minute)
		for seen < 0 || n < seen+3 {
			require.True(t, time.Now().Before(deadline), "no transaction with version %d", want)
			v := fmt.Sprintf("r%d", n)
			_, err := p.Produce(ctx, topic, 0, rec(v))
			require.NoError(t, err, "transaction %d", n)
			if seen < 0 && p.Txn().Version == want {
				seen = n
			}
			if n%5 == 2 { // the switches come after an abort (3) and a commit (6)
				require.NoError(t, p.Abort(ctx), "transaction %d", n)
			} else {
				require.NoError(t, p.Commit(ctx), "transaction %d", n)
				committed = append(committed, v)
			}
			n++
		}
		t.Logf("version %d from transaction %d", want, seen)
	}
	// across changes the level while a transaction is open: the
	// transaction ends in the protocol it began with.
	across := func(level int16, commit bool) {
		v := fmt.Sprintf("r%d", n)
		n++
		_, err := p.Produce(ctx, topic, 0, rec(v))
		require.NoError(t, err)
		setTransactionVersion(t, brokers, level)
		if !commit {
			require.NoError(t, p.Abort(ctx), "level %d under an open transaction", level)
			return
		}
		require.NoError(t, p.Commit(ctx), "level %d under an open transaction", level)
		committed = append(committed, v)
	}
	run(2)
	setTransactionVersion(t, brokers, 1)
	run(1)
	setTransactionVersion(t, brokers, 2)
	run(2)
	across(1, true)
	run(1)
	across(2, false)
	run(2)
	across(1, false)
	run(1)
	across(2, true)
	run(2)
	assertExactly(t, committed, readCommitted(t, brokers, topic, 1))
}
