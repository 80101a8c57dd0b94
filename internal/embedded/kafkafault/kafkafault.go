package kafkafault

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Kind names a fault.
type Kind string

// The faults. Each error kind answers with a code that Kafka clients
// (kafka-go's Error.Temporary, franz-go's kerr) treat as retriable; Fault.Code
// overrides it.
const (
	// ProduceError refuses Count produce requests before the write
	// (NOT_ENOUGH_REPLICAS): nothing is appended.
	ProduceError Kind = "produce-error"
	// ProduceTimeout appends Count produce requests and answers them
	// REQUEST_TIMED_OUT, as a broker whose replication timed out does: the
	// client hears a failure for a write that happened.
	ProduceTimeout Kind = "produce-timeout"
	// ProduceLostAck appends Count produce requests and closes the
	// connection in place of their answer: the write happened and the
	// client never hears of it.
	ProduceLostAck Kind = "produce-lost-ack"
	// FetchError fails Count fetch requests (NOT_LEADER_FOR_PARTITION on
	// every partition the request names).
	FetchError Kind = "fetch-error"
	// CommitError refuses Count offset commits (COORDINATOR_NOT_AVAILABLE):
	// no offset is stored.
	CommitError Kind = "commit-error"
	// GroupError refuses Count JoinGroup, SyncGroup or Heartbeat requests
	// (COORDINATOR_NOT_AVAILABLE), leaving the group as it was.
	GroupError Kind = "group-error"
	// DropConnections closes every client connection open now. Count is
	// ignored; the hits are the connections closed.
	DropConnections Kind = "drop-connections"
	// Slow holds every answer back by Delay for Duration. Count is
	// ignored; the hits are the answers delayed.
	Slow Kind = "slow"
)

// Kinds lists every kind, in a stable order.
func Kinds() []Kind {
	return []Kind{ProduceError, ProduceTimeout, ProduceLostAck, FetchError, CommitError, GroupError, DropConnections, Slow}
}

// Defaults of a Slow fault.
const (
	DefaultSlowDelay    = 200 * time.Millisecond
	DefaultSlowDuration = time.Second
)

// Errors.
var (
	// ErrUnknownKind is returned by Inject for a Kind it does not know.
	ErrUnknownKind = errors.New("kafkafault: unknown fault kind")
	// ErrInvalid is returned by Inject for a fault with a bad field.
	ErrInvalid = errors.New("kafkafault: invalid fault")
	// ErrNotAttached is returned by Inject before Attach, for a kind that
	// needs the cluster.
	ErrNotAttached = errors.New("kafkafault: no cluster attached")
	// errLostAck is what the broker's write sees when a ProduceLostAck
	// closes the connection in place of the answer.
	errLostAck = errors.New("kafkafault: produce acknowledgement dropped")
)

// Fault is one fault to inject. The zero value of every field but Kind is
// valid.
type Fault struct {
	Kind Kind `json:"kind"`
	// Count is how many requests the fault hits: 0 means 1, -1 means every
	// request until Clear. Ignored by DropConnections and Slow.
	Count int `json:"count,omitempty"`
	// Topic, when set, limits produce, fetch and commit faults to requests
	// naming it (kfake's selector; ProduceLostAck ignores it).
	Topic string `json:"topic,omitempty"`
	// Group, when set, limits commit and group faults to that consumer
	// group.
	Group string `json:"group,omitempty"`
	// Code overrides the error code the fault answers with (a kerr code);
	// 0 means the kind's default. Used by the error kinds only.
	Code int16 `json:"code,omitempty"`
	// Delay and Duration configure Slow. Defaults: DefaultSlowDelay,
	// DefaultSlowDuration.
	Delay    time.Duration `json:"delay,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
}

// Counts is what happened to the faults of one kind.
type Counts struct {
	// Injected is the number of Inject calls of the kind.
	Injected int `json:"injected"`
	// Hits is the number of requests (connections for DropConnections,
	// answers for Slow) the faults of the kind have hit.
	Hits int `json:"hits"`
}

// Stats maps each kind that was injected to its counts.
type Stats map[Kind]Counts

// Injector injects faults into one kfake cluster. Its methods are safe for
// concurrent use.
type Injector struct {
	mu        sync.Mutex
	cluster   *kfake.Cluster
	conns     map[*conn]struct{}
	injected  map[Kind]int
	hits      map[Kind]int // hits of the connection-layer faults and of finished kfake faults
	handles   []kindHandle // kfake faults that may still hit
	lostAcks  int          // ProduceLostAck hits left; -1: unlimited
	slowUntil time.Time
	slowDelay time.Duration

	members *members     // what the group requests said, for ExpireMembers
	expired atomic.Int64 // members ExpireMembers made leave
}

// kindHandle is one kfake fault and its budget.
type kindHandle struct {
	kind  Kind
	h     *kfake.FaultHandle
	count int // -1: until Clear
}

// New returns an Injector with no faults armed.
func New() *Injector {
	return &Injector{conns: map[*conn]struct{}{}, injected: map[Kind]int{}, hits: map[Kind]int{}, members: newMembers()}
}

// Listen listens like net.Listen and passes every accepted connection
// through the injector. Give it to kfake.ListenFn.
func (i *Injector) Listen(network, address string) (net.Listener, error) {
	l, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return &listener{Listener: l, inj: i}, nil
}

// Attach sets the cluster whose requests the error kinds fail. Call it once,
// right after kfake.NewCluster.
func (i *Injector) Attach(c *kfake.Cluster) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.cluster = c
}

// errorFault is how an error kind maps onto a kfake fault.
var errorFault = map[Kind]struct {
	keys []kmsg.Key
	err  *kerr.Error
}{
	ProduceError:   {[]kmsg.Key{kmsg.Produce}, kerr.NotEnoughReplicas},
	ProduceTimeout: {[]kmsg.Key{kmsg.Produce}, kerr.RequestTimedOut},
	FetchError:     {[]kmsg.Key{kmsg.Fetch}, kerr.NotLeaderForPartition},
	CommitError:    {[]kmsg.Key{kmsg.OffsetCommit}, kerr.CoordinatorNotAvailable},
	GroupError:     {[]kmsg.Key{kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat}, kerr.CoordinatorNotAvailable},
}

// Inject arms f. Error kinds need Attach first.
func (i *Injector) Inject(f Fault) error {
	if f.Count < -1 || f.Delay < 0 || f.Duration < 0 {
		return fmt.Errorf("%w: %+v", ErrInvalid, f)
	}
	count := f.Count
	if count == 0 {
		count = 1
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	switch f.Kind {
	case ProduceLostAck:
		if count < 0 || i.lostAcks < 0 {
			i.lostAcks = -1
		} else {
			i.lostAcks += count
		}
	case DropConnections:
		for c := range i.conns {
			delete(i.conns, c)
			_ = c.Conn.Close()
			i.hits[DropConnections]++
		}
	case Slow:
		delay, dur := f.Delay, f.Duration
		if delay == 0 {
			delay = DefaultSlowDelay
		}
		if dur == 0 {
			dur = DefaultSlowDuration
		}
		i.slowDelay = delay
		i.slowUntil = time.Now().Add(dur)
	default:
		ef, ok := errorFault[f.Kind]
		if !ok {
			return fmt.Errorf("%w: %q", ErrUnknownKind, f.Kind)
		}
		if i.cluster == nil {
			return ErrNotAttached
		}
		e := ef.err
		if f.Code != 0 {
			if e = kerr.TypedErrorForCode(f.Code); e == nil || (e == kerr.UnknownServerError && f.Code != e.Code) {
				return fmt.Errorf("%w: error code %d", ErrInvalid, f.Code)
			}
		}
		kf := kfake.Fault{Keys: ef.keys, Topic: f.Topic, Group: f.Group, Err: e, Count: count}
		if f.Kind == ProduceError || f.Kind == ProduceTimeout || f.Kind == FetchError {
			kf.Group = "" // those requests carry no group: a group selector would never match
		}
		i.handles = append(i.handles, kindHandle{kind: f.Kind, h: i.cluster.Fault(kf), count: count})
	}
	i.injected[f.Kind]++
	return nil
}

// Clear disarms every fault: kfake faults that have hits left, lost
// acknowledgements not yet taken, a slow period not yet over. Connections
// already closed stay closed; Stats keeps counting what happened.
func (i *Injector) Clear() {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, kh := range i.handles {
		kh.h.Remove()
		i.hits[kh.kind] += kh.h.Hits()
	}
	i.handles = nil
	i.lostAcks = 0
	i.slowUntil = time.Time{}
}

// Stats returns, for each kind injected so far, how many faults were
// injected and how many requests they hit.
func (i *Injector) Stats() Stats {
	i.mu.Lock()
	defer i.mu.Unlock()
	// Fold the kfake faults that have used their whole budget into hits,
	// so a long run does not keep every handle.
	i.handles = slices.DeleteFunc(i.handles, func(kh kindHandle) bool {
		if kh.count < 0 || kh.h.Hits() < kh.count {
			return false
		}
		i.hits[kh.kind] += kh.h.Hits()
		return true
	})
	s := Stats{}
	for k, n := range i.injected {
		c := s[k]
		c.Injected = n
		s[k] = c
	}
	for k, n := range i.hits {
		c := s[k]
		c.Hits += n
		s[k] = c
	}
	for _, kh := range i.handles {
		c := s[kh.kind]
		c.Hits += kh.h.Hits()
		s[kh.kind] = c
	}
	return s
}

// answer decides what happens to the answer to a request with api key key:
// how long to hold it back, and whether to drop it (close the connection)
// because it acknowledges a produce whose acknowledgement is to be lost.
func (i *Injector) answer(key int16) (delay time.Duration, lose bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if time.Now().Before(i.slowUntil) {
		delay = i.slowDelay
		i.hits[Slow]++
	}
	if key == int16(kmsg.Produce) && i.lostAcks != 0 {
		if i.lostAcks > 0 {
			i.lostAcks--
		}
		i.hits[ProduceLostAck]++
		lose = true
	}
	return delay, lose
}

func (i *Injector) track(c *conn) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.conns[c] = struct{}{}
}

func (i *Injector) untrack(c *conn) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.conns, c)
}
