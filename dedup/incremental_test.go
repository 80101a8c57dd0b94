package dedup_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/internal/golden"
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
				storage := checkpoint.NewMemoryStorage()
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
	storage := checkpoint.NewMemoryStorage()
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
	require.NoError(t, c.task.Checkpoint(ctx, nil, 2, checkpoint.Meta{Generation: 7}, nil))
	sizes := map[string]int{}
	names, err := storage.List(ctx, "checkpoints/events/1/")
	require.NoError(t, err)
	for _, n := range names {
		b, err := storage.Get(ctx, n)
		require.NoError(t, err)
		sizes[n[strings.LastIndexByte(n, '/')+1:]] = len(b)
	}
	assert.Equal(t, 28+10_000*20+4, sizes["base-00000000000000000001-0000000000"])
	// Object names carry the generation that wrote them.
	assert.Equal(t, 28+100*20+4, sizes["delta-00000000000000000002-0000000007"])
	for n, s := range sizes {
		if strings.HasSuffix(n, ".ckpt") {
			assert.Less(t, s, 1000, n)
		}
	}
}

// buildChain checkpoints keys into a base and two deltas on partition pInc
// and returns the storage and the newest checkpoint's manifest.
func buildChain(t testing.TB, exact bool) (*checkpoint.MemoryStorage, []byte) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()
	d, err := dedup.New(time.Hour, dedup.Options{Incremental: true, ExactKeys: exact, MaxDeltas: 100})
	require.NoError(t, err)
	defer d.Close()
	task, err := coord.Attach(ctx, pInc, map[string]checkpoint.Participant{"dedup": d})
	require.NoError(t, err)
	defer task.Detach()
	now := time.Unix(1_800_000_000, 0)
	for round := range 3 {
		// A base of 100 keys and deltas of 5: no compaction starts.
		for i := range 5 + 95*max(0, 1-round) {
			_, err := d.Observe(fmt.Appendf(nil, "key-%d-%d", round, i), now.Add(time.Duration(round)*time.Minute))
			require.NoError(t, err)
		}
		require.NoError(t, task.Checkpoint(ctx, nil, int64(round), checkpoint.Meta{}, nil))
	}
	cp, err := store.Latest(ctx, pInc)
	require.NoError(t, err)
	require.Len(t, cp.Objects, 3)
	return storage, cp.States["dedup"]
}

// withObjects attaches a fresh deduplicator to partition 2 holding a copy
// of the objects of partition pInc (names): Restore can read them, and
// Attach restores nothing.
func withObjects(t *testing.T, storage checkpoint.Storage, names []string) *incChain {
	t.Helper()
	ctx := context.Background()
	for _, n := range names {
		b, err := storage.Get(ctx, n)
		if errors.Is(err, checkpoint.ErrNotFound) {
			require.NoError(t, storage.Delete(ctx, toP2(n)))
			continue
		}
		require.NoError(t, err)
		require.NoError(t, storage.Put(ctx, toP2(n), b))
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	d, err := dedup.New(time.Hour, dedup.Options{ExactKeys: false})
	require.NoError(t, err)
	task, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 2},
		map[string]checkpoint.Participant{"dedup": d})
	require.NoError(t, err)
	c := &incChain{t: t, coord: coord, task: task, d: d}
	t.Cleanup(c.close)
	return c
}

func toP2(name string) string { return strings.Replace(name, "/events/1/", "/events/2/", 1) }

// A damaged or missing base or delta is refused with an error wrapping
// ErrCorrupt or checkpoint.ErrNotFound, and loads nothing.
func TestIncrementalRestoreRefusesDamage(t *testing.T) {
	ctx := context.Background()
	storage, manifest := buildChain(t, false)
	const dir = "checkpoints/events/1/objects/dedup/"
	names, err := storage.List(ctx, dir)
	require.NoError(t, err)
	require.Len(t, names, 3)
	for _, name := range names {
		good, err := storage.Get(ctx, name)
		require.NoError(t, err)
		tests := []struct {
			give    string
			damage  func() error
			wantErr error
		}{
			{"bit flip", func() error {
				b := append([]byte(nil), good...)
				b[len(b)/2] ^= 1
				return storage.Put(ctx, name, b)
			}, dedup.ErrCorrupt},
			{"truncated", func() error { return storage.Put(ctx, name, good[:len(good)-1]) }, dedup.ErrCorrupt},
			{"missing", func() error { return storage.Delete(ctx, name) }, checkpoint.ErrNotFound},
			{"another intact object", func() error {
				other := names[0]
				if other == name {
					other = names[1]
				}
				b, err := storage.Get(ctx, other)
				if err != nil {
					return err
				}
				return storage.Put(ctx, name, b)
			}, dedup.ErrCorrupt},
		}
		for _, tt := range tests {
			t.Run(name[len(dir):]+"/"+tt.give, func(t *testing.T) {
				require.NoError(t, tt.damage())
				defer func() { require.NoError(t, storage.Put(ctx, name, good)) }()
				c := withObjects(t, storage, names)
				_, err := c.d.Observe([]byte("sentinel"), time.Unix(1_800_000_000, 0))
				require.NoError(t, err)
				before, err := c.d.Snapshot(ctx, 0)
				require.NoError(t, err)
				err = c.d.Restore(ctx, manifest)
				require.ErrorIs(t, err, tt.wantErr)
				after, err := c.d.Snapshot(ctx, 0)
				require.NoError(t, err)
				assert.Equal(t, before, after, "a refused restore changed the state")
			})
		}
	}
	// Without the checkpoint's objects a manifest cannot be read.
	d, err := dedup.New(time.Hour, dedup.Options{})
	require.NoError(t, err)
	defer d.Close()
	assert.ErrorIs(t, d.Restore(ctx, manifest), dedup.ErrIncompatible)
}

// A full snapshot of an earlier release (the version 1 golden files) still
// restores into an incremental deduplicator, whose next checkpoint writes a
// base holding the same state.
func TestIncrementalRestoresFullSnapshot(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"snapshot_v1.golden", "snapshot_v1_exact.golden"} {
		exact := strings.Contains(name, "exact")
		golden, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		storage := checkpoint.NewMemoryStorage()
		c := attachInc(t, storage, dedup.Options{Incremental: true, ExactKeys: exact})
		require.NoError(t, c.d.Restore(ctx, golden))
		require.NoError(t, c.task.Checkpoint(ctx, nil, 1, checkpoint.Meta{}, nil))
		c.close()
		_, got := fullState(t, storage, exact)
		assert.Equal(t, golden, got, name)
	}
}

// FuzzIncrementalRestore feeds Restore arbitrary manifests and an arbitrary
// delta object: it never panics, a refused input leaves the state as it
// was, and an accepted one leaves a working deduplicator.
func FuzzIncrementalRestore(f *testing.F) {
	ctx := context.Background()
	storage, manifest := buildChain(f, true)
	names, err := storage.List(ctx, "checkpoints/events/1/objects/dedup/")
	require.NoError(f, err)
	delta, err := storage.Get(ctx, names[len(names)-1])
	require.NoError(f, err)
	f.Add(manifest, delta)
	f.Add(manifest[:len(manifest)-5], delta[:10])
	fixCRC := func(b []byte) []byte {
		if len(b) < 4 {
			return b
		}
		b = append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:len(b)-4], crc32.MakeTable(crc32.Castagnoli)))
		return b
	}
	f.Fuzz(func(t *testing.T, m, obj []byte) {
		for _, fix := range []bool{false, true} {
			if fix {
				m, obj = fixCRC(m), fixCRC(obj)
			}
			// A fresh partition with the chain's objects, the delta replaced.
			s := checkpoint.NewMemoryStorage()
			for _, n := range names {
				b, err := storage.Get(ctx, n)
				require.NoError(t, err)
				require.NoError(t, s.Put(ctx, strings.Replace(n, "/events/1/", "/events/2/", 1), b))
			}
			require.NoError(t, s.Put(ctx, strings.Replace(names[len(names)-1], "/events/1/", "/events/2/", 1), obj))
			store, err := checkpoint.NewStore(s, checkpoint.StoreOptions{})
			require.NoError(t, err)
			coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
			require.NoError(t, err)
			d, err := dedup.New(time.Hour, dedup.Options{ExactKeys: true})
			require.NoError(t, err)
			task, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: "events", Partition: 2},
				map[string]checkpoint.Participant{"dedup": d})
			require.NoError(t, err)
			_, err = d.Observe([]byte("sentinel"), time.Unix(1_800_000_000, 0))
			require.NoError(t, err)
			before, err := d.Snapshot(ctx, 0)
			require.NoError(t, err)
			if err := d.Restore(ctx, m); err != nil {
				after, err := d.Snapshot(ctx, 0)
				require.NoError(t, err)
				require.Equal(t, before, after, "a refused input changed the state")
			} else {
				_, err = d.Observe([]byte("after"), d.Clock())
				if !errors.Is(err, dedup.ErrTimeOutOfRange) {
					require.NoError(t, err)
				}
			}
			task.Detach()
			_ = d.Close()
			_ = coord.Close()
		}
	})
}

// A participant name that cannot name an object directory still attaches:
// the deduplicator then writes full snapshots.
func TestIncrementalWithoutObjectsWritesFull(t *testing.T) {
	ctx := context.Background()
	store, err := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	require.NoError(t, err)
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	require.NoError(t, err)
	defer coord.Close()
	d, err := dedup.New(time.Hour, dedup.Options{Incremental: true})
	require.NoError(t, err)
	defer d.Close()
	task, err := coord.Attach(ctx, pInc, map[string]checkpoint.Participant{"dedup:events": d})
	require.NoError(t, err)
	defer task.Detach()
	_, err = d.Observe([]byte("k"), time.Unix(1_800_000_000, 0))
	require.NoError(t, err)
	require.NoError(t, task.Checkpoint(ctx, nil, 1, checkpoint.Meta{}, nil))
	cp, err := store.Latest(ctx, pInc)
	require.NoError(t, err)
	assert.Empty(t, cp.Objects)
	assert.Equal(t, []byte("EODEDUP\x00\x01\x00"), cp.States["dedup:events"][:10])
}

// gatedStorage holds every write of a compaction's base (an object named
// base-… after the first) until the gate opens.
type gatedStorage struct {
	*checkpoint.MemoryStorage
	gate   chan struct{}
	bases  atomic.Int32
	queued chan string
}

func (s *gatedStorage) PutStream(ctx context.Context, name string, write func(io.Writer) error) error {
	if strings.Contains(name, "/objects/dedup/base-") && s.bases.Add(1) > 1 {
		s.queued <- name
		<-s.gate
	}
	return s.MemoryStorage.PutStream(ctx, name, write)
}

// A barrier never waits for a compaction it does not need: with the
// compaction's write held, checkpoints go on completing with deltas, up to
// four times MaxDeltas; the next one adopts the compaction once it is done.
func TestCheckpointsDoNotWaitForCompaction(t *testing.T) {
	ctx := context.Background()
	storage := &gatedStorage{MemoryStorage: checkpoint.NewMemoryStorage(), gate: make(chan struct{}), queued: make(chan string, 1)}
	c := attachInc(t, storage, dedup.Options{Incremental: true, MaxDeltas: 2})
	now := time.Unix(1_800_000_000, 0)
	next := 0
	checkpointWith := func(keys int) {
		for range keys {
			_, err := c.d.Observe(fmt.Appendf(nil, "k%d", next), now)
			require.NoError(t, err)
			next++
		}
		require.NoError(t, c.task.Checkpoint(ctx, nil, int64(next), checkpoint.Meta{}, nil))
	}
	checkpointWith(1000) // the base
	checkpointWith(10)
	checkpointWith(10) // MaxDeltas deltas: a compaction starts, and is held
	compaction := <-storage.queued
	for range 4*2 - 2 - 1 { // up to one short of 4*MaxDeltas deltas
		checkpointWith(10)
	}
	cp, err := c.coord.Store().Latest(ctx, pInc)
	require.NoError(t, err)
	assert.Len(t, cp.Objects, 1+7, "base and deltas while the compaction is held")
	assert.NotContains(t, cp.Objects, "dedup/"+compaction[strings.LastIndexByte(compaction, '/')+1:])

	close(storage.gate)
	// The next checkpoints adopt the new base once the compaction is done.
	require.Eventually(t, func() bool {
		checkpointWith(1)
		cp, err := c.coord.Store().Latest(ctx, pInc)
		require.NoError(t, err)
		return cp.Objects[0] == "dedup/"+compaction[strings.LastIndexByte(compaction, '/')+1:]
	}, 10*time.Second, time.Millisecond)
	c.close()
	_, got := fullState(t, storage, false)
	ref, err := dedup.New(50*time.Second, dedup.Options{})
	require.NoError(t, err)
	defer ref.Close()
	for i := range next {
		_, err := ref.Observe(fmt.Appendf(nil, "k%d", i), now)
		require.NoError(t, err)
	}
	want, err := ref.Snapshot(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// TestManifestGolden pins the version 2 manifest: the bytes an incremental
// checkpoint of a fixed input returns (a base and two deltas, each named
// with its size, CRC and entry count). Run with -update to rewrite it after
// a deliberate format change, which needs a new version.
func TestManifestGolden(t *testing.T) {
	_, got := buildChain(t, false)
	want := golden.Check(t, "manifest_v2.golden", got)
	d, err := dedup.New(time.Hour, dedup.Options{})
	require.NoError(t, err)
	defer d.Close()
	refs, err := d.References(want)
	require.NoError(t, err)
	assert.Equal(t, []string{"base-00000000000000000001-0000000000", "delta-00000000000000000002-0000000000",
		"delta-00000000000000000003-0000000000"}, refs)
}

// decliner declines every barrier while decline is set.
type decliner struct{ decline atomic.Bool }

func (p *decliner) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	if p.decline.Load() {
		return nil, fmt.Errorf("busy: %w", checkpoint.ErrDeclined)
	}
	return []byte("ok"), nil
}
func (p *decliner) Restore(context.Context, []byte) error                    { return nil }
func (p *decliner) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// A deduplicator that starts empty writes its first base from its change
// log in the asynchronous part, not from the table at the barrier: the
// keys observed while that part runs are not in the checkpoint; and a
// first checkpoint aborted after the barrier (another participant
// declined) leaves its log to the next one, which writes the base with
// every key before its own barrier. Restored, the checkpoint holds
// exactly those keys.
func TestIncrementalFirstBaseAfterTheBarrier(t *testing.T) {
	ctx := context.Background()
	storage := checkpoint.NewMemoryStorage()
	attach := func(d *dedup.Deduplicator, gate *decliner) (*checkpoint.Coordinator, *checkpoint.Task) {
		store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
		require.NoError(t, err)
		coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
		require.NoError(t, err)
		task, err := coord.Attach(ctx, pInc, map[string]checkpoint.Participant{"dedup": d, "gate": gate})
		require.NoError(t, err)
		return coord, task
	}
	d, err := dedup.New(50*time.Second, dedup.Options{Incremental: true})
	require.NoError(t, err)
	defer d.Close()
	gate := &decliner{}
	coord, task := attach(d, gate)
	now := time.Unix(1_800_000_000, 0)
	observe := func(from, to int) {
		for i := from; i < to; i++ {
			_, err := d.Observe(fmt.Appendf(nil, "k%d", i), now)
			require.NoError(t, err)
		}
	}
	observe(0, 1000)
	gate.decline.Store(true)
	require.ErrorIs(t, task.Begin(ctx, nil, 1000, checkpoint.Meta{}, nil), checkpoint.ErrDeclined)
	gate.decline.Store(false)
	observe(1000, 1100)
	require.NoError(t, task.Begin(ctx, nil, 1100, checkpoint.Meta{}, nil))
	observe(1100, 1200) // after the barrier, while the base is written: not in the checkpoint
	require.NoError(t, task.Wait(ctx))
	task.Detach()
	require.NoError(t, coord.Close())

	restored, err := dedup.New(50*time.Second, dedup.Options{})
	require.NoError(t, err)
	defer restored.Close()
	coord, task = attach(restored, &decliner{})
	defer coord.Close()
	defer task.Detach()
	require.Equal(t, int64(1100), task.Restored().NextOffset)
	got, err := restored.Snapshot(ctx, 0)
	require.NoError(t, err)
	ref, err := dedup.New(50*time.Second, dedup.Options{})
	require.NoError(t, err)
	defer ref.Close()
	for i := range 1100 {
		_, err := ref.Observe(fmt.Appendf(nil, "k%d", i), now)
		require.NoError(t, err)
	}
	want, err := ref.Snapshot(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the keys before the second barrier, no more")
}
