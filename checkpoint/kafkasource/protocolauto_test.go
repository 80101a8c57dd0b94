package kafkasource_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestProtocolAuto: a ProtocolAuto Source joins under the consumer
// protocol where the coordinator takes it and under the classic one where
// it does not, and a rolling restart then moves the group on, online:
//   - beside a member of an earlier release (kafka-go's ConsumerGroup as
//     it is, whose subscription Kafka cannot parse) the coordinator refuses
//     a consumer-protocol join (GROUP_ID_NOT_FOUND: it cannot convert the
//     group), so the Source joins as a classic member and shares the
//     partitions with it;
//   - once that member is gone, a second ProtocolAuto Source joins under
//     the consumer protocol: the coordinator converts the group, the first
//     Source runs on in it as a classic member, and every record is counted
//     once.
//
// On Apache Kafka 3.9, which lacks the consumer protocol, the Source runs
// as a classic member.
func TestProtocolAuto(t *testing.T) {
	const (
		partitions = 4
		step       = 50
	)
	skipOnKfake(t)
	brokers := testkit.Kafka(t)
	impl := testkit.KafkaImplementation(t)
	topic, group := testkit.Name(t, "auto"), testkit.Name(t, "auto")
	testkit.CreateTopic(t, brokers, topic, partitions)
	dir := filepath.Join(t.TempDir(), "shared")
	live := &liveChains{}
	want := int64(0)
	more := func() {
		produce(t, brokers, topic, partitions, int(want), step)
		want += step
	}
	groupType := func() string {
		gc := &kafkawire.GroupConn{Dialer: kafka.DefaultDialer, Brokers: brokers, GroupID: group}
		defer gc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := gc.Describe(ctx)
		switch {
		case err != nil:
			return "not described: " + err.Error()
		case d.ErrorCode == 0:
			return "consumer"
		case kafka.Error(d.ErrorCode) == kafka.GroupIdNotFound:
			return "classic"
		default:
			return kafka.Error(d.ErrorCode).Error()
		}
	}

	if impl == testkit.KafkaApache39 {
		a, _ := startMember(t, brokers, group, topic, dir, kafkasource.ProtocolAuto, live)
		more()
		waitAll(t, a, topic, partitions, want, 1)
		require.NoError(t, a.stop(t))
		return
	}

	// A member of an earlier release, which holds what it is assigned.
	old, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{ID: group, Brokers: brokers, Topics: []string{topic},
		SessionTimeout: fastGroup.SessionTimeout, RebalanceTimeout: fastGroup.RebalanceTimeout,
		HeartbeatInterval: fastGroup.HeartbeatInterval, JoinGroupBackoff: fastGroup.HeartbeatInterval})
	require.NoError(t, err)
	oldDone := make(chan struct{})
	go func() {
		defer close(oldDone)
		for {
			_, err := old.Next(context.Background())
			if errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			if err != nil {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { _ = old.Close(); <-oldDone })
	require.Eventually(t, func() bool { return groupType() == "classic" }, time.Minute, 100*time.Millisecond,
		"the earlier release's member formed a classic group")

	a, ca := startMember(t, brokers, group, topic, dir, kafkasource.ProtocolAuto, live)
	// Sharing is seen in the chains running at one moment, not in those
	// ever built: beside another make test the earlier release's member
	// can miss its session once, the Source then builds every partition's
	// chain, and hands some back when that member joins again.
	require.Eventually(t, func() bool {
		n := len(ca.owned())
		return n > 0 && n < partitions
	}, 2*time.Minute, 100*time.Millisecond, "the Source shares the partitions as a classic member")
	assert.Equal(t, "classic", groupType())

	require.NoError(t, old.Close())
	<-oldDone
	more()
	waitAll(t, a, topic, partitions, want, 1)

	b, _ := startMember(t, brokers, group, topic, dir, kafkasource.ProtocolAuto, live)
	more()
	waitAll(t, a, topic, partitions, want, 2)
	assert.Equal(t, "consumer", groupType(), "the second Source converted the group")
	for _, cp := range latest(t, a.store, topic, partitions) {
		requireConsistent(t, cp)
	}
	require.NoError(t, b.stop(t))
	more()
	waitAll(t, a, topic, partitions, want, 1)
	require.NoError(t, a.stop(t))
	assert.Empty(t, live.overlap, "no partition had two live chains")
}

// skipOnKfake skips a test of a group moving between the protocols online:
// kfake keeps a group under the protocol it was created with.
func skipOnKfake(t *testing.T) {
	t.Helper()
	if impl := testkit.KafkaImplementation(t); impl == testkit.KafkaFake {
		t.Skipf("kfake does not convert a group between the protocols (%s=%s)", testkit.EnvKafka, impl)
	}
}
