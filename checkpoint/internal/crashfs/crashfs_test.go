package crashfs_test

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint/internal/crashfs"
)

// write creates dir/name through a temporary file, syncing the file if
// syncFile and the directory if syncDir.
func write(t *testing.T, f *crashfs.FS, dir, name, data string, syncFile, syncDir bool) {
	t.Helper()
	require.NoError(t, f.MkdirAll(dir))
	w, err := f.CreateTemp(dir, "#tmp*")
	require.NoError(t, err)
	_, err = w.Write([]byte(data))
	require.NoError(t, err)
	if syncFile {
		require.NoError(t, w.Sync())
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Rename(w.Name(), dir+"/"+name))
	if syncDir {
		require.NoError(t, f.SyncDir(dir))
	}
}

func TestCrashKeepsOnlyWhatWasSynced(t *testing.T) {
	f := crashfs.New()
	require.NoError(t, f.MkdirAll("/d"))
	require.NoError(t, f.SyncDir("/"))
	write(t, f, "/d", "both", "kept", true, true)
	write(t, f, "/d", "nodir", "entry lost", true, false)
	f.Crash(nil)
	got, err := f.ReadFile("/d/both")
	require.NoError(t, err)
	assert.Equal(t, "kept", string(got))
	_, err = f.ReadFile("/d/nodir")
	assert.ErrorIs(t, err, fs.ErrNotExist, "an entry not synced is lost")

	write(t, f, "/d", "nofile", "content lost", false, true)
	f.Crash(nil)
	got, err = f.ReadFile("/d/nofile")
	require.NoError(t, err, "the synced entry stays")
	assert.Empty(t, got, "content not synced is lost")

	require.NoError(t, f.MkdirAll("/new/sub"))
	require.NoError(t, f.SyncDir("/new"))
	f.Crash(nil)
	_, err = f.Stat("/new")
	assert.ErrorIs(t, err, fs.ErrNotExist, "a directory whose parent was not synced is lost")
}

func TestCrashAfter(t *testing.T) {
	f := crashfs.New()
	f.SetCrashAfter(2)
	require.NoError(t, f.MkdirAll("/a"))
	err := f.SyncDir("/")
	assert.True(t, errors.Is(err, crashfs.ErrCrashed), "the second call crashes: %v", err)
	assert.ErrorIs(t, f.MkdirAll("/b"), crashfs.ErrCrashed, "and every later one")
	f.Crash(nil)
	_, err = f.Stat("/a")
	assert.ErrorIs(t, err, fs.ErrNotExist, "the crashed SyncDir did not happen")
	assert.NoError(t, f.MkdirAll("/b"), "works again after Crash")
}

// With a random source, some unsynced state survives and some does not,
// but synced state always does.
func TestCrashRandomKeepsSynced(t *testing.T) {
	kept := 0
	for seed := range 32 {
		f := crashfs.New()
		write(t, f, "/", "synced", "s", true, true)
		write(t, f, "/", "loose", "l", false, false)
		f.Crash(rand.New(rand.NewPCG(uint64(seed), 1)))
		got, err := f.ReadFile("/synced")
		require.NoError(t, err)
		assert.Equal(t, "s", string(got))
		if got, err := f.ReadFile("/loose"); err == nil && string(got) == "l" {
			kept++
		}
	}
	assert.Greater(t, kept, 0, "some runs keep unsynced writes")
	assert.Less(t, kept, 32, "some runs lose them")
}
