package checkpoint_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// envTempWriter makes the test binary a writer that stops in the middle of
// a PutStream into the directory it names, to be killed there.
const envTempWriter = "EXACTLYONCE_CHECKPOINT_TEMP_WRITER"

// A writer killed with SIGKILL between creating its temporary file and
// renaming it leaves the file behind. While the writer lives, neither
// another process's open nor its List touch the file; once it is dead, the
// next open (or a List of its directory) removes it, and nothing else.
func TestFSStorageRemovesKilledWritersTemp(t *testing.T) {
	if dir := os.Getenv(envTempWriter); dir != "" {
		tempWriter(dir)
		return
	}
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
			dir := t.TempDir()
			s, err := checkpoint.NewFSStorage(dir)
			require.NoError(t, err)
			require.NoError(t, s.Put(ctx, "cp/kept", []byte("kept")))

			cmd := exec.Command(os.Args[0], "-test.run=^TestFSStorageRemovesKilledWritersTemp$", "-test.count=1")
			cmd.Env = append(os.Environ(), envTempWriter+"="+dir)
			cmd.Stderr = os.Stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			require.True(t, scanFor(out, "WRITING"), "the writer never started")
			temps := tempFiles(t, checkpoint.OSFS{}, dir)
			require.Len(t, temps, 1, "the writer's temporary file")

			// Live: another process's open and List leave it alone.
			tt.clean(t, s)
			assert.Equal(t, temps, tempFiles(t, checkpoint.OSFS{}, dir), "a live writer's file was removed")

			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			_ = cmd.Wait()
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

func scanFor(r io.Reader, line string) bool {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
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
