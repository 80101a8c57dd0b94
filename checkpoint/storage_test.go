package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/checkpointtest"
)

func TestFSStorage(t *testing.T) {
	checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
		s, err := checkpoint.NewFSStorage(filepath.Join(t.TempDir(), "store"))
		require.NoError(t, err)
		return s
	})
}

func TestMemStorage(t *testing.T) {
	checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
		return checkpoint.NewMemoryStorage()
	})
}

// A crash between creating the temporary file and the rename leaves a
// temporary file behind; it must never show up as a stored name.
func TestFSStorageIgnoresLeftoverTempFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "cp/a", []byte("a")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cp", "#b.12345"), []byte("half"), 0o644))

	got, err := s.List(ctx, "cp/")
	require.NoError(t, err)
	assert.Equal(t, []string{"cp/a"}, got)

	entries, err := os.ReadDir(filepath.Join(dir, "cp"))
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "#b.12345" && e.Name() != "#lock" {
			assert.False(t, strings.Contains(e.Name(), "#"), "Put left a temporary file %s", e.Name())
		}
	}
}

// Reopening the directory sees what an earlier FSStorage stored.
func TestFSStorageReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "x/y", []byte("kept")))

	s2, err := checkpoint.NewFSStorage(dir)
	require.NoError(t, err)
	got, err := s2.Get(ctx, "x/y")
	require.NoError(t, err)
	assert.Equal(t, []byte("kept"), got)
}

// Processes sharing one directory race Create and Replace.
func TestFSStorageProcessRace(t *testing.T) {
	checkpointtest.TestProcessRace(t,
		func(t *testing.T) string { return t.TempDir() },
		func(dir string) (checkpoint.Storage, error) { return checkpoint.NewFSStorage(dir) })
}
