// Package golden compares test output with files under testdata, for
// anything written to disk or the wire: checkpoint, snapshot and journal
// formats. It owns the one -update flag of the module's tests:
//
//	go test ./dedup -run Golden -update   // rewrite after a deliberate change
//
// A format change that was not deliberate fails the test; a deliberate one
// also needs a new format version, which the failure message says.
//
// # Guarantees
//
// Without -update nothing is written. With it the file is written before
// the comparison, so the run that rewrites a file passes.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// Updating reports whether the test binary runs with -update.
func Updating() bool { return *update }

// Check compares got with testdata/name (name may have directories),
// first writing got there when the test runs with -update, and returns the
// file's bytes so that the test can check they still decode. A mismatch
// fails the test but lets it continue; a missing file stops it.
func Check(t testing.TB, name string, got []byte) (want []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create it")
	const msg = "%s changed: a deliberate format change needs a new version (then run with -update)"
	if utf8.Valid(want) && utf8.Valid(got) {
		assert.Equal(t, string(want), string(got), msg, path) // a readable diff of text formats
	} else {
		assert.Equal(t, want, got, msg, path)
	}
	return want
}
