package kafkafault

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Where kfake and Kafka differ: a consumer-group member that dies while its
// JoinGroup waits for the rebalance is never expired by kfake. When the
// rebalance completes, kfake answers every waiting JoinGroup and arms the
// member's session timer only if the answer could be handed to the
// connection; for a connection that is gone it may not (it races a buffered
// channel against the closed connection, about half the time). Once the
// leader's SyncGroup makes the group stable, the pending-sync timer that
// would have removed the silent member is stopped too. The dead member then
// stays in the group for good, with the partitions the leader assigned it,
// and nobody reads them. Kafka arms the session timer of every member when
// the join completes, answered or not, and expires it after
// session.timeout.ms.
//
// ExpireMembers gives kfake Kafka's behaviour back from the outside: it
// watches the group requests that pass through the injector and makes a
// member that has sent nothing for its session timeout leave the group (a
// LeaveGroup naming it), as Kafka's expiry would.

// maxWatched bounds the size of a group request kept for parsing.
const maxWatched = 64 << 10

// watched reports whether requests with api key key tell that a member is
// alive.
func watched(key int16) bool {
	switch kmsg.Key(key) {
	case kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.OffsetCommit:
		return true
	}
	return false
}

// members is what the injector saw of consumer-group members.
type members struct {
	mu sync.Mutex
	// seen is each member's last request and session timeout.
	seen map[string]memberSeen // by member id
	// joining is the session timeout of a first JoinGroup (no member id
	// yet), by the client's address, which DescribeGroups reports.
	joining map[string]time.Duration
}

type memberSeen struct {
	at      time.Time
	session time.Duration // 0: unknown
}

func newMembers() *members {
	return &members{seen: map[string]memberSeen{}, joining: map[string]time.Duration{}}
}

// observe records a group request (the bytes after the correlation id) from
// the client at host.
func (ms *members) observe(key, version int16, rest []byte, host string) {
	r := kbin.Reader{Src: rest}
	r.NullableString() // client id
	req := kmsg.RequestForKey(key)
	if req == nil {
		return
	}
	req.SetVersion(version)
	if req.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if r.Complete() != nil || req.ReadFrom(r.Src) != nil {
		return
	}
	var id string
	var session time.Duration
	switch q := req.(type) {
	case *kmsg.JoinGroupRequest:
		id, session = q.MemberID, time.Duration(q.SessionTimeoutMillis)*time.Millisecond
	case *kmsg.SyncGroupRequest:
		id = q.MemberID
	case *kmsg.HeartbeatRequest:
		id = q.MemberID
	case *kmsg.OffsetCommitRequest:
		id = q.MemberID
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if id == "" {
		if session > 0 {
			ms.joining[host] = session
		}
		return
	}
	s := ms.seen[id]
	s.at = time.Now()
	if session > 0 {
		s.session = session
	}
	ms.seen[id] = s
}

// silent returns how long member id (of client host) has sent nothing and
// its session timeout, starting its clock if it is new.
func (ms *members) silent(id, host string, now time.Time) (time.Duration, time.Duration) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	s, ok := ms.seen[id]
	if !ok {
		// A member first seen now: Kafka's clock starts when its join
		// completes, which is about now.
		s = memberSeen{at: now, session: ms.joining[host]}
		delete(ms.joining, host)
		ms.seen[id] = s
	}
	return now.Sub(s.at), s.session
}

// forget drops members not in live that have been silent for long, so a
// long run does not keep every member id it ever saw.
func (ms *members) forget(live map[string]bool, now time.Time, after time.Duration) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for id, s := range ms.seen {
		if !live[id] && now.Sub(s.at) > after {
			delete(ms.seen, id)
		}
	}
	if len(ms.joining) > 4096 {
		clear(ms.joining)
	}
}

// ExpireOptions configures ExpireMembers. The zero value is valid.
type ExpireOptions struct {
	// Interval between two looks at the groups. Default: 500ms.
	Interval time.Duration
	// SessionTimeout is used for a member whose JoinGroup the injector did
	// not see (one that joined before it started). Default: 10s.
	SessionTimeout time.Duration
	// Logger receives every expiry. Default: discards.
	Logger *slog.Logger
}

// Expired returns how many members ExpireMembers made leave.
func (i *Injector) Expired() int64 { return i.expired.Load() }

// ExpireMembers expires silent consumer-group members of the broker at
// brokers (the cluster the injector is attached to) as Kafka would, until
// ctx ends: every Interval it describes every group that is stable or
// completing a rebalance, and makes each member that has sent no JoinGroup,
// SyncGroup, Heartbeat or OffsetCommit for longer than its session timeout
// leave the group. A member that heartbeats is never touched. It returns
// ctx's error, or an error if it cannot create its client.
func (i *Injector) ExpireMembers(ctx context.Context, brokers []string, opts ExpireOptions) error {
	if opts.Interval <= 0 {
		opts.Interval = 500 * time.Millisecond
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return fmt.Errorf("kafkafault: expire members: %w", err)
	}
	defer cl.Close()
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		i.expireOnce(rctx, cl, opts)
		cancel()
	}
}

// expireOnce looks at every group once. Errors are transient (the broker is
// slow, faulted or restarting): the next look tries again.
func (i *Injector) expireOnce(ctx context.Context, cl *kgo.Client, opts ExpireOptions) {
	list, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, cl)
	if err != nil || list.ErrorCode != 0 || len(list.Groups) == 0 {
		return
	}
	desc := kmsg.NewPtrDescribeGroupsRequest()
	for _, g := range list.Groups {
		if g.ProtocolType == "consumer" {
			desc.Groups = append(desc.Groups, g.Group)
		}
	}
	if len(desc.Groups) == 0 {
		return
	}
	resp, err := desc.RequestWith(ctx, cl)
	if err != nil {
		return
	}
	now := time.Now()
	live := map[string]bool{}
	for _, g := range resp.Groups {
		if g.ErrorCode != 0 {
			continue
		}
		for _, m := range g.Members {
			live[m.MemberID] = true
		}
		// A group preparing a rebalance is kfake's to finish: its
		// rebalance timer drops the members that do not rejoin.
		if g.State != "Stable" && g.State != "CompletingRebalance" {
			continue
		}
		for _, m := range g.Members {
			silent, session := i.members.silent(m.MemberID, m.ClientHost, now)
			if session <= 0 {
				session = opts.SessionTimeout
			}
			if silent <= session {
				continue
			}
			leave := kmsg.NewPtrLeaveGroupRequest()
			leave.Group = g.Group
			lm := kmsg.NewLeaveGroupRequestMember()
			lm.MemberID = m.MemberID
			leave.Members = append(leave.Members, lm)
			lresp, err := leave.RequestWith(ctx, cl)
			if err != nil {
				continue
			}
			code := lresp.ErrorCode
			if code == 0 && len(lresp.Members) == 1 {
				code = lresp.Members[0].ErrorCode
			}
			if code != 0 {
				opts.Logger.Warn("kafkafault: expiring a silent member failed", "group", g.Group,
					"member", m.MemberID, "err", kerr.ErrorForCode(code))
				continue
			}
			i.expired.Add(1)
			opts.Logger.Info("kafkafault: silent member expired, as Kafka would after its session timeout",
				"group", g.Group, "member", m.MemberID, "host", m.ClientHost, "silent", silent, "session", session)
		}
	}
	i.members.forget(live, now, 10*opts.SessionTimeout)
}
