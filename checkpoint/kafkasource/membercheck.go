package kafkasource

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
)

// describeTries bounds how many times an epoch's check asks for the group
// before it settles, a heartbeat interval apart.
const describeTries = 10

// checkEpoch is checkGeneration under ProtocolConsumer, run when the
// member's epoch moved on (the group's assignment changed: a member
// joined or left, or a topic grew): it notes the subscribed topics'
// partition counts, then waits for the group to settle (Stable: every
// member owns its target) and counts the members that own nothing. mine is
// how many partitions the member's target holds. A check whose epoch is no
// longer the member's gives way to the newer one; a failed request skips
// it (the next epoch checks again).
func (m *member) checkEpoch(ctx context.Context, epoch int32, mine int, interval time.Duration) {
	s := m.s
	tr := dialerTransport(s.opts.Dialer)
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(s.group.Brokers...), Transport: tr, Timeout: 10 * time.Second}
	meta, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: s.group.Topics})
	if err != nil {
		s.log.Debug("kafkasource: epoch check: metadata", "err", err)
		return
	}
	partitions := 0
	for _, n := range s.notePartitions(ctx, meta) {
		partitions += n
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for range describeTries {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m.epoch.Load() != epoch {
			return
		}
		d, err := m.oc.Describe(ctx)
		if err == nil && d.ErrorCode == 0 && d.State == "Stable" {
			assigned := make([]int, 0, len(d.Members))
			for _, dm := range d.Members {
				assigned = append(assigned, dm.Assigned)
			}
			s.reportIdle(ctx, "epoch", int(epoch), assigned, partitions, mine)
			return
		}
		s.log.Debug("kafkasource: epoch check: describe group", "err", err, "code", d.ErrorCode, "state", d.State)
		t.Reset(interval)
	}
	if mine == 0 && ctx.Err() == nil {
		s.log.Warn("kafkasource: this member got no partition: it reads nothing; add partitions or run fewer instances",
			"group", s.group.ID, "epoch", epoch, "partitions", partitions)
	}
}
