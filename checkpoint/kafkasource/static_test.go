package kafkasource_test

import (
	"context"
	"encoding/binary"
	"net"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// owned returns the partitions whose chain an instance runs now.
func (c *chainCounts) owned() map[int]bool {
	built, stopped := c.get()
	out := map[int]bool{}
	for p, n := range built {
		if n > stopped[p] {
			out[p] = true
		}
	}
	return out
}

// TestStaticMemberRestart: two static members (Group.InstanceID) share a
// topic; one stops (Run's context ends: it leaves with epoch -2) and a new
// process with the same InstanceID starts within the session timeout. The
// new process gets exactly the partitions of the old one back, each
// restored once, and the other member's chains never stop, nor does it
// build one: no partition that stays moves. (A dynamic member's stop hands
// its partitions to the other member, which these checks would catch.)
// Every record is counted once across the restart.
func TestStaticMemberRestart(t *testing.T) {
	const (
		partitions = 6
		n          = 100
	)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "static"), testkit.Name(t, "static")
	testkit.CreateTopic(t, brokers, topic, partitions)
	dir := filepath.Join(t.TempDir(), "shared")
	live := &liveChains{}
	g := kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, Protocol: kafkasource.ProtocolConsumer}
	ga, gb := g, g
	ga.InstanceID, gb.InstanceID = "a", "b"
	a, ca := startGroup(t, ga, dir, live)
	b, cb := startGroup(t, gb, dir, live)
	produce(t, brokers, topic, partitions, 0, n)
	waitAll(t, a, topic, partitions, n, 2)
	mine := ca.owned()
	require.NotEmpty(t, mine, "a owns partitions")
	require.Len(t, cb.owned(), partitions-len(mine), "b owns the others")
	bBuilt, bStopped := cb.get()

	require.NoError(t, a.stop(t))
	// The coordinator's answer to the leave settles before a's successor
	// joins (a dynamic member's partitions would be with b by then: the
	// coordinator computes a target assignment at most once a
	// group.consumer.assignment.interval.ms, and a quick join would hide
	// a leave that moved them).
	waitSettled(t, brokers, group)
	a2, ca2 := startGroup(t, ga, dir, live)
	produce(t, brokers, topic, partitions, n, 50)
	waitAll(t, a2, topic, partitions, n+50, 2)
	for _, cp := range latest(t, a2.store, topic, partitions) {
		requireConsistent(t, cp)
	}
	built2, stopped2 := ca2.get()
	for p := range partitions {
		if mine[p] {
			assert.Equal(t, 1, built2[p], "partition %d came back to the restarted instance, restored once", p)
		} else {
			assert.Zero(t, built2[p], "partition %d stayed with b", p)
		}
	}
	assert.Empty(t, stopped2, "the restarted instance stopped nothing")
	bBuilt2, bStopped2 := cb.get()
	assert.Equal(t, bBuilt, bBuilt2, "b built no chain: none of a's partitions moved to it")
	assert.Equal(t, bStopped, bStopped2, "b stopped no chain")
	require.NoError(t, a2.stop(t))
	require.NoError(t, b.stop(t))
	assert.Empty(t, live.overlap, "no partition had two live chains")
}

// waitSettled waits until the group's target assignment is computed for
// its epoch and every active member owns its target (a static member that
// left, epoch -2, owns nothing and is not waited for).
func waitSettled(t *testing.T, brokers []string, group string) {
	t.Helper()
	gc := &kafkawire.GroupConn{Dialer: kafka.DefaultDialer, Brokers: brokers, GroupID: group}
	defer gc.Close()
	var d kafkawire.GroupDescription
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if d, err = gc.Describe(ctx); err != nil || d.ErrorCode != 0 || d.AssignmentEpoch != d.GroupEpoch {
			return false
		}
		for _, m := range d.Members {
			if m.MemberEpoch > 0 && (m.MemberEpoch != d.AssignmentEpoch || m.Assigned != m.Target) {
				return false
			}
		}
		return true
	}, 2*time.Minute, 100*time.Millisecond, "group %s settled", group)
	t.Logf("group settled: %+v", d)
}

// newStatic returns a ProtocolConsumer Source, not running, with
// InstanceID id, on a store in dir.
func newStatic(t *testing.T, brokers []string, group, topic, id, dir string) *kafkasource.Source {
	t.Helper()
	store, err := checkpoint.NewStore(must(checkpoint.NewFSStorage(dir)), checkpoint.StoreOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	opts := fastGroup
	opts.Logger = testLogger(t)
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic},
		InstanceID: id, Protocol: kafkasource.ProtocolConsumer}, coord, (&counters{}).newProcessor, opts)
	require.NoError(t, err)
	return src
}

// TestStaticMemberUnreleased: a second Source with the InstanceID of a
// running one is refused: its Run returns ErrUnreleasedInstanceID once it
// retried the join for its bound, and the running member goes on
// untouched.
func TestStaticMemberUnreleased(t *testing.T) {
	const (
		partitions = 2
		n          = 50
	)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "unreleased"), testkit.Name(t, "unreleased")
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	dir := filepath.Join(t.TempDir(), "shared")
	live := &liveChains{}
	a, ca := startGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, InstanceID: "x",
		Protocol: kafkasource.ProtocolConsumer}, dir, live)
	waitAll(t, a, topic, partitions, n, 1)

	dup := newStatic(t, brokers, group, topic, "x", dir)
	dup.SetInstanceWait(3 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := dup.Run(ctx)
	require.ErrorIs(t, err, kafkasource.ErrUnreleasedInstanceID)
	require.NoError(t, ctx.Err(), "Run returned before its context ended")
	t.Logf("%v", err)

	produce(t, brokers, topic, partitions, n, 10)
	waitAll(t, a, topic, partitions, n+10, 1)
	_, stopped := ca.get()
	assert.Empty(t, stopped, "the running member stopped no chain")
	require.NoError(t, a.stop(t))
}

// TestStaticMemberFenced: another member takes over a running Source's
// InstanceID (here a static leave in its name, then a join with the id, as
// an instance started by mistake after an administrator removed the
// member would): the Source's next heartbeat is refused with
// FENCED_INSTANCE_ID, and Run stops every chain and returns
// ErrFencedInstanceID.
func TestStaticMemberFenced(t *testing.T) {
	const (
		partitions = 2
		n          = 50
	)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "fencedid"), testkit.Name(t, "fencedid")
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	live := &liveChains{}
	a, ca := startGroup(t, kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, InstanceID: "x",
		Protocol: kafkasource.ProtocolConsumer}, t.TempDir(), live)
	var id string
	for m := range waitAll(t, a, topic, partitions, n, 1) {
		id = m
	}

	gc := &kafkawire.GroupConn{Dialer: kafka.DefaultDialer, Brokers: brokers, GroupID: group}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	instance := "x"
	res, err := gc.Heartbeat(ctx, &kafkawire.Heartbeat{GroupID: group, MemberID: id, MemberEpoch: kafkawire.EpochStaticLeave,
		InstanceID: &instance})
	require.NoError(t, err)
	require.Zero(t, res.ErrorCode, "static leave in a's name: %s", res.ErrorMessage)
	res, err = gc.Heartbeat(ctx, &kafkawire.Heartbeat{GroupID: group, MemberID: "intruder", MemberEpoch: kafkawire.EpochJoin,
		InstanceID: &instance, RebalanceTimeout: time.Second, SubscribedTopics: []string{topic},
		Owned: []kafkawire.TopicPartitions{}, OwnedSet: true})
	require.NoError(t, err)
	require.Zero(t, res.ErrorCode, "the intruder joined with a's instance id: %s", res.ErrorMessage)
	defer func() {
		_, _ = gc.Heartbeat(context.Background(), &kafkawire.Heartbeat{GroupID: group, MemberID: "intruder",
			MemberEpoch: kafkawire.EpochLeave, InstanceID: &instance})
	}()

	select {
	case err := <-a.done:
		close(a.done)
		require.ErrorIs(t, err, kafkasource.ErrFencedInstanceID)
		t.Logf("%v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("Run went on after another member took its instance id")
	}
	built, stopped := ca.get()
	assert.Equal(t, built, stopped, "every chain stopped")
}

// TestTopicRegex: a Source subscribed with Group.TopicRegex reads the
// matching topics, and a topic created after it joined once the
// coordinator matches it, every record exactly once (each checkpoint's
// counter agrees with its offset); a topic the regex does not match gets
// no chain.
func TestTopicRegex(t *testing.T) {
	const (
		partitions = 2
		n          = 60
	)
	brokers := consumerProtocolKafka(t)
	prefix := testkit.Name(t, "rx")
	first, later, other := prefix+"-first", prefix+"-later", testkit.Name(t, "other")
	testkit.CreateTopic(t, brokers, first, partitions)
	testkit.CreateTopic(t, brokers, other, 1)
	produce(t, brokers, first, partitions, 0, n)
	produce(t, brokers, other, 1, 0, n)

	store, err := checkpoint.NewStore(must(checkpoint.NewFSStorage(t.TempDir())), checkpoint.StoreOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		built = map[checkpoint.TopicPartition]int{}
	)
	cs := &counters{}
	newProc := func(ctx context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
		mu.Lock()
		built[p]++
		mu.Unlock()
		return cs.newProcessor(ctx, p)
	}
	opts := fastGroup
	opts.Logger = testLogger(t)
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: prefix, TopicRegex: regexp.QuoteMeta(prefix) + "-.*",
		Protocol: kafkasource.ProtocolConsumer}, coord, newProc, opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	waitTopic := func(topic string, want int64) {
		t.Helper()
		require.Eventually(t, func() bool {
			for _, cp := range latest(t, store, topic, partitions) {
				if cp == nil || cp.NextOffset != want {
					return false
				}
			}
			return true
		}, 3*time.Minute, 100*time.Millisecond, "%s checkpointed at %d", topic, want)
		for _, cp := range latest(t, store, topic, partitions) {
			requireConsistent(t, cp)
		}
	}
	waitTopic(first, n)

	testkit.CreateTopic(t, brokers, later, partitions)
	produce(t, brokers, later, partitions, 0, n)
	waitTopic(later, n)
	produce(t, brokers, first, partitions, n, 10)
	waitTopic(first, n+10)

	mu.Lock()
	defer mu.Unlock()
	for _, topic := range []string{first, later} {
		for p := range partitions {
			assert.Equal(t, 1, built[checkpoint.TopicPartition{Topic: topic, Partition: p}], "%s/%d built once", topic, p)
		}
	}
	assert.Zero(t, built[checkpoint.TopicPartition{Topic: other, Partition: 0}], "no chain of a topic the regex does not match")
	assert.Len(t, built, 2*partitions)
}

// heartbeatCut is a dialer whose connections drop ConsumerGroupHeartbeat
// requests while cut (the connection is closed instead), and pass every
// other request: a member whose heartbeats go unanswered while its
// partitions' fetches go on.
type heartbeatCut struct {
	cut atomic.Bool
}

func (h *heartbeatCut) dialer() *kafka.Dialer {
	return &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &heartbeatCutConn{Conn: c, cut: &h.cut}, nil
	}}
}

type heartbeatCutConn struct {
	net.Conn
	cut *atomic.Bool
}

func (c *heartbeatCutConn) Write(b []byte) (int, error) {
	// A request is written whole: size, then its API key.
	if c.cut.Load() && len(b) >= 6 && binary.BigEndian.Uint16(b[4:6]) == 68 {
		_ = c.Conn.Close()
		// What a cut connection gives a writer: a net error, which the
		// member retries (an error it cannot classify ends Run).
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	}
	return c.Conn.Write(b)
}

// TestStaticMemberRejoinAfterSilence: a static member whose heartbeats go
// unanswered for longer than Options.SessionTimeout stops every chain, and
// joins again once they are answered, while the coordinator (whose session
// timeout, 45 s, is longer) still holds its instance id. It leaves in its
// own name (epoch -2) and joins at once, with its partitions, instead of
// being refused with UNRELEASED_INSTANCE_ID until the coordinator's
// session expires: Run's bound for that refusal is set far below it here,
// so a member that only waited would fail. Every record is counted once.
func TestStaticMemberRejoinAfterSilence(t *testing.T) {
	const (
		partitions = 2
		n          = 50
	)
	brokers := consumerProtocolKafka(t)
	topic, group := testkit.Name(t, "silence"), testkit.Name(t, "silence")
	// Kafka's default session timeout for this group, not the kit's 6 s,
	// which is no longer than Options.SessionTimeout.
	testkit.SetGroupConfigs(t, brokers, group, map[string]string{"consumer.session.timeout.ms": "45000"})
	testkit.CreateTopic(t, brokers, topic, partitions)
	produce(t, brokers, topic, partitions, 0, n)
	store, err := checkpoint.NewStore(must(checkpoint.NewFSStorage(t.TempDir())), checkpoint.StoreOptions{Logger: testLogger(t)})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: 100 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	hc := &heartbeatCut{}
	cc := &chainCounts{live: &liveChains{}}
	opts := fastGroup
	opts.Logger, opts.Dialer = testLogger(t), hc.dialer()
	src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: group, Topics: []string{topic}, InstanceID: "x",
		Protocol: kafkasource.ProtocolConsumer}, coord, cc.wrap((&counters{}).newProcessor), opts)
	require.NoError(t, err)
	src.SetInstanceWait(5 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer cancel()
	in := &instance{store: store}
	waitAll(t, in, topic, partitions, n, 1)

	hc.cut.Store(true)
	require.Eventually(t, func() bool {
		_, stopped := cc.get()
		return sum(stopped) == partitions
	}, 2*time.Minute, 100*time.Millisecond, "every chain stopped once no heartbeat was answered")
	hc.cut.Store(false)
	produce(t, brokers, topic, partitions, n, 10)
	waitAll(t, in, topic, partitions, n+10, 1)
	for _, cp := range latest(t, store, topic, partitions) {
		requireConsistent(t, cp)
	}
	built, stopped := cc.get()
	for p := range partitions {
		assert.Equal(t, 2, built[p], "partition %d built again once, after the rejoin", p)
		assert.Equal(t, 1, stopped[p], "partition %d", p)
	}
	cancel()
	require.NoError(t, <-done)
}
