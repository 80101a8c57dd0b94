package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/s3storage"
	"github.com/exactlyonce/exactlyonce/testkit/s3kit"
)

// sharedStorages are the Storages the revoked-owner tests run on: the
// in-memory one, a directory (FSStorage) and S3 (versitygw, or
// $S3_ENDPOINT), the real storage of a deployment that moves partitions
// between machines.
func sharedStorages(t *testing.T) map[string]func(t *testing.T) checkpoint.Storage {
	return map[string]func(t *testing.T) checkpoint.Storage{
		"mem": func(*testing.T) checkpoint.Storage { return checkpoint.NewMemoryStorage() },
		"fs": func(t *testing.T) checkpoint.Storage {
			s, err := checkpoint.NewFSStorage(t.TempDir())
			require.NoError(t, err)
			return s
		},
		"s3": func(t *testing.T) checkpoint.Storage {
			c := s3kit.Bucket(t)
			s, err := s3storage.New(c.Client(), c.Bucket, s3storage.Options{Prefix: c.Prefix})
			require.NoError(t, err)
			return s
		},
	}
}

// owner is one owner of p0: a coordinator of its own over the shared
// storage, a counter participant and its consumer-group generation.
type owner struct {
	t    *testing.T
	gen  int64
	c    *counter
	task *checkpoint.Task
}

func attachOwner(t *testing.T, storage checkpoint.Storage, gen int64) *owner {
	t.Helper()
	o := &owner{t: t, gen: gen, c: &counter{}}
	var err error
	o.task, err = newCoord(t, storage, checkpoint.Options{}).Attach(context.Background(), p0,
		map[string]checkpoint.Participant{"c": o.c})
	require.NoError(t, err)
	t.Cleanup(o.task.Detach)
	return o
}

// checkpoint takes a checkpoint at next with the counter at n; commits
// counts the offset commits.
func (o *owner) checkpoint(n uint64, next int64, commits *int) error {
	o.c.n = n
	return o.task.Checkpoint(context.Background(), nil, next, checkpoint.Meta{Generation: o.gen},
		func(context.Context, int64) error { *commits++; return nil })
}

// decline lets a barrier use an ID without a checkpoint, as a declined
// one does: a revoked owner's IDs run ahead of the next owner's.
func (o *owner) decline() {
	o.c.snapErr = fmt.Errorf("busy: %w", checkpoint.ErrDeclined)
	require.ErrorIs(o.t, o.checkpoint(0, 0, new(int)), checkpoint.ErrDeclined)
	o.c.snapErr = nil
}

// checkpointNames lists p0's checkpoint files by name.
func checkpointNames(t *testing.T, storage checkpoint.Storage) []string {
	t.Helper()
	names, err := storage.List(context.Background(), checkpoint.DefaultPrefix+"/t/0/")
	require.NoError(t, err)
	var out []string
	for _, n := range names {
		if strings.HasSuffix(n, ".ckpt") {
			out = append(out, n[strings.LastIndex(n, "/")+1:])
		}
	}
	return out
}

// TestRevokedOwnerSaveRefused: an owner revoked without knowing it (gen 1)
// goes on after the partition's next owner (gen 2) restored and saved its
// first checkpoint; the revoked owner's next checkpoint, under a higher ID
// (its declined barriers used IDs), is refused with ErrSuperseded: no
// file, no offset commit, no notification. Restore takes the next owner's.
func TestRevokedOwnerSaveRefused(t *testing.T) {
	for name, newStorage := range sharedStorages(t) {
		t.Run(name, func(t *testing.T) {
			storage := newStorage(t)
			commits := 0
			zombie := attachOwner(t, storage, 1)
			require.NoError(t, zombie.checkpoint(1, 10, &commits))
			zombie.decline()
			zombie.decline()

			next := attachOwner(t, storage, 2)
			require.Equal(t, checkpoint.ID(1), next.task.Restored().ID)
			require.NoError(t, next.checkpoint(2, 20, &commits))

			commits = 0
			err := zombie.checkpoint(99, 40, &commits)
			require.ErrorIs(t, err, checkpoint.ErrSuperseded)
			var cerr *checkpoint.Error
			require.ErrorAs(t, err, &cerr)
			assert.Equal(t, "save", cerr.Op)
			assert.Equal(t, checkpoint.ID(4), cerr.ID)
			assert.Zero(t, commits, "no offset moved")
			assert.Equal(t, []checkpoint.ID{1}, zombie.c.completed, "not notified")
			assert.ElementsMatch(t, []string{"00000000000000000001-0000000001.ckpt", "00000000000000000002-0000000002.ckpt"},
				checkpointNames(t, storage), "nothing written")

			later := attachOwner(t, storage, 3)
			assert.Equal(t, checkpoint.ID(2), later.task.Restored().ID)
			assert.Equal(t, uint64(2), later.c.n)
		})
	}
}

// raceStorage runs before once, just before the first checkpoint file's
// write through it: a revoked owner's save whose check passed before the
// next owner's first save and whose write lands after it.
type raceStorage struct {
	checkpoint.Storage
	before func()
}

func (s *raceStorage) Put(ctx context.Context, name string, data []byte) error {
	if f := s.before; f != nil && strings.HasSuffix(name, ".ckpt") {
		s.before = nil
		f()
	}
	return s.Storage.Put(ctx, name, data)
}

// TestRestoreSkipsRevokedOwnersLateCheckpoint: a revoked owner's save races
// the next owner's first one and lands after it, under a higher ID. Restore
// skips it for the next owner's checkpoint, whose output may be committed
// already (the revoked one's is behind it), and the revoked owner's next
// save is refused.
func TestRestoreSkipsRevokedOwnersLateCheckpoint(t *testing.T) {
	for name, newStorage := range sharedStorages(t) {
		t.Run(name, func(t *testing.T) {
			storage := newStorage(t)
			commits := 0
			zombie := attachOwner(t, storage, 1)
			require.NoError(t, zombie.checkpoint(1, 10, &commits))
			zombie.decline()

			race := &raceStorage{Storage: storage}
			zombie2 := attachOwner(t, race, 1) // the same owner, its chain restarted
			require.Equal(t, checkpoint.ID(1), zombie2.task.Restored().ID)
			zombie2.decline()
			race.before = func() {
				next := attachOwner(t, storage, 2)
				require.NoError(t, next.checkpoint(2, 20, &commits))
			}
			require.NoError(t, zombie2.checkpoint(50, 50, &commits), "the check came before the next owner's save")
			assert.ElementsMatch(t, []string{"00000000000000000001-0000000001.ckpt", "00000000000000000002-0000000002.ckpt",
				"00000000000000000003-0000000001.ckpt"}, checkpointNames(t, storage))

			later := attachOwner(t, storage, 3)
			assert.Equal(t, checkpoint.ID(2), later.task.Restored().ID, "the revoked owner's checkpoint 3 is skipped")
			assert.Equal(t, uint64(2), later.c.n)
			cp, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
			require.NoError(t, err)
			latest, err := cp.Latest(context.Background(), p0)
			require.NoError(t, err)
			assert.Equal(t, int64(20), latest.NextOffset)

			require.ErrorIs(t, zombie2.checkpoint(60, 60, &commits), checkpoint.ErrSuperseded)
		})
	}
}

// TestGroupCreatedAnew: a consumer group deleted and created again numbers
// its generations from 1 anew. Its first owner restores the old group's
// newest checkpoint (generation 7) and goes on: its saves are not refused,
// and restore takes its checkpoints, which descend from the old ones.
// A checkpoint of the old group it passed over (its output lost) refuses
// nothing either.
func TestGroupCreatedAnew(t *testing.T) {
	storage := checkpoint.NewMemoryStorage()
	commits := 0
	old := attachOwner(t, storage, 7)
	for i := range uint64(3) {
		require.NoError(t, old.checkpoint(i+1, int64(10*(i+1)), &commits))
	}
	// Generation 1 of the new group, restored from checkpoint 2 past the
	// lost 3 of generation 7; declines push its IDs past 3.
	ex := &expiring{lost: map[uint64]bool{3: true}}
	task, err := newCoord(t, storage, checkpoint.Options{}).Attach(context.Background(), p0, map[string]checkpoint.Participant{"c": ex})
	require.NoError(t, err)
	defer task.Detach()
	require.Equal(t, checkpoint.ID(2), task.Restored().ID)
	meta := checkpoint.Meta{Generation: 1}
	ex.snapErr = fmt.Errorf("busy: %w", checkpoint.ErrDeclined)
	require.ErrorIs(t, task.Checkpoint(context.Background(), nil, 0, meta, nil), checkpoint.ErrDeclined)
	require.ErrorIs(t, task.Checkpoint(context.Background(), nil, 0, meta, nil), checkpoint.ErrDeclined)
	ex.snapErr = nil
	ex.n = 40
	require.NoError(t, task.Checkpoint(context.Background(), nil, 40, meta, nil), "checkpoint 3 of generation 7 was there at Attach")
	ex.n = 50
	require.NoError(t, task.Checkpoint(context.Background(), nil, 50, meta, nil))
	task.Detach()

	later := attachOwner(t, storage, 2)
	assert.Equal(t, checkpoint.ID(6), later.task.Restored().ID)
	assert.Equal(t, uint64(50), later.c.n)
}

// TestRestoreSkipsRevokedOwnersLineage: a revoked owner that does not
// check before it saves (a release before ErrSuperseded, in a rolling
// upgrade) goes on from its own late checkpoint: 3 descends from 1 and 4
// from 3, both saved after the next owner's 2. Restore follows the
// lineage within the revoked generation back to 1 and skips both.
func TestRestoreSkipsRevokedOwnersLineage(t *testing.T) {
	for name, newStorage := range sharedStorages(t) {
		t.Run(name, func(t *testing.T) {
			storage := newStorage(t)
			commits := 0
			zombie := attachOwner(t, storage, 1)
			require.NoError(t, zombie.checkpoint(1, 10, &commits))
			next := attachOwner(t, storage, 2)
			require.NoError(t, next.checkpoint(2, 20, &commits))
			store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 10})
			require.NoError(t, err)
			for _, cp := range []*checkpoint.Checkpoint{
				{ID: 3, Parent: 1, NextOffset: 30},
				{ID: 4, Parent: 3, NextOffset: 40},
			} {
				cp.Partition, cp.Generation = p0, 1
				cp.States = map[string][]byte{"c": binary.BigEndian.AppendUint64(nil, uint64(cp.NextOffset))}
				name, err := store.Name(cp)
				require.NoError(t, err)
				data, err := checkpoint.Encode(cp)
				require.NoError(t, err)
				require.NoError(t, storage.Put(context.Background(), name, data))
			}

			later := attachOwner(t, storage, 3)
			assert.Equal(t, checkpoint.ID(2), later.task.Restored().ID)
			assert.Equal(t, uint64(2), later.c.n)
		})
	}
}
