package dedup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// model is the specification: a map from key to expiry, cleaned never.
type model struct {
	ttl   int64
	upd   UpdateType
	clock int64
	exp   map[string]uint32
}

func (m *model) observe(key string, t time.Time) bool {
	if ns := t.UnixNano(); t.Unix() >= 0 && ns > m.clock {
		m.clock = ns
	}
	now := uint32(m.clock / int64(time.Second))
	exp := uint32((m.clock + m.ttl + int64(time.Second) - 1) / int64(time.Second))
	if old, ok := m.exp[key]; ok && old > now {
		if m.upd == OnReadAndWrite {
			m.exp[key] = max(old, exp)
		}
		return false
	}
	m.exp[key] = exp
	return true
}

func (m *model) contains(key string) bool {
	e, ok := m.exp[key]
	return ok && e > uint32(m.clock/int64(time.Second))
}

// TestModel drives a Deduplicator and the model with the same random
// operations, including growth, cleanup and snapshot/restore into fresh
// instances of other sizes, and requires identical answers throughout.
func TestModel(t *testing.T) {
	const ttl = 100 * time.Second
	for _, exact := range []bool{false, true} {
		for _, upd := range []UpdateType{OnCreateAndWrite, OnReadAndWrite} {
			for _, budget := range []int{1, 8, 64} {
				t.Run(fmt.Sprintf("exact=%v/%v/budget=%d", exact, upd, budget), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(budget), uint64(upd)))
					opts := Options{ExactKeys: exact, UpdateType: upd, CleanupBudget: budget}
					d, err := New(ttl, opts)
					require.NoError(t, err)
					m := &model{ttl: int64(ttl), upd: upd, exp: map[string]uint32{}}
					now := time.Unix(1_700_000_000, 0)
					for op := range 30_000 {
						// Time mostly creeps forward, sometimes jumps past the TTL,
						// sometimes goes backwards (late events).
						switch r := rng.IntN(1000); {
						case r < 2:
							now = now.Add(ttl + time.Duration(rng.Int64N(int64(ttl))))
						case r < 50:
							now = now.Add(-time.Duration(rng.Int64N(int64(ttl))))
						default:
							now = now.Add(time.Duration(rng.Int64N(int64(50 * time.Millisecond))))
						}
						key := fmt.Sprintf("k%d", rng.IntN(3000))
						first, err := d.Observe([]byte(key), now)
						require.NoError(t, err)
						require.Equalf(t, m.observe(key, now), first, "op %d key %s", op, key)

						switch rng.IntN(5000) {
						case 0:
							snap, err := d.Snapshot(context.Background(), 1)
							require.NoError(t, err)
							opts.ExpectedKeys = rng.IntN(10_000)
							d2, err := New(ttl, opts)
							require.NoError(t, err)
							require.NoError(t, d2.Restore(context.Background(), snap))
							snap2, err := d2.Snapshot(context.Background(), 2)
							require.NoError(t, err)
							require.Equal(t, snap, snap2, "snapshot after restore differs")
							checkTable(t, &d2.t)
							d = d2
						case 1:
							d.Cleanup(rng.IntN(5000))
						case 2:
							checkTable(t, &d.t)
						}
					}
					checkTable(t, &d.t)
					for i := range 3000 {
						key := fmt.Sprintf("k%d", i)
						assert.Equalf(t, m.contains(key), d.Contains([]byte(key)), "key %s", key)
					}
				})
			}
		}
	}
}

// TestObserveBatchEqualsObserve feeds the same random sightings to one
// Deduplicator through ObserveBatch and to another through Observe, with a
// key cap and times out of range so that batches fail halfway, and requires
// the same answers, the same errors at the same sightings, and byte-identical
// snapshots after every batch.
func TestObserveBatchEqualsObserve(t *testing.T) {
	const ttl = 100 * time.Second
	ctx := context.Background()
	for _, exact := range []bool{false, true} {
		t.Run(fmt.Sprintf("exact=%v", exact), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			opts := Options{ExactKeys: exact, MaxKeys: 2000}
			batched, err := New(ttl, opts)
			require.NoError(t, err)
			single, err := New(ttl, opts)
			require.NoError(t, err)
			now := time.Unix(1_700_000_000, 0)
			var full, outOfRange int
			for batch := range 2000 {
				s := make([]Sighting, rng.IntN(3*batchAhead))
				for i := range s {
					switch r := rng.IntN(1000); {
					case r < 3:
						now = now.Add(ttl + time.Duration(rng.Int64N(int64(ttl))))
					case r < 40:
						now = now.Add(-time.Duration(rng.Int64N(int64(ttl))))
					default:
						now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
					}
					at := now
					if rng.IntN(200) == 0 {
						at = time.Unix(math.MaxUint32+1, 0) // ErrTimeOutOfRange
					}
					// Keys repeat within a batch too.
					s[i] = Sighting{Key: fmt.Appendf(nil, "k%d", rng.IntN(4000)), Time: at}
				}
				got, gotErr := batched.ObserveBatch(s, nil)
				var want []bool
				var wantErr error
				for _, x := range s {
					first, err := single.Observe(x.Key, x.Time)
					if err != nil {
						wantErr = err
						break
					}
					want = append(want, first)
				}
				require.Equalf(t, want, got, "batch %d", batch)
				require.Equalf(t, wantErr, gotErr, "batch %d", batch)
				switch {
				case errors.Is(gotErr, ErrFull):
					full++
				case errors.Is(gotErr, ErrTimeOutOfRange):
					outOfRange++
				}
				a, err := batched.Snapshot(ctx, 1)
				require.NoError(t, err)
				b, err := single.Snapshot(ctx, 1)
				require.NoError(t, err)
				require.Equalf(t, b, a, "batch %d: state differs", batch)
			}
			require.NotZero(t, full, "no batch hit MaxKeys: the test lost its edge")
			require.NotZero(t, outOfRange, "no batch had a time out of range: the test lost its edge")
			checkTable(t, &batched.t)
		})
	}
}
