package checkpointtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// testConditional checks Create, GetVersion and Replace.
func testConditional(t *testing.T, newStorage func(t *testing.T) checkpoint.Storage) {
	ctx := context.Background()

	t.Run("CreateGetVersion", func(t *testing.T) {
		s := newStorage(t)
		v, err := s.Create(ctx, "own/epoch-1", []byte("owner a"))
		require.NoError(t, err)
		assert.NotEmpty(t, v, "Create returns a Version")
		data, got, err := s.GetVersion(ctx, "own/epoch-1")
		require.NoError(t, err)
		assert.Equal(t, []byte("owner a"), data)
		assert.Equal(t, v, got, "GetVersion returns the Version Create returned")

		_, _, err = s.GetVersion(ctx, "own/epoch-2")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound)
	})

	t.Run("CreateConflict", func(t *testing.T) {
		s := newStorage(t)
		_, err := s.Create(ctx, "c", []byte("first"))
		require.NoError(t, err)
		_, err = s.Create(ctx, "c", []byte("second"))
		assert.ErrorIs(t, err, checkpoint.ErrConflict)
		require.NoError(t, s.Put(ctx, "p", []byte("put")))
		_, err = s.Create(ctx, "p", []byte("created"))
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "Create over a Put name")

		for name, want := range map[string]string{"c": "first", "p": "put"} {
			got, err := s.Get(ctx, name)
			require.NoError(t, err)
			assert.Equal(t, []byte(want), got, "a lost Create changes nothing")
		}
		names, err := s.List(ctx, "")
		require.NoError(t, err)
		assert.Equal(t, []string{"c", "p"}, names)
	})

	t.Run("CreateAfterDelete", func(t *testing.T) {
		s := newStorage(t)
		_, err := s.Create(ctx, "d/x", []byte("1"))
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "d/x"))
		_, err = s.Create(ctx, "d/x", []byte("2"))
		require.NoError(t, err)
		got, err := s.Get(ctx, "d/x")
		require.NoError(t, err)
		assert.Equal(t, []byte("2"), got)
	})

	t.Run("CreateEmpty", func(t *testing.T) {
		s := newStorage(t)
		_, err := s.Create(ctx, "e", nil)
		require.NoError(t, err)
		_, err = s.Create(ctx, "e", []byte("x"))
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "an empty blob is content")
	})

	t.Run("Replace", func(t *testing.T) {
		s := newStorage(t)
		v1, err := s.Create(ctx, "r", []byte("epoch 1"))
		require.NoError(t, err)
		v2, err := s.Replace(ctx, "r", []byte("epoch 2"), v1)
		require.NoError(t, err)
		assert.NotEmpty(t, v2)
		assert.NotEqual(t, v1, v2, "new content, new Version")
		data, got, err := s.GetVersion(ctx, "r")
		require.NoError(t, err)
		assert.Equal(t, []byte("epoch 2"), data)
		assert.Equal(t, v2, got)

		_, err = s.Replace(ctx, "r", []byte("stale"), v1)
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "Replace against a stale Version")
		_, err = s.Replace(ctx, "r", []byte("zero"), "")
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "the zero Version never matches")
		_, err = s.Replace(ctx, "r", []byte("bogus"), checkpoint.Version("bogus"))
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "a made-up Version")
		got2, err := s.Get(ctx, "r")
		require.NoError(t, err)
		assert.Equal(t, []byte("epoch 2"), got2, "a lost Replace changes nothing")

		_, v3, err := s.GetVersion(ctx, "r")
		require.NoError(t, err)
		_, err = s.Replace(ctx, "r", []byte("epoch 3"), v3)
		require.NoError(t, err, "Replace against the Version GetVersion returned")
	})

	t.Run("ReplaceAfterPut", func(t *testing.T) {
		s := newStorage(t)
		require.NoError(t, s.Put(ctx, "r", []byte("put 1")))
		_, v1, err := s.GetVersion(ctx, "r")
		require.NoError(t, err)
		require.NoError(t, s.Put(ctx, "r", []byte("put 2")))
		_, err = s.Replace(ctx, "r", []byte("replace"), v1)
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "a Put in between changes the Version")
		_, v2, err := s.GetVersion(ctx, "r")
		require.NoError(t, err)
		_, err = s.Replace(ctx, "r", []byte("replace"), v2)
		assert.NoError(t, err)
	})

	t.Run("ReplaceMissing", func(t *testing.T) {
		s := newStorage(t)
		v, err := s.Create(ctx, "gone", []byte("x"))
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, "gone"))
		_, err = s.Replace(ctx, "gone", []byte("y"), v)
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "Replace of a deleted name")
		_, err = s.Replace(ctx, "never", []byte("y"), "")
		assert.ErrorIs(t, err, checkpoint.ErrConflict, "Replace of a name never stored")
		_, err = s.Get(ctx, "gone")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound, "a lost Replace creates nothing")
		_, err = s.Get(ctx, "never")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound)
	})

	t.Run("ConditionalInvalidNames", func(t *testing.T) {
		s := newStorage(t)
		for _, name := range []string{"", "/abs", "a//b", "../up", "a#b"} {
			_, err := s.Create(ctx, name, []byte("x"))
			assert.Error(t, err, "Create %q", name)
			assert.NotErrorIs(t, err, checkpoint.ErrConflict, "Create %q", name)
			_, err = s.Replace(ctx, name, []byte("x"), "v")
			assert.Error(t, err, "Replace %q", name)
			assert.NotErrorIs(t, err, checkpoint.ErrConflict, "Replace %q", name)
			_, _, err = s.GetVersion(ctx, name)
			assert.Error(t, err, "GetVersion %q", name)
		}
	})

	t.Run("ConditionalCanceledContext", func(t *testing.T) {
		s := newStorage(t)
		v, err := s.Create(ctx, "kept", []byte("kept"))
		require.NoError(t, err)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = s.Create(cctx, "c", []byte("x"))
		assert.ErrorIs(t, err, context.Canceled)
		_, err = s.Replace(cctx, "kept", []byte("x"), v)
		assert.ErrorIs(t, err, context.Canceled)
		_, err = s.Get(ctx, "c")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound, "a canceled Create stores nothing")
		got, err := s.Get(ctx, "kept")
		require.NoError(t, err)
		assert.Equal(t, []byte("kept"), got, "a canceled Replace changes nothing")
	})

	t.Run("RaceCreate", func(t *testing.T) {
		s := newStorage(t)
		const rounds, racers = 10, 8
		for r := range rounds {
			name := fmt.Sprintf("race/create-%d", r)
			results := race(racers, func(i int) error {
				_, err := s.Create(ctx, name, fmt.Appendf(nil, "racer %d", i))
				return err
			})
			winner := checkRound(t, name, results)
			if winner >= 0 {
				got, err := s.Get(ctx, name)
				require.NoError(t, err)
				assert.Equal(t, fmt.Sprintf("racer %d", winner), string(got), "%s holds the winner's data", name)
			}
		}
	})

	t.Run("RaceReplace", func(t *testing.T) {
		s := newStorage(t)
		const rounds, racers = 10, 8
		v, err := s.Create(ctx, "race/cas", []byte("round -1"))
		require.NoError(t, err)
		for r := range rounds {
			results := race(racers, func(i int) error {
				_, err := s.Replace(ctx, "race/cas", fmt.Appendf(nil, "round %d racer %d", r, i), v)
				return err
			})
			winner := checkRound(t, fmt.Sprintf("round %d", r), results)
			var data []byte
			data, v, err = s.GetVersion(ctx, "race/cas")
			require.NoError(t, err)
			if winner >= 0 {
				assert.Equal(t, fmt.Sprintf("round %d racer %d", r, winner), string(data))
			}
		}
	})
}

// race runs fn(0..n-1) on n goroutines released together and returns their
// errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// checkRound asserts that exactly one of results is nil and every other one
// wraps ErrConflict; it returns the winner's index, or -1.
func checkRound(t *testing.T, round string, results []error) int {
	t.Helper()
	winner := -1
	wins := 0
	for i, err := range results {
		switch {
		case err == nil:
			wins++
			winner = i
		case !errors.Is(err, checkpoint.ErrConflict):
			t.Errorf("%s: racer %d: %v, want nil or ErrConflict", round, i, err)
		}
	}
	if wins != 1 {
		t.Errorf("%s: %d winners, want exactly 1", round, wins)
		return -1
	}
	return winner
}
