package checkpoint_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
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

// countingStorage counts the bytes written to a Storage, streamed or not.
type countingStorage struct {
	checkpoint.Storage
	written atomic.Int64
}

func (s *countingStorage) Put(ctx context.Context, name string, data []byte) error {
	s.written.Add(int64(len(data)))
	return s.Storage.Put(ctx, name, data)
}

func (s *countingStorage) PutStream(ctx context.Context, name string, write func(io.Writer) error) error {
	return checkpoint.PutStream(ctx, s.Storage, name, func(w io.Writer) error {
		return write(writerFunc(func(p []byte) (int, error) {
			s.written.Add(int64(len(p)))
			return w.Write(p)
		}))
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// BenchmarkCheckpointDedupChanged measures the checkpoints of a dedup
// participant holding 1 and 10 million keys when 1% of them changed since
// the previous checkpoint, with full snapshots (the baseline) and with
// incremental ones, on FSStorage with fsync: ns/op is the time the chain is
// blocked by one checkpoint (the compactions run beside it), B/op and
// allocs/op its allocations, written-B/op the bytes it wrote to storage
// (compactions included), and restore-ms the time to restore the last
// checkpoint into a new deduplicator.
func BenchmarkCheckpointDedupChanged(b *testing.B) {
	for _, keys := range []int{1_000_000, 10_000_000} {
		for _, incremental := range []bool{false, true} {
			name := fmt.Sprintf("keys=%d/full", keys)
			if incremental {
				name = fmt.Sprintf("keys=%d/incremental", keys)
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				d, err := dedup.New(time.Hour, dedup.Options{ExpectedKeys: keys, Incremental: incremental})
				require.NoError(b, err)
				defer d.Close()
				t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				var key [16]byte
				next := 0
				observe := func(n int) {
					for range n {
						binary.BigEndian.PutUint64(key[:], uint64(next))
						next++
						_, err := d.Observe(key[:], t0)
						require.NoError(b, err)
					}
				}
				observe(keys)
				fs, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "s"))
				require.NoError(b, err)
				storage := &countingStorage{Storage: fs}
				store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
				require.NoError(b, err)
				coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
				require.NoError(b, err)
				defer coord.Close()
				task, err := coord.Attach(ctx, p0, map[string]checkpoint.Participant{"dedup": d})
				require.NoError(b, err)
				defer task.Detach()
				// The first checkpoint writes the whole state either way
				// (an incremental chain's base): not measured.
				require.NoError(b, task.Checkpoint(ctx, nil, 0, checkpoint.Meta{}, nil))
				storage.written.Store(0)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 1; b.Loop(); i++ {
					b.StopTimer()
					observe(keys / 100)
					b.StartTimer()
					require.NoError(b, task.Checkpoint(ctx, nil, int64(i), checkpoint.Meta{}, nil))
				}
				b.StopTimer()
				b.ReportMetric(float64(storage.written.Load())/float64(b.N), "written-B/op")
				// A restart: restore the newest checkpoint into a new
				// deduplicator (base and deltas, or the full snapshot).
				d2, err := dedup.New(time.Hour, dedup.Options{ExpectedKeys: keys, Incremental: incremental})
				require.NoError(b, err)
				defer d2.Close()
				start := time.Now()
				task2, err := coord.Attach(ctx, checkpoint.TopicPartition{Topic: p0.Topic, Partition: p0.Partition}, map[string]checkpoint.Participant{"dedup": d2})
				require.NoError(b, err)
				b.ReportMetric(float64(time.Since(start).Milliseconds()), "restore-ms")
				task2.Detach()
				require.Equal(b, d.Len(), d2.Len())
			})
		}
	}
}
