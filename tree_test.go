package exactlyonce_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnchangedTree proves the guard `make test` and `make demo` run
// through (.ci/unchanged-tree) fails a command that leaves a file in the
// work tree or modifies a tracked one, and passes one that writes only
// ignored files, in a checkout that was dirty before it ran.
func TestUnchangedTree(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	script, err := filepath.Abs(filepath.Join(".ci", "unchanged-tree"))
	require.NoError(t, err)
	dir := t.TempDir()
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(t.Context(), name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		return cmd.CombinedOutput()
	}
	for _, c := range [][]string{{"init", "-q"}} {
		out, err := run(git, c...)
		require.NoError(t, err, "%s", out)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("/bin/\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tracked"), []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edited"), []byte("a"), 0o644))
	out, err := run(git, "add", ".")
	require.NoError(t, err, "%s", out)
	out, err = run(git, "commit", "-q", "-m", "init")
	require.NoError(t, err, "%s", out)
	// The developer's own work: an edit and a new file, before the run.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "edited"), []byte("b"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644))

	tests := []struct {
		name    string
		give    string
		wantErr bool
	}{
		{name: "writes only ignored files", give: "mkdir -p bin && echo x > bin/gateway", wantErr: false},
		{name: "touches the developer's own files", give: "echo c > edited && echo more >> notes.txt", wantErr: false},
		{name: "leaves a new file", give: "echo x > gateway", wantErr: true},
		{name: "leaves a new file in a new directory", give: "mkdir -p out && echo x > out/report.txt", wantErr: true},
		{name: "modifies a tracked file", give: "echo b > tracked", wantErr: true},
		{name: "deletes a tracked file", give: "rm tracked", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run("bash", script, "bash", "-c", tt.give)
			if tt.wantErr {
				assert.Error(t, err, "%s", out)
				assert.Contains(t, string(out), "unchanged-tree:")
			} else {
				assert.NoError(t, err, "%s", out)
			}
			out, err = run(git, "checkout", "-q", "--", "tracked")
			require.NoError(t, err, "%s", out)
			out, err = run(git, "clean", "-q", "-f", "-d", "--", "gateway", "out")
			require.NoError(t, err, "%s", out)
		})
	}

	out, err = run("bash", script, "bash", "-c", "exit 3")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	assert.Equal(t, 3, exit.ExitCode(), "the command's own failure is kept")
}

// TestNoCommittedBinaries: no tracked file is a compiled program (an ELF,
// Mach-O or PE file). Three were committed at the root by `go build` of a
// main package (gateway, processor, then exactlyonce, 20 to 28 MB each,
// in every clone since); /.gitignore now lists the names go build leaves
// at the root.
func TestNoCommittedBinaries(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	out, err := exec.CommandContext(t.Context(), git, "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	magics := [][]byte{{0x7f, 'E', 'L', 'F'}, {0xcf, 0xfa, 0xed, 0xfe}, {0xfe, 0xed, 0xfa, 0xcf}, {'M', 'Z'}}
	checked := 0
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(name)
		if err != nil {
			continue // deleted in the work tree
		}
		head := make([]byte, 4)
		n, _ := f.Read(head)
		f.Close()
		checked++
		for _, m := range magics {
			if n >= len(m) && bytes.Equal(head[:len(m)], m) {
				t.Errorf("%s is a compiled binary: remove it (git rm --cached) and ignore it", name)
			}
		}
	}
	require.Positive(t, checked)
}

// maxLibraryLines is the most lines a non-test Go file may have: a longer
// one holds more than one concept and is split by concept into files.
const maxLibraryLines = 450

// longFilesAllowed are files known to be over maxLibraryLines while their
// split is under way elsewhere. The list only shrinks: an entry that is no
// longer over the limit fails the test, so that it is removed. Empty: every
// library file is within the limit.
var longFilesAllowed []string

// TestNoLongLibraryFiles: no non-test Go file outside testdata has more
// than maxLibraryLines lines, except those in longFilesAllowed.
func TestNoLongLibraryFiles(t *testing.T) {
	var long []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines := bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			lines++
		}
		path = filepath.ToSlash(path)
		if lines > maxLibraryLines {
			long = append(long, path)
			if !slices.Contains(longFilesAllowed, path) {
				t.Errorf("%s has %d lines, more than %d: split it by concept into files", path, lines, maxLibraryLines)
			}
		}
		return nil
	})
	require.NoError(t, err)
	for _, path := range longFilesAllowed {
		if !slices.Contains(long, path) {
			t.Errorf("%s is in longFilesAllowed but not over %d lines (or gone): remove it from the list", path, maxLibraryLines)
		}
	}
}
