package kafkatxn_test

import (
	"context"
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
// epoch), and each commits.
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
}
