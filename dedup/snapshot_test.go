package dedup_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/internal/golden"
)

// goldenState builds the state pinned by the golden files: five keys at
// different times, one of them expired, with a 24-hour TTL.
func goldenState(t *testing.T, exact bool) *dedup.Deduplicator {
	d := newDedup(t, 24*time.Hour, dedup.Options{ExactKeys: exact})
	steps := []struct {
		key string
		at  time.Duration
	}{
		{key: "expired", at: 0},
		{key: "org-1:github:a", at: 2 * time.Hour},
		{key: "org-1:github:b", at: 10 * time.Hour},
		{key: "org-2:jira:c", at: 20*time.Hour + 500*time.Millisecond},
		{key: "org-2:jira:d", at: 25 * time.Hour},
	}
	for _, s := range steps {
		p := []string{s.key}
		observe(t, d, string(dedup.Key(p...)), t0.Add(s.at))
	}
	return d
}

// TestSnapshotGolden pins snapshot format version 1: the bytes written for a
// fixed state, and that those bytes still restore to the same answers. Run
// with -update to rewrite the files after a deliberate format change (which
// needs a new version number).
func TestSnapshotGolden(t *testing.T) {
	for _, exact := range []bool{false, true} {
		name := "snapshot_v1.golden"
		if exact {
			name = "snapshot_v1_exact.golden"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			got, err := goldenState(t, exact).Snapshot(ctx, 1)
			require.NoError(t, err)
			want := golden.Check(t, name, got)

			d := newDedup(t, time.Hour, dedup.Options{ExactKeys: exact})
			require.NoError(t, d.Restore(ctx, want))
			assert.Equal(t, t0.Add(25*time.Hour), d.Clock())
			assert.Equal(t, 4, d.Len())
			for _, k := range []string{"org-1:github:a", "org-1:github:b", "org-2:jira:c", "org-2:jira:d"} {
				assert.True(t, d.Contains(dedup.Key(k)), k)
			}
			assert.False(t, d.Contains(dedup.Key("expired")))
			// org-1:github:a was written at 2h and expires at 26h.
			first, err := d.Observe(dedup.Key("org-1:github:a"), t0.Add(26*time.Hour-time.Second))
			require.NoError(t, err)
			assert.False(t, first)
			first, err = d.Observe(dedup.Key("org-1:github:a"), t0.Add(26*time.Hour))
			require.NoError(t, err)
			assert.True(t, first)
		})
	}
}

// FuzzRestore feeds arbitrary bytes to Restore. It must never panic, a
// rejected input must leave the state unchanged, and an accepted input must be
// canonical: snapshotting the restored state returns the same bytes. The seed
// corpus is in testdata/fuzz/FuzzRestore.
func FuzzRestore(f *testing.F) {
	for _, name := range []string{"snapshot_v1.golden", "snapshot_v1_exact.golden", "manifest_v2.golden"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("EODEDUP\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRestore(t, data)
		// The checksum stops nearly every mutation; fix it up so that the
		// decoder behind it is fuzzed too.
		if len(data) >= 4 {
			fixed := append([]byte(nil), data...)
			body := fixed[:len(fixed)-4]
			binary.LittleEndian.PutUint32(fixed[len(body):], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
			checkRestore(t, fixed)
		}
	})
}

func checkRestore(t *testing.T, data []byte) {
	ctx := context.Background()
	for _, exact := range []bool{false, true} {
		d, err := dedup.New(time.Hour, dedup.Options{ExactKeys: exact})
		require.NoError(t, err)
		observe(t, d, "sentinel", t0)
		before, err := d.Snapshot(ctx, 1)
		require.NoError(t, err)
		if err := d.Restore(ctx, data); err != nil {
			after, err := d.Snapshot(ctx, 2)
			require.NoError(t, err)
			require.Equal(t, before, after, "rejected input changed the state")
			continue
		}
		again, err := d.Snapshot(ctx, 2)
		require.NoError(t, err)
		if exact || !hasExactFlag(data) {
			require.Equal(t, data, again, "accepted a non-canonical snapshot")
		}
		// The restored state keeps working.
		_, err = d.Observe([]byte(fmt.Sprint(len(data))), d.Clock())
		if !errors.Is(err, dedup.ErrTimeOutOfRange) {
			require.NoError(t, err)
		}
		require.NoError(t, d.Close())
	}
}

func hasExactFlag(b []byte) bool { return len(b) > 10 && b[10]&1 != 0 }

// rebuildLog counts the table rebuilds a deduplicator reports.
type rebuildLog struct{ n atomic.Int32 }

func (l *rebuildLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *rebuildLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "dedup: table rebuilt" {
		l.n.Add(1)
	}
	return nil
}
func (l *rebuildLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *rebuildLog) WithGroup(string) slog.Handler      { return l }

// TestRestoreLeavesRoomToGrow proves a restored table takes new keys
// without a rebuild: sized for exactly its entries it sat at its load
// limit, and the first new key after a restart rehashed the whole table (a
// pause of seconds at ten million keys). Full and incremental restores.
func TestRestoreLeavesRoomToGrow(t *testing.T) {
	const keys = 40_000
	ctx := context.Background()
	fill := func(t *testing.T, d *dedup.Deduplicator, from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			first, err := d.Observe(fmt.Appendf(nil, "key-%d", i), time.Unix(1_000, 0))
			require.NoError(t, err)
			require.True(t, first)
		}
	}
	// After a restore, a quarter more keys than the table held must fit.
	more := keys / 4
	t.Run("full", func(t *testing.T) {
		src, err := dedup.New(time.Hour, dedup.Options{})
		require.NoError(t, err)
		fill(t, src, 0, keys)
		state, err := src.Snapshot(ctx, 1)
		require.NoError(t, err)

		var log rebuildLog
		d, err := dedup.New(time.Hour, dedup.Options{Logger: slog.New(&log)})
		require.NoError(t, err)
		require.NoError(t, d.Restore(ctx, state))
		log.n.Store(0)
		fill(t, d, keys, more)
		assert.Zero(t, log.n.Load(), "table rebuilds after the restore")
	})
	t.Run("incremental", func(t *testing.T) {
		storage := checkpoint.NewMemoryStorage()
		c := attachInc(t, storage, dedup.Options{Incremental: true})
		fill(t, c.d, 0, keys)
		require.NoError(t, c.task.Checkpoint(ctx, nil, 1, checkpoint.Meta{}, nil))
		c.close()

		var log rebuildLog
		c = attachInc(t, storage, dedup.Options{Incremental: true, Logger: slog.New(&log)})
		require.NotNil(t, c.task.Restored())
		log.n.Store(0)
		fill(t, c.d, keys, more)
		assert.Zero(t, log.n.Load(), "table rebuilds after the restore")
	})
}
