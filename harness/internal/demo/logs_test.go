package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogs: every line of a process's output is kept in its file, across
// restarts and however the output is cut into writes; the terminal gets
// the errors (and warnings when verbose) and anything that is not a JSON
// record, whole lines only.
func TestLogs(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		var term bytes.Buffer
		l := &Logs{Dir: filepath.Join(t.TempDir(), "logs"), Terminal: &term, Verbose: verbose}
		out := `{"level":"INFO","msg":"checkpoint: restored"}` + "\n" +
			`{"level":"WARN","msg":"slow"}` + "\n" +
			`{"level":"ERROR","msg":"processor stopped"}` + "\n" +
			"panic: boom\n"
		for start := range 2 {
			w, err := l.Writer("processor-1", "start "+string(rune('a'+start)))
			require.NoError(t, err)
			for i := 0; i < len(out); i += 7 { // cut mid-line
				_, err := w.Write([]byte(out[i:min(i+7, len(out))]))
				require.NoError(t, err)
			}
		}
		require.NoError(t, l.Close())
		got, err := os.ReadFile(filepath.Join(l.Dir, "processor-1.log"))
		require.NoError(t, err)
		assert.Equal(t, "--- start a\n"+out+"--- start b\n"+out, string(got))
		want := `{"level":"ERROR","msg":"processor stopped"}` + "\npanic: boom\n"
		if verbose {
			want = `{"level":"WARN","msg":"slow"}` + "\n" + want
		}
		assert.Equal(t, want+want, term.String(), "verbose %v", verbose)
	}
}
