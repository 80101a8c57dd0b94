package checkpointtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// TestStorage checks the checkpoint.Storage contract. newStorage returns a
// fresh, empty Storage for each subtest.
func TestStorage(t *testing.T, newStorage func(t *testing.T) checkpoint.Storage) {
	t.Helper()
	ctx := context.Background()

	t.Run("PutGet", func(t *testing.T) {
		s := newStorage(t)
		tests := []struct {
			give string
			data []byte
		}{
			{give: "a", data: []byte("1")},
			{give: "dir/b.json", data: []byte(`{"x":1}`)},
			{give: "deep/er/and_deeper/c-1", data: []byte{0, 1, 2, 255}},
			{give: "empty", data: []byte{}},
		}
		for _, tt := range tests {
			require.NoError(t, s.Put(ctx, tt.give, tt.data), tt.give)
		}
		for _, tt := range tests {
			got, err := s.Get(ctx, tt.give)
			require.NoError(t, err, tt.give)
			assert.Equal(t, len(tt.data), len(got), tt.give)
			if len(tt.data) > 0 {
				assert.Equal(t, tt.data, got, tt.give)
			}
		}
	})

	t.Run("PutStream", func(t *testing.T) {
		// Through the Storage's StreamPutter if it has one, else Put.
		s := newStorage(t)
		require.NoError(t, s.Put(ctx, "s/x", []byte("old")))
		big := make([]byte, 3<<20)
		for i := range big {
			big[i] = byte(i * 7)
		}
		require.NoError(t, checkpoint.PutStream(ctx, s, "s/x", func(w io.Writer) error {
			for b := big; len(b) > 0; b = b[min(len(b), 1000):] {
				if _, err := w.Write(b[:min(len(b), 1000)]); err != nil {
					return err
				}
			}
			return nil
		}))
		got, err := s.Get(ctx, "s/x")
		require.NoError(t, err)
		assert.True(t, bytes.Equal(big, got), "streamed content differs")

		// A writer that fails stores nothing: the old content stays.
		errWrite := errors.New("writer failed")
		err = checkpoint.PutStream(ctx, s, "s/x", func(w io.Writer) error {
			_, _ = w.Write([]byte("partial"))
			return errWrite
		})
		require.ErrorIs(t, err, errWrite)
		got, err = s.Get(ctx, "s/x")
		require.NoError(t, err)
		assert.True(t, bytes.Equal(big, got), "a failed stream changed the content")
		names, err := s.List(ctx, "s/")
		require.NoError(t, err)
		assert.Equal(t, []string{"s/x"}, names)
	})

	t.Run("Overwrite", func(t *testing.T) {
		s := newStorage(t)
		require.NoError(t, s.Put(ctx, "x/y", []byte("old content, longer")))
		require.NoError(t, s.Put(ctx, "x/y", []byte("new")))
		got, err := s.Get(ctx, "x/y")
		require.NoError(t, err)
		assert.Equal(t, []byte("new"), got)
	})

	t.Run("NoAliasing", func(t *testing.T) {
		s := newStorage(t)
		data := []byte("abc")
		require.NoError(t, s.Put(ctx, "n", data))
		data[0] = 'X'
		got, err := s.Get(ctx, "n")
		require.NoError(t, err)
		assert.Equal(t, []byte("abc"), got)
		got[1] = 'Y'
		again, err := s.Get(ctx, "n")
		require.NoError(t, err)
		assert.Equal(t, []byte("abc"), again)
	})

	t.Run("GetMissing", func(t *testing.T) {
		s := newStorage(t)
		require.NoError(t, s.Put(ctx, "dir/present", []byte("1")))
		for _, name := range []string{"absent", "dir/absent", "nodir/absent", "dir"} {
			_, err := s.Get(ctx, name)
			assert.ErrorIs(t, err, checkpoint.ErrNotFound, name)
		}
	})

	t.Run("List", func(t *testing.T) {
		s := newStorage(t)
		names := []string{
			"cp/p-0/0000000002", "cp/p-0/0000000001", "cp/p-1/0000000001",
			"cp/p-10/0000000001", "cp.txt", "other/x", "cp/p-0.meta",
		}
		for _, n := range names {
			require.NoError(t, s.Put(ctx, n, []byte(n)))
		}
		tests := []struct {
			give string
			want []string
		}{
			{give: "cp/p-0/", want: []string{"cp/p-0/0000000001", "cp/p-0/0000000002"}},
			{give: "cp/p-1", want: []string{"cp/p-1/0000000001", "cp/p-10/0000000001"}},
			{give: "cp/p-0", want: []string{"cp/p-0.meta", "cp/p-0/0000000001", "cp/p-0/0000000002"}},
			{give: "cp", want: []string{"cp.txt", "cp/p-0.meta", "cp/p-0/0000000001", "cp/p-0/0000000002", "cp/p-1/0000000001", "cp/p-10/0000000001"}},
			{give: "nothing/", want: nil},
			{give: "", want: []string{"cp.txt", "cp/p-0.meta", "cp/p-0/0000000001", "cp/p-0/0000000002", "cp/p-1/0000000001", "cp/p-10/0000000001", "other/x"}},
		}
		for _, tt := range tests {
			got, err := s.List(ctx, tt.give)
			require.NoError(t, err, tt.give)
			assert.Equal(t, len(tt.want), len(got), tt.give)
			if len(tt.want) > 0 {
				assert.Equal(t, tt.want, got, tt.give)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStorage(t)
		require.NoError(t, s.Put(ctx, "d/1", []byte("1")))
		require.NoError(t, s.Put(ctx, "d/2", []byte("2")))
		require.NoError(t, s.Delete(ctx, "d/1"))
		_, err := s.Get(ctx, "d/1")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound)
		got, err := s.List(ctx, "d/")
		require.NoError(t, err)
		assert.Equal(t, []string{"d/2"}, got)
		assert.NoError(t, s.Delete(ctx, "d/1"), "deleting twice")
		assert.NoError(t, s.Delete(ctx, "never/there"), "deleting a missing name")
	})

	t.Run("InvalidNames", func(t *testing.T) {
		s := newStorage(t)
		for _, name := range []string{"", "/abs", "a//b", "a/", "../up", "a/../b", "./a", "sp ace", "a#b", `back\slash`} {
			assert.Error(t, s.Put(ctx, name, []byte("x")), "Put %q", name)
		}
		got, err := s.List(ctx, "")
		require.NoError(t, err)
		assert.Empty(t, got)
	})

	t.Run("CanceledContext", func(t *testing.T) {
		s := newStorage(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := s.Put(cctx, "c", []byte("x"))
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.Canceled), "Put error %v wraps context.Canceled", err)
		_, err = s.Get(ctx, "c")
		assert.ErrorIs(t, err, checkpoint.ErrNotFound, "a canceled Put stores nothing")
	})

	testConditional(t, newStorage)

	t.Run("Concurrent", func(t *testing.T) {
		s := newStorage(t)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := range 8 {
			wg.Go(func() {
				for i := range 8 {
					name := fmt.Sprintf("conc/w%d/%d", w, i)
					if err := s.Put(ctx, name, []byte(name)); err != nil {
						errs <- err
						return
					}
					got, err := s.Get(ctx, name)
					if err != nil {
						errs <- err
						return
					}
					if string(got) != name {
						errs <- fmt.Errorf("%s: got %q", name, got)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
		got, err := s.List(ctx, "conc/")
		require.NoError(t, err)
		assert.Len(t, got, 64)
	})
}
