package dedup_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/dedup"
)

var pInc = checkpoint.TopicPartition{Topic: "events", Partition: 1}

// incChain is a partition's chain with an incremental deduplicator.
type incChain struct {
	t     *testing.T
	coord *checkpoint.Coordinator
	task  *checkpoint.Task
	d     *dedup.Deduplicator
}

func attachInc(t *testing.T, storage checkpoint.Storage, opts dedup.Options) *incChain {
	t.Helper()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	d, err := dedup.New(50*time.Second, opts)
	require.NoError(t, err)
	task, err := coord.Attach(context.Background(), pInc, map[string]checkpoint.Participant{"dedup": d})
	require.NoError(t, err)
	c := &incChain{t: t, coord: coord, task: task, d: d}
	t.Cleanup(c.close)
	return c
}

func (c *incChain) close() {
	c.task.Detach()
	_ = c.d.Close()
	_ = c.coord.Close()
}

// fullState restores the partition's newest checkpoint into a deduplicator
// that writes full snapshots, and returns its full snapshot: the state the
// checkpoint holds, in the one canonical encoding.
func fullState(t *testing.T, storage checkpoint.Storage, exact bool) (checkpoint.ID, []byte) {
	t.Helper()
	c := attachInc(t, storage, dedup.Options{ExactKeys: exact})
	defer c.close()
	require.NotNil(t, c.task.Restored())
	b, err := c.d.Snapshot(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, []byte("EODEDUP\x00\x01\x00"), b[:10], "not a full snapshot")
	return c.task.Restored().ID, b
}

// TestIncrementalMatchesFull drives an incremental deduplicator and one
// taking full snapshots with the same random sightings (keys that expire,
// come back, are extended), checkpoints and restarts. Every checkpoint,
// restored from its base and deltas, holds exactly the state the full
// snapshot held at that barrier (no key lost, none resurrected after it
// expired), compactions included; the answers after a restart are the
// same; and the stored objects stay bounded (deleted once no retained
// checkpoint needs them).
func TestIncrementalMatchesFull(t *testing.T) {
	ctx := context.Background()
	for _, exact := range []bool{false, true} {
		for _, upd := range []dedup.UpdateType{dedup.OnCreateAndWrite, dedup.OnReadAndWrite} {
			t.Run(fmt.Sprintf("exact=%v/%v", exact, upd), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(upd), 7))
				storage := checkpoint.NewMemStorage()
				opts := dedup.Options{Incremental: true, MaxDeltas: 3, ExactKeys: exact, UpdateType: upd}
				inc := attachInc(t, storage, opts)
				ref, err := dedup.New(50*time.Second, dedup.Options{ExactKeys: exact, UpdateType: upd})
				require.NoError(t, err)
				defer ref.Close()
				want := map[checkpoint.ID][]byte{}
				now := time.Unix(1_800_000_000, 0)
				var offset int64
				maxObjects := 0
				for op := range 6000 {
					switch r := rng.IntN(100); {
					case r < 88:
						key := fmt.Appendf(nil, "key-%d", rng.IntN(400))
						now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
						got, err := inc.d.Observe(key, now)
						require.NoError(t, err)
						exp, err := ref.Observe(key, now)
						require.NoError(t, err)
						require.Equal(t, exp, got, "op %d: %s", op, key)
						offset++
					case r < 98:
						require.NoError(t, inc.task.Checkpoint(ctx, nil, offset, checkpoint.Meta{}, nil))
						snap, err := ref.Snapshot(ctx, 0)
						require.NoError(t, err)
						cps, err := inc.coord.Store().List(ctx, pInc)
						require.NoError(t, err)
						want[cps[0]] = snap
						names, err := storage.List(ctx, "checkpoints/events/1/objects/")
						require.NoError(t, err)
						maxObjects = max(maxObjects, len(names))
						if rng.IntN(4) == 0 {
							time.Sleep(time.Millisecond) // let a compaction finish
						}
					default:
						// A restart from the newest checkpoint: what came
						// after it is lost and both sides go back to it.
						if len(want) == 0 {
							continue
						}
						inc.close()
						id, got := fullState(t, storage, exact)
						require.Equal(t, want[id], got, "op %d: checkpoint %d restored from base and deltas", op, id)
						inc = attachInc(t, storage, opts)
						require.NoError(t, ref.Restore(ctx, want[id]))
					}
				}
				require.NoError(t, inc.task.Checkpoint(ctx, nil, offset, checkpoint.Meta{}, nil))
				snap, err := ref.Snapshot(ctx, 0)
				require.NoError(t, err)
				inc.close()
				_, got := fullState(t, storage, exact)
				require.Equal(t, snap, got)
				// Keep 2 checkpoints of at most 1 base and 4*MaxDeltas
				// deltas each, plus one compaction's base in flight.
				assert.LessOrEqual(t, maxObjects, 2*(1+4*3)+1)
			})
		}
	}
}

// An incremental checkpoint writes a delta of the keys written since the
// last one, not the table: bytes in proportion to what changed.
func TestIncrementalWritesWhatChanged(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemStorage()
	c := attachInc(t, storage, dedup.Options{Incremental: true, MaxDeltas: 1000})
	now := time.Unix(1_800_000_000, 0)
	for i := range 10_000 {
		_, err := c.d.Observe(fmt.Appendf(nil, "k%d", i), now)
		require.NoError(t, err)
	}
	require.NoError(t, c.task.Checkpoint(ctx, nil, 1, checkpoint.Meta{}, nil))
	for i := range 100 {
		_, err := c.d.Observe(fmt.Appendf(nil, "new%d", i), now)
		require.NoError(t, err)
	}
	require.NoError(t, c.task.Checkpoint(ctx, nil, 2, checkpoint.Meta{}, nil))
	sizes := map[string]int{}
	names, err := storage.List(ctx, "checkpoints/events/1/")
	require.NoError(t, err)
	for _, n := range names {
		b, err := storage.Get(ctx, n)
		require.NoError(t, err)
		sizes[n[strings.LastIndexByte(n, '/')+1:]] = len(b)
	}
	assert.Equal(t, 28+10_000*20+4, sizes["base-00000000000000000001"])
	assert.Equal(t, 28+100*20+4, sizes["delta-00000000000000000002"])
	for n, s := range sizes {
		if strings.HasSuffix(n, ".ckpt") {
			assert.Less(t, s, 1000, n)
		}
	}
}
