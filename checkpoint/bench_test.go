package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/dedup"
)

// BenchmarkCheckpointDedup measures one checkpoint of a partition whose
// chain holds a dedup participant with 1 and 10 million keys: snapshot,
// encode, write with fsync to FSStorage, prune.
func BenchmarkCheckpointDedup(b *testing.B) {
	for _, keys := range []int{1_000_000, 10_000_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			ctx := context.Background()
			d, err := dedup.New(time.Hour, dedup.Options{ExpectedKeys: keys})
			require.NoError(b, err)
			defer d.Close()
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			var key [16]byte
			for i := range keys {
				binary.BigEndian.PutUint64(key[:], uint64(i))
				_, err := d.Observe(key[:], t0)
				require.NoError(b, err)
			}
			storage, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "s"))
			require.NoError(b, err)
			store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 1})
			require.NoError(b, err)
			coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
			require.NoError(b, err)
			defer coord.Close()
			task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"dedup": d})
			require.NoError(b, err)
			defer task.Detach()

			b.Run("snapshot-only", func(b *testing.B) { // baseline: the participant's own cost
				b.ReportAllocs()
				for b.Loop() {
					_, err := d.Snapshot(ctx, 1)
					require.NoError(b, err)
				}
			})
			b.Run("checkpoint", func(b *testing.B) {
				benchCheckpoint(b, ctx, task, storage, keys)
			})
		})
	}
}

func benchCheckpoint(b *testing.B, ctx context.Context, task *checkpoint.Task, storage checkpoint.Storage, keys int) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		require.NoError(b, task.Checkpoint(ctx, nil, int64(i), checkpoint.Meta{}, nil))
	}
	b.StopTimer()
	names, err := storage.List(ctx, "")
	require.NoError(b, err)
	data, err := storage.Get(ctx, names[len(names)-1])
	require.NoError(b, err)
	b.ReportMetric(float64(len(data)), "bytes/checkpoint")
	b.ReportMetric(float64(len(data))/float64(keys), "bytes/key")
}

// BenchmarkFSStorage is the baseline for other Storages' benchmarks.
func BenchmarkFSStorage(b *testing.B) {
	checkpointtest.BenchmarkStorage(b, func(b *testing.B) checkpoint.Storage {
		s, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "s"))
		require.NoError(b, err)
		return s
	})
}
