package kafkasink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestRollingRestart is the operation every deployment does: the three
// brokers of an Apache Kafka cluster (replication factor 3,
// min.insync.replicas 2) restarted one after another while the pipeline
// (kafkasource -> dedup -> kafkasink, transactions per checkpoint) runs and
// new input arrives, the first two with SIGTERM, the last with SIGKILL.
// Partition leaders, the group coordinator and the transaction coordinator
// move with every restart; a read_committed reader then reads every id
// exactly once, and nothing else. make test-cluster runs it
// (testkit.SkipUnlessKafkaCluster).
func TestRollingRestart(t *testing.T) {
	testkit.SkipUnlessKafkaCluster(t)
	kb := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{Nodes: 3})
	brokers := kb.Brokers()
	nm := newNames(t, brokers)
	const nodes = 3
	produceRound(t, brokers, nm.In, 0)
	store, run := pipeline(t, brokers, nm, t.TempDir(), "rolling", "", 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	for id := 1; id <= nodes; id++ {
		t0 := time.Now()
		how := "SIGTERM"
		if id == nodes {
			how = "SIGKILL"
			kb.KillNode(id)
		} else {
			kb.StopNode(id)
		}
		produceRound(t, brokers, nm.In, id) // input while the node is down
		kb.StartNode(id)
		t.Logf("broker %d: %s, a round of input, back after %v", id, how, time.Since(t0).Round(time.Millisecond))
	}
	waitFinished(t, store, nm.In, (nodes+1)*perRound*2, done, cancel)
	want := readWant(nodes + 1)
	got := readCommitted(t, brokers, nm.Out, partitions)
	for v := range want {
		assert.Equal(t, 1, got[v], "record %s", v)
	}
	assert.Len(t, got, len(want))
}
