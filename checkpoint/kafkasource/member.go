package kafkasource

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/internal/meter"
)

// member is the Source's membership of a group under ProtocolConsumer: a
// heartbeat loop at the interval the coordinator asks for, which
// reconciles the chains with the member's target assignment. A partition
// that leaves the target has its chain stopped (its last checkpoint
// settled: Task.Detach waits for it) and only then is left out of the
// partitions the member says it owns, which is what lets the coordinator
// give it to another member; a partition that arrives gets a chain that
// restores its checkpoint; a partition that stays is not touched.
type member struct {
	s     *Source
	hb    *kafkawire.GroupConn // heartbeats
	oc    *kafkawire.GroupConn // offset commits, so that a slow one never delays a heartbeat
	id    string
	epoch atomic.Int32
	// joined: the coordinator took the member once (a join of it is a
	// rejoin).
	joined bool
	// mayFallBack: under ProtocolAuto, a first join refused for want of
	// the consumer protocol ends runMember with errClassicGroup.
	mayFallBack bool

	interval time.Duration
	target   []kafkawire.TopicPartitions
	ids      map[string]kafkawire.UUID
	names    map[kafkawire.UUID]string
	owned    map[checkpoint.TopicPartition]*ownedChain
	refused  map[checkpoint.TopicPartition]bool // chains stopped by a superseded save, to restart
	stopped  chan struct{}                      // a chain ended: heartbeat now to say so
	fail     func(error)
	wg       sync.WaitGroup // chains
	checks   sync.WaitGroup // checkEpoch
}

// ownedChain is the running chain of an owned partition.
type ownedChain struct {
	cancel   context.CancelFunc
	done     chan struct{}
	revoking bool
	// superseded: the chain stopped on a save refused as superseded;
	// written before done is closed, read after.
	superseded bool
}

func newMemberID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// runMember is Run under ProtocolConsumer, and under ProtocolAuto (auto)
// until the coordinator refuses the first join: then it returns an error
// wrapping errClassicGroup.
func (s *Source) runMember(ctx context.Context, auto bool) error {
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		errOnce  sync.Once
		chainErr error
		cwg      sync.WaitGroup
	)
	conn := func() *kafkawire.GroupConn {
		return &kafkawire.GroupConn{Dialer: s.opts.Dialer, Brokers: s.group.Brokers, GroupID: s.group.ID}
	}
	m := &member{s: s, hb: conn(), oc: conn(), id: newMemberID(), interval: s.opts.HeartbeatInterval,
		owned: map[checkpoint.TopicPartition]*ownedChain{}, refused: map[checkpoint.TopicPartition]bool{},
		stopped: make(chan struct{}, 1),
		fail: func(err error) {
			errOnce.Do(func() { chainErr = err })
			cancel(err)
		}}
	m.mayFallBack = auto && s.group.InstanceID == "" && s.group.TopicRegex == ""
	defer m.hb.Close()
	defer m.oc.Close()
	cwg.Go(func() { _ = s.coord.Run(runCtx) })
	err := m.loop(runCtx)
	// Every chain stops (its last checkpoint settled) before the member
	// leaves: the coordinator hands the partitions on at once.
	m.releaseAll()
	m.leave(ctx)
	cancel(nil)
	cwg.Wait()
	m.checks.Wait()
	if chainErr != nil {
		return chainErr
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// request is the next heartbeat: always the whole state, which the
// coordinator accepts at any time (a null field would mean "unchanged").
func (m *member) request() *kafkawire.Heartbeat {
	owned := map[kafkawire.UUID][]int32{}
	for p := range m.owned {
		id := m.ids[p.Topic]
		owned[id] = append(owned[id], int32(p.Partition))
	}
	h := &kafkawire.Heartbeat{GroupID: m.s.group.ID, MemberID: m.id, MemberEpoch: m.epoch.Load(),
		InstanceID: m.instanceID(), RebalanceTimeout: m.s.opts.RebalanceTimeout,
		Owned: []kafkawire.TopicPartitions{}, OwnedSet: true}
	if m.s.group.TopicRegex != "" {
		h.SubscribedRegex = &m.s.group.TopicRegex
	} else {
		h.SubscribedTopics = m.s.group.Topics
	}
	for id, ps := range owned {
		h.Owned = append(h.Owned, kafkawire.TopicPartitions{TopicID: id, Partitions: ps})
	}
	return h
}

// loop heartbeats until ctx ends or the coordinator refuses the member for
// good.
func (m *member) loop(ctx context.Context) error {
	s := m.s
	lastOK := time.Now()
	var unreleasedSince time.Time // the first join refused with UNRELEASED_INSTANCE_ID, in a row
	// Heartbeats that reached no answer, in a row, as the classic loop
	// counts its failed joins: a broken connection or a moved coordinator
	// is retried (up to maxGroupFailures and minGroupOutage), anything
	// else (a certificate the Dialer does not trust, a failed SASL
	// login) fails Run at once, as it does under the classic protocol.
	var failures groupFailures
	for {
		if ctx.Err() != nil {
			return nil
		}
		res, err := m.hb.Heartbeat(ctx, m.request())
		s.log.Debug("kafkasource: heartbeat", "member", m.id, "epoch", res.MemberEpoch, "code", res.ErrorCode,
			"message", res.ErrorMessage, "assignment", res.HasAssignment, "err", err)
		if err == nil {
			failures = groupFailures{}
		}
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, kafkawire.ErrNoConsumerProtocol):
			if m.mayFallBack && !m.joined {
				return fmt.Errorf("%w: %w", errClassicGroup, err)
			}
			return fmt.Errorf("%w: group %q: %w", ErrNoConsumerProtocol, s.group.ID, err)
		case errors.Is(err, kafkawire.ErrNoTopicRegex):
			return fmt.Errorf("kafkasource: group %q: Group.TopicRegex: %w", s.group.ID, err)
		case err != nil:
			if !failures.retry(err) {
				return fmt.Errorf("kafkasource: consumer group %q: %w", s.group.ID, err)
			}
			s.log.Warn("kafkasource: consumer group heartbeat failed; retrying", "err", err, "failures", failures.n)
			wait = s.opts.HeartbeatInterval
		case res.ErrorCode == 0:
			lastOK, unreleasedSince = time.Now(), time.Time{}
			m.accept(ctx, res)
			wait = m.interval
		default:
			code := kafka.Error(res.ErrorCode)
			switch {
			case m.mayFallBack && !m.joined && (code == kafka.UnsupportedVersion || code == kafka.GroupIdNotFound):
				// GROUP_ID_NOT_FOUND to a first join: a classic group the
				// coordinator does not convert (its log says why).
				return fmt.Errorf("%w: group %q: the coordinator refused a consumer-protocol member: %w (code %d): %s",
					errClassicGroup, s.group.ID, code, res.ErrorCode, res.ErrorMessage)
			case code == kafkawire.UnreleasedInstanceID:
				if err := m.unreleased(ctx, res, &unreleasedSince); err != nil {
					return err
				}
				wait = s.opts.HeartbeatInterval
			case code == kafka.FencedInstanceID:
				return fmt.Errorf("%w: group %q, instance id %q: %s", ErrFencedInstanceID, s.group.ID,
					s.group.InstanceID, res.ErrorMessage)
			case code == kafkawire.InvalidRegularExpression:
				return fmt.Errorf("kafkasource: group %q: the broker refused Group.TopicRegex %q: %w (code %d): %s",
					s.group.ID, s.group.TopicRegex, code, res.ErrorCode, res.ErrorMessage)
			case code == kafkawire.FencedMemberEpoch || code == kafka.UnknownMemberId:
				s.log.Warn("kafkasource: fenced by the group coordinator: releasing every partition and joining again",
					"member", m.id, "epoch", m.epoch.Load(), "code", res.ErrorCode, "message", res.ErrorMessage)
				m.rejoin()
				lastOK = time.Now()
				continue
			case code == kafka.UnsupportedVersion:
				// A 4.x broker whose group.coordinator.rebalance.protocols
				// leaves out "consumer" answers so.
				return fmt.Errorf("%w: group %q: heartbeat answered UNSUPPORTED_VERSION (is \"consumer\" in the brokers' group.coordinator.rebalance.protocols?) %s",
					ErrNoConsumerProtocol, s.group.ID, res.ErrorMessage)
			case code.Temporary() || code == kafka.NotCoordinatorForGroup || code == kafka.GroupCoordinatorNotAvailable ||
				code == kafka.GroupLoadInProgress:
				s.log.Info("kafkasource: consumer group heartbeat: retrying", "code", res.ErrorCode, "message", res.ErrorMessage)
				wait = s.opts.HeartbeatInterval
			default:
				return fmt.Errorf("kafkasource: group %q: heartbeat refused: %w (code %d): %s", s.group.ID, code, res.ErrorCode, res.ErrorMessage)
			}
		}
		if len(m.owned) > 0 && time.Since(lastOK) > max(s.opts.SessionTimeout, 3*m.interval) {
			// The coordinator may have given the partitions away by now:
			// stop processing them, and join again once it answers.
			s.log.Warn("kafkasource: no heartbeat answered within the session timeout: releasing every partition",
				"session_timeout", s.opts.SessionTimeout)
			m.rejoin()
		}
		if !m.sleep(ctx, wait) {
			return nil
		}
	}
}

// sleep waits d, or less when a chain stopped (its partition is then left
// out of the next heartbeat, which acknowledges the revocation). It
// returns false when ctx ended.
func (m *member) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-m.stopped:
	}
	m.sweep()
	return true
}

// sweep forgets the partitions whose chain ended.
func (m *member) sweep() {
	for p, oc := range m.owned {
		select {
		case <-oc.done:
			delete(m.owned, p)
			if oc.superseded && !oc.revoking {
				m.refused[p] = true
			}
		default:
		}
	}
}

// accept takes a successful heartbeat's answer: the epoch, the interval,
// and the target assignment if it changed, which it reconciles.
func (m *member) accept(ctx context.Context, res kafkawire.HeartbeatResponse) {
	moved := m.epoch.Swap(res.MemberEpoch) != res.MemberEpoch
	m.joined = true
	if res.HeartbeatInterval > 0 {
		m.interval = res.HeartbeatInterval
	}
	if res.HasAssignment {
		m.target = res.Assignment
		m.s.log.Info("kafkasource: new target assignment", "member", m.id, "epoch", res.MemberEpoch,
			"partitions", fmt.Sprint(m.target))
	}
	target, ok := m.resolve(ctx)
	if !ok {
		return // an unknown topic id: the next heartbeat looks again
	}
	for p, oc := range m.owned {
		if !target[p] && !oc.revoking {
			oc.revoking = true
			oc.cancel()
		}
	}
	for p := range target {
		if _, owned := m.owned[p]; !owned {
			if m.refused[p] {
				// superviseChain's restart after a refused save, done
				// here: the partition is still this member's.
				m.s.restarts.Add(context.WithoutCancel(ctx), 1,
					metric.WithAttributes(meter.Partition(p.Topic, p.Partition)...))
				m.s.log.Warn("kafkasource: restarting the chain from the newest checkpoint after a save refused as superseded",
					"partition", p.String(), "member", m.id, "epoch", res.MemberEpoch)
			}
			m.start(ctx, p, res.MemberEpoch)
		}
	}
	// A refused partition not in the target left this member: nothing
	// to restart.
	clear(m.refused)
	if moved {
		epoch, mine, interval := res.MemberEpoch, len(target), m.interval
		m.checks.Go(func() { m.checkEpoch(ctx, epoch, mine, interval) })
	}
}

// resolve returns the target assignment by topic name, refreshing the
// topic ids when one is unknown. ok is false when one stays unknown.
func (m *member) resolve(ctx context.Context) (map[checkpoint.TopicPartition]bool, bool) {
	for refreshed := false; ; refreshed = true {
		target := map[checkpoint.TopicPartition]bool{}
		missing := false
		for _, tp := range m.target {
			name, ok := m.names[tp.TopicID]
			if !ok {
				missing = true
				break
			}
			for _, p := range tp.Partitions {
				target[checkpoint.TopicPartition{Topic: name, Partition: int(p)}] = true
			}
		}
		if !missing {
			return target, true
		}
		if refreshed || !m.refreshTopics(ctx) {
			return nil, false
		}
	}
}

func (m *member) refreshTopics(ctx context.Context) bool {
	ts, err := m.hb.Metadata(ctx, m.s.group.Topics)
	if err != nil {
		m.s.log.Warn("kafkasource: topic ids: metadata", "err", err)
		return false
	}
	m.ids, m.names = map[string]kafkawire.UUID{}, map[kafkawire.UUID]string{}
	for _, t := range ts {
		if t.ErrorCode == 0 {
			m.ids[t.Name], m.names[t.ID] = t.ID, t.Name
		}
	}
	return true
}

// start runs p's chain until it is revoked or Run ends.
func (m *member) start(ctx context.Context, p checkpoint.TopicPartition, epoch int32) {
	pctx, cancel := context.WithCancel(ctx)
	oc := &ownedChain{cancel: cancel, done: make(chan struct{})}
	m.owned[p] = oc
	// The epoch the partition arrived in names its checkpoints: a later
	// owner of p gets it in a higher epoch of the group, so two owners
	// never write the same checkpoint name.
	own := ownership{meta: checkpoint.Meta{Generation: int64(epoch), Member: m.id}, commit: m.commit,
		superseded: func() { oc.superseded = true },
		membership: &membership{group: m.s.group.ID, current: func() (int, string) { return int(m.epoch.Load()), m.id }}}
	m.wg.Go(func() {
		defer func() {
			cancel()
			close(oc.done)
			select {
			case m.stopped <- struct{}{}:
			default:
			}
		}()
		if err := m.s.superviseChain(ctx, pctx, own, p); err != nil {
			m.fail(err)
		}
	})
}

// releaseAll stops every chain and waits for them.
func (m *member) releaseAll() {
	for _, oc := range m.owned {
		oc.cancel()
	}
	m.wg.Wait()
	clear(m.owned)
}

// rejoin gives up every partition and makes the next heartbeat join the
// group again, with epoch 0.
func (m *member) rejoin() {
	m.releaseAll()
	clear(m.refused)
	m.target = nil
	m.epoch.Store(kafkawire.EpochJoin)
}

// commit commits p's offset with the member's current epoch. An epoch
// that moved on meanwhile (STALE_MEMBER_EPOCH) is retried once with the
// new one.
func (m *member) commit(ctx context.Context, p checkpoint.TopicPartition, next int64) error {
	for attempt := 0; ; attempt++ {
		epoch := m.epoch.Load()
		errs, err := m.oc.CommitOffsets(ctx, &kafkawire.OffsetCommit{GroupID: m.s.group.ID, MemberID: m.id,
			MemberEpoch: epoch, InstanceID: m.instanceID(), Offsets: map[string]map[int32]int64{p.Topic: {int32(p.Partition): next}}})
		if err != nil {
			return err
		}
		if len(errs) == 0 {
			return nil
		}
		code := kafka.Error(errs[0].ErrorCode)
		if code == kafkawire.StaleMemberEpoch && attempt == 0 && m.epoch.Load() != epoch {
			continue
		}
		return fmt.Errorf("kafkasource: %s: offset commit at epoch %d: %w (code %d)", p, epoch, code, errs[0].ErrorCode)
	}
}
