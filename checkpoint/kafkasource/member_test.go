package kafkasource_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// chainCounts counts, per partition, the chains an instance built (each
// restores the partition's checkpoint) and the chains it stopped.
type chainCounts struct {
	mu             sync.Mutex
	built, stopped map[int]int
	live           *liveChains
}

// liveChains counts the chains of each partition alive across instances,
// and remembers if two were ever alive at once. It tells a partition that
// stayed (its next chain is built by the instance that stopped its last
// one) from one that moved.
type liveChains struct {
	mu        sync.Mutex
	n         map[int]int
	overlap   []int
	stopped   map[int]time.Time
	stoppedBy map[int]*chainCounts
	maxPause  time.Duration // the longest time a partition had no chain, between a stop and the next build
	stays     int           // chains stopped and built again by the same instance
	maxStay   time.Duration // the longest pause of a partition that stayed
}

func (l *liveChains) add(p, d int, by *chainCounts) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n, l.stopped, l.stoppedBy = map[int]int{}, map[int]time.Time{}, map[int]*chainCounts{}
	}
	if l.n[p] += d; l.n[p] > 1 {
		l.overlap = append(l.overlap, p)
	}
	if d < 0 {
		l.stopped[p], l.stoppedBy[p] = time.Now(), by
	} else if at, ok := l.stopped[p]; ok {
		pause := time.Since(at)
		l.maxPause = max(l.maxPause, pause)
		if l.stoppedBy[p] == by {
			l.stays++
			l.maxStay = max(l.maxStay, pause)
		}
		delete(l.stopped, p)
		delete(l.stoppedBy, p)
	}
}

// reset forgets the pauses and stays measured so far.
func (l *liveChains) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.maxPause, l.stays, l.maxStay = 0, 0, 0
}

// stayed returns how many chains were stopped and built again on the same
// instance, and the longest pause among them.
func (l *liveChains) stayed() (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stays, l.maxStay
}

func (l *liveChains) longestPause() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxPause
}

func (c *chainCounts) wrap(np kafkasource.ProcessorFunc) kafkasource.ProcessorFunc {
	c.built, c.stopped = map[int]int{}, map[int]int{}
	return func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		proc, err := np(ctx, p)
		if err != nil {
			return proc, err
		}
		c.mu.Lock()
		c.built[p.Partition]++
		c.mu.Unlock()
		c.live.add(p.Partition, 1, c)
		proc.Close = func() error {
			c.live.add(p.Partition, -1, c)
			c.mu.Lock()
			c.stopped[p.Partition]++
			c.mu.Unlock()
			return nil
		}
		return proc, nil
	}
}

func (c *chainCounts) get() (built, stopped map[int]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	built, stopped = map[int]int{}, map[int]int{}
	for k, v := range c.built {
		built[k] = v
	}
	for k, v := range c.stopped {
		stopped[k] = v
	}
	return built, stopped
}

func startMember(t *testing.T, brokers []string, group, topic, dir string, proto kafkasource.GroupProtocol,
	live *liveChains) (*instance, *chainCounts) {
	t.Helper()
	return startGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, Protocol: proto}, dir, live)
}

// startGroup is startMember for any Group.
func startGroup(t *testing.T, g kafkasource.Group, dir string, live *liveChains) (*instance, *chainCounts) {
	t.Helper()
	storage, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	in := &instance{store: store, coord: coord, cs: &counters{}, done: make(chan error, 1)}
	cc := &chainCounts{live: live}
	opts := fastGroup
	opts.Logger = testLogger(t)
	in.src, err = kafkasource.New(g, coord, cc.wrap(in.cs.newProcessor), opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- in.src.Run(ctx) }()
	t.Cleanup(func() { in.stop(t) })
	return in, cc
}

// waitAll waits until every partition's newest checkpoint is at want and
// the checkpoints were written by members instances.
func waitAll(t *testing.T, in *instance, topic string, partitions int, want int64, members int) map[string][]int {
	t.Helper()
	var by map[string][]int
	require.Eventually(t, func() bool {
		by = map[string][]int{}
		for p, cp := range latest(t, in.store, topic, partitions) {
			if cp == nil || cp.NextOffset != want {
				return false
			}
			by[cp.Member] = append(by[cp.Member], p)
		}
		return len(by) == members
	}, 3*time.Minute, 100*time.Millisecond, "every partition checkpointed at %d by %d members", want, members)
	return by
}

// TestSecondInstanceJoins: one instance owns all partitions of a topic, a
// second joins. Under ProtocolConsumer the partitions that stay with the
// first are never stopped and the ones that move are built once on the
// second (one restore each); under ProtocolClassic every chain of the
// first stops. Either way every record is counted exactly once across the
// handover (each checkpoint's counter agrees with its offset).
func TestSecondInstanceJoins(t *testing.T) {
	const (
		partitions = 8
		n          = 200
	)
	brokers := consumerProtocolKafka(t)
	for _, proto := range []struct {
		name  string
		proto kafkasource.GroupProtocol
	}{{"consumer", kafkasource.ProtocolConsumer}, {"classic", kafkasource.ProtocolClassic}} {
		t.Run(proto.name, func(t *testing.T) {
			topic, group := testkit.Name(t, "join"), testkit.Name(t, "join")
			testkit.CreateTopic(t, brokers, topic, partitions)
			produce(t, brokers, topic, partitions, 0, n)
			dir := filepath.Join(t.TempDir(), "shared")
			live := &liveChains{}
			a, ca := startMember(t, brokers, group, topic, dir, proto.proto, live)
			waitAll(t, a, topic, partitions, n, 1)
			built, stopped := ca.get()
			require.Len(t, built, partitions)
			require.Empty(t, stopped)

			b, cb := startMember(t, brokers, group, topic, dir, proto.proto, live)
			produce(t, brokers, topic, partitions, n, 100)
			owners := waitAll(t, a, topic, partitions, n+100, 2)
			for _, cp := range latest(t, a.store, topic, partitions) {
				requireConsistent(t, cp)
			}
			aBuilt, aStopped := ca.get()
			bBuilt, bStopped := cb.get()
			moved := len(bBuilt)
			t.Logf("%s: %d partitions; a stopped %d chains and built %d, b built %d; longest pause of a partition %v; owners %v",
				proto.name, partitions, sum(aStopped), sum(aBuilt), sum(bBuilt), live.longestPause().Round(10*time.Millisecond), owners)
			require.NotZero(t, moved, "b got partitions")
			assert.Empty(t, bStopped, "b stopped nothing")
			if proto.proto != kafkasource.ProtocolConsumer {
				assert.Equal(t, partitions, len(aStopped), "classic: every chain of a stops")
				assert.Empty(t, live.overlap, "no partition had two live chains")
				return
			}
			for p := range partitions {
				if bBuilt[p] > 0 {
					assert.Equal(t, 1, bBuilt[p], "partition %d restored once on b", p)
					assert.Equal(t, 1, aStopped[p], "partition %d stopped once on a", p)
				} else {
					assert.Zero(t, aStopped[p], "partition %d stayed on a and was not stopped", p)
				}
				assert.Equal(t, 1, aBuilt[p], "partition %d built once on a", p)
			}
			// The offsets are committed with the member epoch (OffsetCommit
			// v9): a commit at a wrong epoch is refused.
			require.Eventually(t, func() bool {
				for _, off := range committed(t, brokers, group, topic, partitions) {
					if off != n+100 {
						return false
					}
				}
				return true
			}, time.Minute, 100*time.Millisecond, "offsets committed")

			// b leaves (epoch -1): its partitions come back to a, which
			// builds each once more, and a's own chains go on untouched.
			stopAt := time.Now()
			require.NoError(t, b.stop(t))
			produce(t, brokers, topic, partitions, n+100, 50)
			waitAll(t, a, topic, partitions, n+150, 1)
			t.Logf("a owned every partition again %v after b stopped", time.Since(stopAt).Round(100*time.Millisecond))
			for _, cp := range latest(t, a.store, topic, partitions) {
				requireConsistent(t, cp)
			}
			aBuilt2, aStopped2 := ca.get()
			for p := range partitions {
				assert.Equal(t, aBuilt[p]+bBuilt[p], aBuilt2[p], "partition %d", p)
				assert.Equal(t, aStopped[p], aStopped2[p], "partition %d", p)
			}
			require.NoError(t, a.stop(t))
			assert.Empty(t, live.overlap, "no partition had two live chains")
		})
	}
}

// consumerProtocolKafka is testkit.Kafka for a test of ProtocolConsumer:
// it skips on Apache Kafka 3.9, which does not offer the consumer group
// protocol by default. Apache Kafka 4 and kfake (ConsumerGroupHeartbeat)
// offer it.
func consumerProtocolKafka(t *testing.T) []string {
	t.Helper()
	if impl := testkit.KafkaImplementation(t); impl == testkit.KafkaApache39 {
		t.Skipf("the consumer group protocol needs Apache Kafka 4 (%s=%s)", testkit.EnvKafka, impl)
	}
	return testkit.Kafka(t)
}

func sum(m map[int]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

// TestConsumerProtocolRejoinAfterFence: the coordinator removes a member
// (here a heartbeat of epoch -1 in its name, as an administrator or an
// expired session would): its next heartbeat is refused with
// UNKNOWN_MEMBER_ID, so it stops every chain, joins again with epoch 0
// and restores each partition once, and no record is lost or counted
// twice.
func TestConsumerProtocolRejoinAfterFence(t *testing.T) {
	const (
		partitions = 4
		n          = 100
	)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "fence"), testkit.Name(t, "fence")
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	live := &liveChains{}
	a, ca := startMember(t, brokers, group, topic, t.TempDir(), kafkasource.ProtocolConsumer, live)
	owners := waitAll(t, a, topic, partitions, n, 1)
	var id string
	for m := range owners {
		id = m
	}

	gc := &kafkawire.GroupConn{Dialer: kafka.DefaultDialer, Brokers: brokers, GroupID: group}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := gc.Heartbeat(ctx, &kafkawire.Heartbeat{GroupID: group, MemberID: id, MemberEpoch: kafkawire.EpochLeave})
	require.NoError(t, err)
	require.Zero(t, res.ErrorCode, "the coordinator removed the member: %s", res.ErrorMessage)

	require.Eventually(t, func() bool {
		built, _ := ca.get()
		return sum(built) == 2*partitions
	}, 2*time.Minute, 100*time.Millisecond, "every partition built again after the rejoin")
	produce(t, brokers, topic, partitions, n, 50)
	waitAll(t, a, topic, partitions, n+50, 1)
	for _, cp := range latest(t, a.store, topic, partitions) {
		requireConsistent(t, cp)
		assert.Equal(t, id, cp.Member, "the member keeps its id across the rejoin")
	}
	built, stopped := ca.get()
	for p := range partitions {
		assert.Equal(t, 2, built[p], "partition %d", p)
		assert.Equal(t, 1, stopped[p], "partition %d", p)
	}
	require.NoError(t, a.stop(t))
	assert.Empty(t, live.overlap)
}

// TestConsumerProtocolTxnOffsetCommit: under ProtocolConsumer the group
// coordinator takes offsets in a transaction (TxnOffsetCommit) only with
// the member's id and current epoch, which MembershipOf gives a chain.
func TestConsumerProtocolTxnOffsetCommit(t *testing.T) {
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "txo"), testkit.Name(t, "txo")
	testkit.CreateTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 1, 0, 10)
	got := make(chan kafkasource.Membership, 1)
	newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		return &kafkasource.Processor{Process: func(ctx context.Context, m kafka.Message) error {
			if mb, ok := kafkasource.MembershipOf(ctx); ok {
				select {
				case got <- mb:
				default:
				}
			}
			return nil
		}}, nil
	}
	store, err := checkpoint.NewStore(must(checkpoint.NewFSStorage(t.TempDir())), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{})
	require.NoError(t, err)
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic},
		Protocol: kafkasource.ProtocolConsumer}, coord, newProc, fastGroup)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	var mb kafkasource.Membership
	select {
	case mb = <-got:
	case <-time.After(2 * time.Minute):
		t.Fatal("no record processed")
	}
	require.Equal(t, group, mb.Group)
	require.Positive(t, mb.Generation, "a member epoch")

	offsets := map[string]map[int]int64{topic: {0: 7}}
	send := func(name string, generation int, member string) error {
		p, err := kafkatxn.NewTxProducer(ctx, brokers, group+name, kafkatxn.TxOptions{})
		require.NoError(t, err)
		defer p.Close()
		if err := p.SendOffsets(ctx, group, generation, member, offsets); err != nil {
			_ = p.Abort(ctx)
			return err
		}
		return p.Abort(ctx) // nothing committed: only the check matters here
	}
	// Kafka 4.4 takes offsets without membership (-1, "") in a transaction
	// even while the group has members; logged, not required.
	t.Logf("TxnOffsetCommit without membership: %v", send("-none", -1, ""))
	err = send("-fenced", mb.Generation+1, mb.Member)
	require.Error(t, err, "an epoch ahead of the member's is fenced")
	t.Logf("TxnOffsetCommit with epoch %d ahead: %v", mb.Generation+1, err)
	require.Error(t, send("-unknown", mb.Generation, "someone-else"), "an unknown member is refused")

	p, err := kafkatxn.NewTxProducer(ctx, brokers, group+"-tx", kafkatxn.TxOptions{})
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.SendOffsets(ctx, group, mb.Generation, mb.Member, offsets))
	require.NoError(t, p.Commit(ctx))
	assert.Eventually(t, func() bool {
		return committed(t, brokers, group, topic, 1)[0] == 7
	}, time.Minute, 20*time.Millisecond)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestConsumerProtocolRefused: a broker that does not offer the consumer
// group protocol makes Run return ErrNoConsumerProtocol, at once. There a
// ProtocolAuto Source runs as a classic member, unless it has an
// InstanceID, which only the consumer protocol carries: then it fails the
// same way.
func TestConsumerProtocolRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts its own broker")
	}
	kb := testkit.StartApacheKafka(t, testkit.ApacheKafkaOptions{
		Configs: map[string]string{"group.coordinator.rebalance.protocols": "classic"}})
	brokers := kb.Brokers()
	topic := testkit.Name(t, "refused")
	testkit.CreateTopic(t, brokers, topic, 1)
	store, err := checkpoint.NewStore(must(checkpoint.NewFSStorage(t.TempDir())), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{})
	require.NoError(t, err)
	cs := &counters{}
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: topic, Topics: []string{topic},
		Protocol: kafkasource.ProtocolConsumer}, coord, cs.newProcessor, fastGroup)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = src.Run(ctx)
	require.ErrorIs(t, err, kafkasource.ErrNoConsumerProtocol)
	require.NoError(t, ctx.Err(), "Run returned before its context ended")
	t.Logf("%v", err)

	static, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: topic, Topics: []string{topic},
		Protocol: kafkasource.ProtocolAuto, InstanceID: "static-0"}, coord, cs.newProcessor, fastGroup)
	require.NoError(t, err)
	require.ErrorIs(t, static.Run(ctx), kafkasource.ErrNoConsumerProtocol, "ProtocolAuto with an InstanceID")
	require.NoError(t, ctx.Err(), "Run returned before its context ended")

	const n = 20
	produce(t, brokers, topic, 1, 0, n)
	auto, _ := startGroup(t, kafkasource.Group{Brokers: brokers, ID: topic, Topics: []string{topic},
		Protocol: kafkasource.ProtocolAuto}, filepath.Join(t.TempDir(), "auto"), &liveChains{})
	waitAll(t, auto, topic, 1, n, 1)
	require.NoError(t, auto.stop(t))
}

// TestProtocolSwitch moves a group between the protocols online, as a
// rolling upgrade of the processor does, while records flow: two classic
// members are replaced one by one by consumer-protocol members (Kafka
// converts the group when the first joins; the classic member left runs on
// in the converted group), then one by one by classic members again (Kafka
// converts it back when the last consumer-protocol member leaves). After
// every replacement every partition is checkpointed by the two members at
// the records produced so far, each checkpoint's counter agrees with its
// offset (every record counted once), and at the end the group's committed
// offsets are at the end; no partition ever had two live chains.
//
// Before kafkawire.ClassicGroupDialer, Kafka 4.4 refused both moves while
// kafka-go's classic members were in the group, because kafka-go's
// JoinGroup carried a ConsumerProtocolSubscription that said version 1 but
// ended before the version's OwnedPartitions, which the coordinator parses
// to convert the group: the upgrade with GROUP_ID_NOT_FOUND, the downgrade
// with INCONSISTENT_GROUP_PROTOCOL.
func TestProtocolSwitch(t *testing.T) {
	const (
		partitions = 6
		step       = 50 // records per partition produced after each replacement
	)
	skipOnKfake(t)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "switch"), testkit.Name(t, "switch")
	testkit.CreateTopic(t, brokers, topic, partitions)
	dir := filepath.Join(t.TempDir(), "shared")
	live := &liveChains{}
	want := int64(0)
	more := func() {
		produce(t, brokers, topic, partitions, int(want), step)
		want += step
	}
	members := make([]*instance, 2)
	for i := range members {
		members[i], _ = startMember(t, brokers, group, topic, dir, kafkasource.ProtocolClassic, live)
	}
	more()
	waitAll(t, members[0], topic, partitions, want, len(members))
	for _, move := range []struct {
		name  string
		proto kafkasource.GroupProtocol
	}{{"upgrade", kafkasource.ProtocolConsumer}, {"downgrade", kafkasource.ProtocolClassic}} {
		for i := range members {
			require.NoError(t, members[i].stop(t), "%s: the member replaced", move.name)
			members[i], _ = startMember(t, brokers, group, topic, dir, move.proto, live)
			more()
			for j, m := range members {
				select {
				case err := <-m.done:
					close(m.done)
					t.Fatalf("%s: member %d ended: %v", move.name, j, err)
				default:
				}
			}
			waitAll(t, members[i], topic, partitions, want, len(members))
			for _, cp := range latest(t, members[i].store, topic, partitions) {
				requireConsistent(t, cp)
			}
			t.Logf("%s: member %d replaced; every partition at %d", move.name, i, want)
		}
	}
	waitCommitted(t, brokers, group, topic, partitions, want)
	for _, m := range members {
		require.NoError(t, m.stop(t))
	}
	assert.Empty(t, live.overlap, "no partition had two live chains")
}

// waitCommitted waits until the group's committed offset of every
// partition is want.
func waitCommitted(t *testing.T, brokers []string, group, topic string, partitions int, want int64) {
	t.Helper()
	if !assert.Eventually(t, func() bool {
		got := committed(t, brokers, group, topic, partitions)
		for p := range partitions {
			if got[p] != want {
				return false
			}
		}
		return true
	}, time.Minute, 100*time.Millisecond) {
		t.Fatalf("committed offsets: want %d on every partition, got %v", want, committed(t, brokers, group, topic, partitions))
	}
}
