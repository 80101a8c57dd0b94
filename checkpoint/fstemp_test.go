package checkpoint_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// A writer killed with SIGKILL between creating its temporary file and
// renaming it leaves the file behind. While the writer lives, neither
// another process's open nor its List touch the file; once it is dead, the
// next open (or a List of its directory) removes it, and nothing else.
func TestFSStorageRemovesKilledWritersTemp(t *testing.T) {
	tests := []struct {
		name  string
		clean func(t *testing.T, s *checkpoint.FSStorage)
	}{
		{"open", func(t *testing.T, s *checkpoint.FSStorage) {
			_, err := checkpoint.NewFSStorage(s.Dir())
			require.NoError(t, err)
		}},
		{"list", func(t *testing.T, s *checkpoint.FSStorage) {
			got, err := s.List(context.Background(), "cp/")
			require.NoError(t, err)
			assert.Equal(t, []string{"cp/kept"}, got)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := testkit.Setup(t, "dir", func() string {
				dir := t.TempDir()
				s, err := checkpoint.NewFSStorage(dir)
				require.NoError(t, err)
				require.NoError(t, s.Put(ctx, "cp/kept", []byte("kept")))
				return dir
			})
			writer := testkit.Func(t, "writer", func(context.Context) error {
				tempWriter(dir)
				return nil
			})
			s, err := checkpoint.NewFSStorage(dir)
			require.NoError(t, err)
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(writer.Logs(), "\nWRITING\n") {
				require.True(t, writer.Running(), "the writer exited: %v", writer.Err())
				require.True(t, time.Now().Before(deadline), "the writer never started")
				time.Sleep(time.Millisecond)
			}
			temps := tempFiles(t, checkpoint.OSFS{}, dir)
			require.Len(t, temps, 1, "the writer's temporary file")

			// Live: another process's open and List leave it alone.
			tt.clean(t, s)
			assert.Equal(t, temps, tempFiles(t, checkpoint.OSFS{}, dir), "a live writer's file was removed")

			writer.Kill()
			assert.Equal(t, temps, tempFiles(t, checkpoint.OSFS{}, dir), "the killed writer left its file")

			tt.clean(t, s)
			assert.Empty(t, tempFiles(t, checkpoint.OSFS{}, dir), "the dead writer's file is removed")
			got, err := s.Get(ctx, "cp/kept")
			require.NoError(t, err)
			assert.Equal(t, "kept", string(got))
			_, err = s.Get(ctx, "cp/half")
			assert.ErrorIs(t, err, checkpoint.ErrNotFound)
			require.NoError(t, s.Put(ctx, "cp/half", []byte("whole")), "the storage works on")
		})
	}
}

// tempWriter is the child of TestFSStorageRemovesKilledWritersTemp: it
// says WRITING from inside a PutStream, and waits to be killed there.
func tempWriter(dir string) {
	s, err := checkpoint.NewFSStorage(dir)
	if err != nil {
		panic(err)
	}
	_ = s.PutStream(context.Background(), "cp/half", func(w io.Writer) error {
		if _, err := io.WriteString(w, "half of it"); err != nil {
			return err
		}
		os.Stdout.WriteString("\nWRITING\n")
		time.Sleep(time.Minute) // killed here
		return nil
	})
	os.Exit(2) // never reached unless the parent failed to kill
}

// A writer in this process: List on another goroutine, and another
// FSStorage opened on the same directory, leave its temporary file alone
// (flock(2) locks of one process exclude each other too, per open file).
func TestFSStorageKeepsLiveWritersTemp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	writing, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.PutStream(ctx, "cp/a", func(w io.Writer) error {
			_, _ = io.WriteString(w, "first half, ")
			close(writing)
			<-release
			_, err := io.WriteString(w, "second half")
			return err
		})
	}()
	<-writing
	require.Len(t, tempFiles(t, checkpoint.OSFS{}, dir), 1)
	_, err = s.List(ctx, "cp/")
	require.NoError(t, err)
	_, err = checkpoint.NewFSStorage(filepath.Join(dir))
	require.NoError(t, err)
	close(release)
	require.NoError(t, <-done)
	got, err := s.Get(ctx, "cp/a")
	require.NoError(t, err)
	assert.Equal(t, "first half, second half", string(got))
	assert.Empty(t, tempFiles(t, checkpoint.OSFS{}, dir))
}
