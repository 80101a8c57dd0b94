package kafkafault_test

import (
	"context"
	"encoding/binary"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactlyonce/exactlyonce/internal/embedded/kafkafault"
)

// joinAndDie sends a first JoinGroup for group on a fresh connection and
// closes it at once, as a consumer killed while it waits for the rebalance:
// the broker reads the request, parks it until the rebalance completes, and
// then has a dead connection to answer.
func joinAndDie(t *testing.T, addr, group string, session time.Duration) {
	t.Helper()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	req := kmsg.NewJoinGroupRequest()
	req.Version = 1
	req.Group = group
	req.SessionTimeoutMillis = int32(session / time.Millisecond)
	req.RebalanceTimeoutMillis = int32(session / time.Millisecond)
	req.ProtocolType = "consumer"
	for _, name := range []string{"range", "roundrobin"} {
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = name, meta.AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
	}
	frame := []byte{0, 0, 0, 0}
	frame = binary.BigEndian.AppendUint16(frame, uint16(kmsg.JoinGroup))
	frame = binary.BigEndian.AppendUint16(frame, 1)
	frame = binary.BigEndian.AppendUint32(frame, 1) // correlation id
	frame = binary.BigEndian.AppendUint16(frame, 4)
	frame = append(frame, "dies"...)
	frame = req.AppendTo(frame)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-4))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = c.Write(frame)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// consumer is a kafka-go group member that keeps its current assignment.
type consumer struct {
	mu       sync.Mutex
	assigned []int
	gens     int
}

func (c *consumer) run(ctx context.Context, cg *kafka.ConsumerGroup) {
	for ctx.Err() == nil {
		gen, err := cg.Next(ctx)
		if err != nil {
			continue
		}
		var ps []int
		for _, a := range gen.Assignments[topic] {
			ps = append(ps, a.ID)
		}
		c.mu.Lock()
		c.assigned, c.gens = ps, c.gens+1
		c.mu.Unlock()
		gen.Start(func(ctx context.Context) { <-ctx.Done() })
	}
}

func (c *consumer) partitions() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.assigned)
}

func groupMembers(t *testing.T, addr, group string) (string, int) {
	cl := &kafka.Client{Addr: kafka.TCP(addr)}
	resp, err := cl.DescribeGroups(t.Context(), &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil || len(resp.Groups) != 1 {
		return "", -1
	}
	return resp.Groups[0].GroupState, len(resp.Groups[0].Members)
}

// TestExpireMembers: a consumer killed while its JoinGroup waits for the
// rebalance. kfake alone keeps it in the group for good (about one time in
// two, see expire.go), holding half the partitions, so the live consumer
// never gets them back; with ExpireMembers it is expired after its session
// timeout, as Kafka does, and the live consumer, which heartbeats, is never
// touched and ends with every partition. KAFKAFAULT_NO_EXPIRE=1 runs the
// same rounds without ExpireMembers, to see kfake's own behaviour (the test
// then fails).
func TestExpireMembers(t *testing.T) {
	const partitions, session, rounds = 4, 500 * time.Millisecond, 4
	inj := kafkafault.New()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ListenFn(inj.Listen), kfake.SeedTopics(partitions, topic),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer c.Close()
	inj.Attach(c)
	addr := c.ListenAddrs()[0]
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if os.Getenv("KAFKAFAULT_NO_EXPIRE") == "" {
		wg.Go(func() {
			_ = inj.ExpireMembers(ctx, []string{addr}, kafkafault.ExpireOptions{Interval: 100 * time.Millisecond})
		})
	}

	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: "g", Brokers: []string{addr}, Topics: []string{topic},
		SessionTimeout: session, RebalanceTimeout: session, HeartbeatInterval: 100 * time.Millisecond,
		JoinGroupBackoff: 100 * time.Millisecond, Timeout: 5 * time.Second})
	require.NoError(t, err)
	defer cg.Close()
	live := &consumer{}
	wg.Go(func() { live.run(ctx, cg) })
	require.Eventually(t, func() bool { return live.partitions() == partitions }, 20*time.Second, 20*time.Millisecond)

	for round := range rounds {
		joinAndDie(t, addr, "g", session)
		// The rebalance completes with both members; then the dead one
		// must go after its session timeout. The bound is generous: on a
		// loaded machine (CI beside a chaos run) the live member's own
		// heartbeats can be late too, and the group rebalances again first.
		require.Eventually(t, func() bool {
			state, n := groupMembers(t, addr, "g")
			return state == "Stable" && n == 1 && live.partitions() == partitions
		}, 60*session, 50*time.Millisecond, "round %d: the member killed while joining is still in the group", round)
	}
	t.Logf("%d of %d dead joiners needed ExpireMembers; the live consumer went through %d generations", inj.Expired(), rounds, live.gens)
	state, n := groupMembers(t, addr, "g")
	assert.Equal(t, "Stable", state)
	assert.Equal(t, 1, n, "the live consumer was never expired")
}
