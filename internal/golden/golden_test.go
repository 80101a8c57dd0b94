package golden_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/internal/golden"
)

// failRecorder records a failed comparison instead of failing the test.
type failRecorder struct {
	testing.TB
	failed bool
}

func (r *failRecorder) Helper()                      {}
func (r *failRecorder) Errorf(string, ...any)        { r.failed = true }
func (r *failRecorder) FailNow()                     { r.failed = true; r.TB.FailNow() }
func (r *failRecorder) Fatalf(f string, args ...any) { r.failed = true; r.TB.Fatalf(f, args...) }

// TestCheck proves Check passes on equal bytes, returns the file's bytes,
// fails on different ones and writes nothing without -update.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	require.NoError(t, os.MkdirAll("testdata", 0o755))
	require.NoError(t, os.WriteFile(filepath.Join("testdata", "f.golden"), []byte("v1"), 0o644))

	r := &failRecorder{TB: t}
	assert.Equal(t, []byte("v1"), golden.Check(r, "f.golden", []byte("v1")))
	assert.False(t, r.failed)

	r = &failRecorder{TB: t}
	golden.Check(r, "f.golden", []byte("v2"))
	assert.True(t, r.failed, "different bytes fail")
	b, err := os.ReadFile(filepath.Join("testdata", "f.golden"))
	require.NoError(t, err)
	assert.Equal(t, "v1", string(b), "nothing written without -update")
	assert.False(t, golden.Updating())
}
