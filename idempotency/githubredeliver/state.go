package githubredeliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Snapshot is what a Redeliverer remembers between passes.
type Snapshot struct {
	// Through is the newest delivery id examined: the next pass lists
	// deliveries down to it and no further. 0: examine the whole window.
	Through int64 `json:"through"`
	// Pending holds every GUID seen failing and not yet seen succeeding,
	// by GUID.
	Pending map[string]Pending `json:"pending"`
}

// Pending is a GUID waiting for a successful delivery.
type Pending struct {
	// DeliveryID and DeliveredAt are those of its newest failed delivery:
	// the one to redeliver, and the time its 3-day window is counted from.
	DeliveryID  int64     `json:"delivery_id"`
	DeliveredAt time.Time `json:"delivered_at"`
	// StatusCode is the newest failed delivery's status code.
	StatusCode int `json:"status_code"`
	// Requests counts the redeliveries requested; RequestedAt is the last.
	Requests    int       `json:"requests"`
	RequestedAt time.Time `json:"requested_at"`
	// RequestedThrough is Snapshot.Through when the last redelivery was
	// requested: a failed attempt with a larger id is that redelivery's.
	RequestedThrough int64 `json:"requested_through"`
}

func (s Snapshot) clone() Snapshot {
	s.Pending = maps.Clone(s.Pending)
	if s.Pending == nil {
		s.Pending = make(map[string]Pending)
	}
	return s
}

// State keeps a Redeliverer's Snapshot between passes. Load of a state never
// saved returns the zero Snapshot and nil.
type State interface {
	Load(ctx context.Context) (Snapshot, error)
	Save(ctx context.Context, s Snapshot) error
}

// MemoryState is a State in memory: a restart examines the whole window
// again. Its zero value is ready; it is safe for concurrent use.
type MemoryState struct {
	mu sync.Mutex
	s  Snapshot
}

var _ State = (*MemoryState)(nil)

// Load implements State.
func (m *MemoryState) Load(context.Context) (Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.s.clone(), nil
}

// Save implements State.
func (m *MemoryState) Save(_ context.Context, s Snapshot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s = s.clone()
	return nil
}

// CheckpointState is a State kept as one JSON blob under Name in a
// checkpoint.Storage (the processor's, for instance), so that it survives
// restarts and is shared by the instances that take turns running passes.
type CheckpointState struct {
	Storage checkpoint.Storage
	// Name of the blob, such as "githubredeliver/octo-org/app/42".
	Name string
}

var _ State = CheckpointState{}

// Load implements State.
func (c CheckpointState) Load(ctx context.Context) (Snapshot, error) {
	b, err := c.Storage.Get(ctx, c.Name)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return Snapshot{}.clone(), nil
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("githubredeliver: load state %s: %w", c.Name, err)
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return Snapshot{}, fmt.Errorf("%w: state %s: %w", ErrCorrupt, c.Name, err)
	}
	return s.clone(), nil
}

// Save implements State.
func (c CheckpointState) Save(ctx context.Context, s Snapshot) error {
	b, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("githubredeliver: encode state: %w", err)
	}
	if err := c.Storage.Put(ctx, c.Name, b); err != nil {
		return fmt.Errorf("githubredeliver: save state %s: %w", c.Name, err)
	}
	return nil
}
