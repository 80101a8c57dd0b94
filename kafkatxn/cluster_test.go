package kafkatxn_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestTxProducerClusterFailover runs transactions on three Apache Kafka
// brokers (replication factor 3, min.insync.replicas 2) through the two
// kills only a cluster has, each in the middle of an open transaction:
// (1) the partition leader is killed with SIGKILL after the transaction's
// first record, a new leader is elected and the transaction goes on there
// and commits; (2) the transaction coordinator's broker is killed after
// the transaction's records, the coordinator moves to another broker
// (which loads __transaction_state) and the Commit completes there; (3)
// the coordinator is killed between a prepared transaction and its
// CommitPrepared, which commits it on the new coordinator. A
// read_committed reader then sees every record of the three transactions
// exactly once. make test-cluster runs it (testkit.SkipUnlessKafkaCluster).
func TestTxProducerClusterFailover(t *testing.T) {
	testkit.SkipUnlessKafkaCluster(t)
	kb := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{Nodes: 3})
	brokers := kb.Brokers()
	const topic, txid = "failover", "failover-tx"
	testkit.CreateTopic(t, brokers, topic, 1)
	ctx := context.Background()
	// An election and a coordinator move take seconds: the delivery
	// timeout covers them on a loaded machine.
	opts := kafkatxn.TxOptions{ProducerOptions: kafkatxn.ProducerOptions{InitialBackoff: 50 * time.Millisecond, DeliveryTimeout: 2 * time.Minute}}
	p, err := kafkatxn.NewTxProducer(ctx, brokers, txid, opts)
	require.NoError(t, err)
	defer func() { p.Close() }()
	produce := func(vals ...string) {
		t.Helper()
		for _, v := range vals {
			_, err := p.Produce(ctx, topic, 0, rec(v))
			require.NoError(t, err, "produce %s", v)
		}
	}

	// (1) The leader, mid-transaction.
	produce("leader-1")
	leader := leaderOf(t, brokers, topic)
	t0 := time.Now()
	kb.KillNode(leader)
	produce("leader-2")
	require.NoError(t, p.Commit(ctx))
	t.Logf("leader %d killed mid-transaction: produced and committed on the new leader in %v", leader, time.Since(t0).Round(time.Millisecond))
	kb.StartNode(leader)

	// (2) The transaction coordinator, mid-transaction.
	produce("coord-1", "coord-2")
	coord := coordinatorOf(t, brokers, txid)
	t0 = time.Now()
	kb.KillNode(coord)
	require.NoError(t, p.Commit(ctx))
	t.Logf("coordinator %d killed mid-transaction: committed on the new one in %v", coord, time.Since(t0).Round(time.Millisecond))
	kb.StartNode(coord)

	// (3) The coordinator, between pre-commit and CommitPrepared.
	produce("prepared-1")
	txn := p.Txn()
	require.NoError(t, p.Close())
	coord = coordinatorOf(t, brokers, txid)
	kb.KillNode(coord)
	require.NoError(t, kafkatxn.CommitPrepared(ctx, brokers, txn, opts))
	kb.StartNode(coord)

	assertExactly(t, []string{"leader-1", "leader-2", "coord-1", "coord-2", "prepared-1"}, readCommitted(t, brokers, topic, 1))
}

// leaderOf returns the node id leading partition 0 of topic.
func leaderOf(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	cl := adminClient(t, brokers)
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.NotEmpty(t, resp.Topics[0].Partitions)
	return int(resp.Topics[0].Partitions[0].Leader)
}

// coordinatorOf returns the node id of transactional id txid's
// coordinator.
func coordinatorOf(t *testing.T, brokers []string, txid string) int {
	t.Helper()
	cl := adminClient(t, brokers)
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1 // transaction
	req.CoordinatorKey = txid
	req.CoordinatorKeys = []string{txid}
	resp, err := req.RequestWith(context.Background(), cl)
	require.NoError(t, err)
	if len(resp.Coordinators) > 0 {
		return int(resp.Coordinators[0].NodeID)
	}
	return int(resp.NodeID)
}

// adminClient is a franz-go client for the tests' metadata questions,
// closed at cleanup.
func adminClient(t *testing.T, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}
