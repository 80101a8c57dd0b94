package kafkasource_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// envRolling sets TestRollingRestart's size as INSTANCESxPARTITIONS
// (BENCHMARKS.md measures 8x64); the default is small.
const envRolling = "KAFKASOURCE_ROLLING"

// TestRollingRestart restarts every instance of a group one by one, then
// adds one instance, under each protocol, while records flow, and counts
// the chains stopped and built. Every record is counted once either way.
// Under ProtocolConsumer no partition stops unless it moves to another
// instance: none is stopped and built again by the same instance (under
// ProtocolClassic every rebalance stops every chain, the ones that stay
// included).
func TestRollingRestart(t *testing.T) {
	instances, partitions := 3, 6
	if v := os.Getenv(envRolling); v != "" {
		_, err := fmt.Sscanf(v, "%dx%d", &instances, &partitions)
		require.NoError(t, err, "%s=%q: want INSTANCESxPARTITIONS", envRolling, v)
	}
	const step = 10 // records per partition produced before each change
	brokers := consumerProtocolKafka(t)
	for _, proto := range []struct {
		name  string
		proto kafkasource.GroupProtocol
	}{{"consumer", kafkasource.ProtocolConsumer}, {"classic", kafkasource.ProtocolClassic}} {
		t.Run(proto.name, func(t *testing.T) {
			topic, group := testkit.Name(t, "rolling"), testkit.Name(t, "rolling")
			testkit.CreateTopic(t, brokers, topic, partitions)
			dir := filepath.Join(t.TempDir(), "shared")
			live := &liveChains{}
			want := int64(0)
			more := func() {
				produce(t, brokers, topic, partitions, int(want), step)
				want += step
			}
			var ins []*instance
			var ccs []*chainCounts
			start := func() {
				in, cc := startMember(t, brokers, group, topic, dir, proto.proto, live)
				ins, ccs = append(ins, in), append(ccs, cc)
			}
			totals := func() (stopped, built int) {
				for _, cc := range ccs {
					b, s := cc.get()
					stopped, built = stopped+sum(s), built+sum(b)
				}
				return stopped, built
			}
			for range instances {
				start()
			}
			more()
			waitAll(t, ins[0], topic, partitions, want, instances)

			// Rolling restart: instance i stops, a new one takes its place.
			live.reset()
			stopped0, built0 := totals()
			own := 0 // chains stopped by the instances that were restarted
			for i := range instances {
				_, s := ccs[i].get()
				before := sum(s)
				require.NoError(t, ins[i].stop(t))
				_, s = ccs[i].get()
				own += sum(s) - before
				start()
				more()
				waitAll(t, ins[0], topic, partitions, want, instances)
			}
			stopped1, built1 := totals()
			stays, maxStay := live.stayed()
			t.Logf("%s: rolling restart of %d instances over %d partitions: %d chains stopped (%d by the instances "+
				"restarted, %d on instances that kept running), %d built; %d stopped and built again on the same instance, "+
				"longest pause of those %v; longest pause of any partition %v",
				proto.name, instances, partitions, stopped1-stopped0, own, stopped1-stopped0-own, built1-built0,
				stays, maxStay.Round(10*time.Millisecond), live.longestPause().Round(10*time.Millisecond))
			rollingStays := stays

			// One more instance joins.
			live.reset()
			start()
			more()
			waitAll(t, ins[0], topic, partitions, want, min(instances+1, partitions))
			stopped2, built2 := totals()
			stays, maxStay = live.stayed()
			t.Logf("%s: one instance joins %d over %d partitions: %d chains stopped, %d built; %d stopped and built "+
				"again on the same instance, longest pause of those %v; longest pause of any partition %v",
				proto.name, instances, partitions, stopped2-stopped1, built2-built1, stays,
				maxStay.Round(10*time.Millisecond), live.longestPause().Round(10*time.Millisecond))

			for _, cp := range latest(t, ins[0].store, topic, partitions) {
				requireConsistent(t, cp)
			}
			for _, in := range ins[instances:] {
				require.NoError(t, in.stop(t))
			}
			assert.Empty(t, live.overlap, "no partition had two live chains")
			if proto.proto == kafkasource.ProtocolConsumer {
				assert.Zero(t, rollingStays, "rolling restart: no partition stopped that stayed")
				assert.Zero(t, stays, "join: no partition stopped that stayed")
			}
		})
	}
}
