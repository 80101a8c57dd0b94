package state_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
	"github.com/exactlyonce/exactlyonce/internal/golden"
	"github.com/exactlyonce/exactlyonce/state"
)

var refused = []error{state.ErrCorrupt, state.ErrUnsupportedVersion, state.ErrIncompatible}

func TestParticipantConformance(t *testing.T) {
	// A state of the other kind is well formed but foreign.
	otherMap := newMap(t, state.Options{})
	require.NoError(t, otherMap.Put("a", "b", 1, t0))
	otherValue := newValue(t, state.Options{})
	require.NoError(t, otherValue.Put("a", 1, t0))

	t.Run("Value", func(t *testing.T) {
		checkpointtest.TestAsyncParticipant(t, checkpointtest.AsyncParticipant{Participant: checkpointtest.Participant{
			New: func(t *testing.T) checkpoint.Participant { return newValue(t, state.Options{TTL: time.Hour}) },
			Fill: func(t *testing.T, p checkpoint.Participant, n int) {
				v := p.(*state.Value[string, int64])
				for i := range 50 + n {
					require.NoError(t, v.Put(fmt.Sprintf("key-%d-%d", n, i), int64(i*n), t0.Add(time.Duration(i)*time.Minute)))
				}
			},
			Refused: refused,
			Foreign: [][]byte{snapshot(t, otherMap)},
		}, After: func(t *testing.T, p checkpoint.Participant, n int) {
			v := p.(*state.Value[string, int64])
			require.NoError(t, v.Put(fmt.Sprintf("after-%d", n), 1, t0.Add(time.Hour)))
			v.Delete(fmt.Sprintf("key-%d-0", n), t0.Add(time.Hour))
		}})
	})
	t.Run("Map", func(t *testing.T) {
		checkpointtest.TestAsyncParticipant(t, checkpointtest.AsyncParticipant{Participant: checkpointtest.Participant{
			New: func(t *testing.T) checkpoint.Participant { return newMap(t, state.Options{TTL: time.Hour}) },
			Fill: func(t *testing.T, p checkpoint.Participant, n int) {
				m := p.(*state.Map[string, string, int64])
				for i := range 50 + n {
					require.NoError(t, m.Put(fmt.Sprintf("repo-%d", i%7), fmt.Sprintf("pr-%d-%d", n, i), int64(i), t0.Add(time.Duration(i)*time.Minute)))
				}
			},
			Refused: refused,
			Foreign: [][]byte{snapshot(t, otherValue)},
		}, After: func(t *testing.T, p checkpoint.Participant, n int) {
			m := p.(*state.Map[string, string, int64])
			require.NoError(t, m.Put("repo-0", fmt.Sprintf("after-%d", n), 1, t0.Add(time.Hour)))
			m.Clear("repo-1", t0.Add(time.Hour))
		}})
	})
}

// goldenValue and goldenMap build the states pinned by the golden files:
// a few keys written at different times, one expired, one deleted, with a
// one-hour TTL.
func goldenValue(t *testing.T) *state.Value[string, int64] {
	v := newValue(t, state.Options{TTL: time.Hour})
	require.NoError(t, v.Put("expired", 1, t0))
	require.NoError(t, v.Put("repo-1/pr-7", -7, t0.Add(30*time.Minute)))
	require.NoError(t, v.Put("repo-2/pr-1", 1_700_000_000, t0.Add(70*time.Minute)))
	require.NoError(t, v.Put("deleted", 3, t0.Add(70*time.Minute)))
	v.Delete("deleted", t0.Add(75*time.Minute))
	return v
}

func goldenMap(t *testing.T) *state.Map[string, string, int64] {
	m := newMap(t, state.Options{TTL: time.Hour})
	require.NoError(t, m.Put("repo-1", "expired", 1, t0))
	require.NoError(t, m.Put("repo-1", "pr-7", -7, t0.Add(30*time.Minute)))
	require.NoError(t, m.Put("repo-2", "pr-1", 1, t0.Add(70*time.Minute)))
	require.NoError(t, m.Put("repo-2", "pr-2", 2, t0.Add(75*time.Minute)))
	return m
}

// TestSnapshotGolden pins snapshot format version 1: the bytes written for
// fixed states, and that those bytes still restore to the same answers.
// Run with -update to rewrite the files after a deliberate format change
// (which needs a new version number).
func TestSnapshotGolden(t *testing.T) {
	ctx := context.Background()
	at := t0.Add(75 * time.Minute)
	t.Run("value_v1.golden", func(t *testing.T) {
		want := golden.Check(t, "value_v1.golden", snapshot(t, goldenValue(t)))
		v := newValue(t, state.Options{})
		require.NoError(t, v.Restore(ctx, want))
		assert.Equal(t, at, v.Clock())
		assert.Equal(t, 2, v.Len())
		got, ok := v.Get("repo-1/pr-7", at)
		assert.True(t, ok)
		assert.Equal(t, int64(-7), got)
		// Written at 30 minutes, it expires at 90, whatever this Value's TTL.
		_, ok = v.Get("repo-1/pr-7", t0.Add(90*time.Minute))
		assert.False(t, ok)
		got, ok = v.Get("repo-2/pr-1", t0.Add(90*time.Minute))
		assert.True(t, ok)
		assert.Equal(t, int64(1_700_000_000), got)
	})
	t.Run("map_v1.golden", func(t *testing.T) {
		want := golden.Check(t, "map_v1.golden", snapshot(t, goldenMap(t)))
		m := newMap(t, state.Options{})
		require.NoError(t, m.Restore(ctx, want))
		assert.Equal(t, at, m.Clock())
		got := map[string]int64{}
		for uk, v := range m.All("repo-2", at) {
			got[uk] = v
		}
		assert.Equal(t, map[string]int64{"pr-1": 1, "pr-2": 2}, got)
		_, ok := m.Get("repo-1", "pr-7", at)
		assert.True(t, ok)
		_, ok = m.Get("repo-1", "expired", at)
		assert.False(t, ok)
	})
}

// FuzzRestore feeds arbitrary bytes to Restore of a Value and a Map. It
// must never panic; a refused input wraps one of the package's sentinels
// and leaves the state unchanged; an accepted input is canonical
// (snapshotting the restored state returns the same bytes). The seed
// corpus holds the golden files.
func FuzzRestore(f *testing.F) {
	for _, name := range []string{"value_v1.golden", "map_v1.golden"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("EOSTATE\x00"))
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
	v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
	require.NoError(t, err)
	m, err := state.NewMap[string, string, int64](state.String{}, state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
	require.NoError(t, err)
	require.NoError(t, v.Put("sentinel", 1, t0))
	require.NoError(t, m.Put("sentinel", "x", 1, t0))
	for _, p := range []checkpoint.Participant{v, m} {
		before, err := p.Snapshot(ctx, 1)
		require.NoError(t, err)
		if err := p.Restore(ctx, data); err != nil {
			isRefused := false
			for _, r := range refused {
				isRefused = isRefused || errors.Is(err, r)
			}
			require.True(t, isRefused, "%v wraps no sentinel", err)
			after, err := p.Snapshot(ctx, 2)
			require.NoError(t, err)
			require.Equal(t, before, after, "a refused input changed the state")
			continue
		}
		again, err := p.Snapshot(ctx, 2)
		require.NoError(t, err)
		require.Equal(t, data, again, "accepted a non-canonical snapshot")
	}
	// The restored states keep working.
	require.NoError(t, v.Put("after", 2, v.Clock()))
	require.NoError(t, m.Put("after", "y", 2, m.Clock()))
	for uk := range m.All("sentinel", m.Clock()) {
		_ = uk
	}
	require.NoError(t, v.Close())
	require.NoError(t, m.Close())
}
