package kafkasource

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
)

// Errors of a static member (Group.InstanceID) under ProtocolConsumer,
// wrapped by the error Run returns. Both mean another process holds or
// took the instance id: running on would read the same partitions twice,
// so Run stops (as the Java consumer does) after stopping every chain.
var (
	// ErrUnreleasedInstanceID: the coordinator refused the join because a
	// member with the same InstanceID is still in the group
	// (UNRELEASED_INSTANCE_ID): another running Source has the same
	// InstanceID, or a previous one stopped without leaving (a crash) and
	// its session has not expired yet. Run retries the join for up to 90
	// seconds, longer than the broker's session timeout can be by default
	// (group.consumer.max.session.timeout.ms, 60 s), before it returns
	// this.
	ErrUnreleasedInstanceID = errors.New("kafkasource: the group instance id is held by another member of the group")
	// ErrFencedInstanceID: another member joined with this Source's
	// InstanceID and replaced it (FENCED_INSTANCE_ID).
	ErrFencedInstanceID = errors.New("kafkasource: another member joined with this group instance id")
)

// defaultInstanceWait is how long Run retries a join refused with
// UNRELEASED_INSTANCE_ID; see ErrUnreleasedInstanceID.
const defaultInstanceWait = 90 * time.Second

// instanceID is Group.InstanceID as a heartbeat carries it: nil for a
// dynamic member.
func (m *member) instanceID() *string {
	if m.s.group.InstanceID == "" {
		return nil
	}
	return &m.s.group.InstanceID
}

// unreleased takes a join refused with UNRELEASED_INSTANCE_ID: another
// member holds the instance id. It may be a crashed predecessor whose
// session has yet to expire, so the join is retried until instanceWait
// after the first refusal in a row (since), and then Run ends.
func (m *member) unreleased(ctx context.Context, res kafkawire.HeartbeatResponse, since *time.Time) error {
	s := m.s
	log := s.log.Debug
	if since.IsZero() {
		*since, log = time.Now(), s.log.Warn
	}
	if time.Since(*since) >= s.instanceWait {
		return fmt.Errorf("%w: group %q, instance id %q, refused for %v: %s", ErrUnreleasedInstanceID,
			s.group.ID, s.group.InstanceID, s.instanceWait, res.ErrorMessage)
	}
	log("kafkasource: the group instance id is still held by another member (a running instance "+
		"with the same InstanceID, or one that stopped without leaving); retrying the join",
		"instance", s.group.InstanceID, "message", res.ErrorMessage, "max_wait", s.instanceWait)
	if m.joined {
		// The holder may be this member itself, rejoining after a fence
		// or heartbeats that went unanswered: the coordinator refuses its
		// join as well until it leaves (epoch -2, as a restart does,
		// keeping its partitions for the join). Another member's hold is
		// untouched: the leave names this member's id.
		m.sendLeave(ctx, kafkawire.EpochStaticLeave)
	}
	return nil
}

// leave tells the coordinator the member left, once its chains stopped. A
// dynamic member leaves for good (epoch -1), so that its partitions move at
// once rather than after the session timeout. A static one leaves with
// epoch -2: the coordinator keeps its partitions for the instance id until
// the session timeout, moving none. Best effort: the session timeout
// covers a failure.
func (m *member) leave(ctx context.Context) {
	if m.epoch.Load() <= 0 {
		return
	}
	epoch := kafkawire.EpochLeave
	if m.instanceID() != nil {
		epoch = kafkawire.EpochStaticLeave
	}
	m.sendLeave(ctx, epoch)
}

func (m *member) sendLeave(ctx context.Context, epoch int32) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	h := &kafkawire.Heartbeat{GroupID: m.s.group.ID, MemberID: m.id, MemberEpoch: epoch, InstanceID: m.instanceID()}
	if res, err := m.hb.Heartbeat(lctx, h); err != nil || res.ErrorCode != 0 {
		m.s.log.Debug("kafkasource: leaving the group", "epoch", epoch, "err", err, "code", res.ErrorCode, "message", res.ErrorMessage)
	}
}
