package testkit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExternalModule runs the tests of examples/external, a module of its
// own (example.com/webhookagg) that uses the SDK as a user would: only
// exported packages (Go refuses its imports of internal/ ones, being
// another module), the servers from this kit in a few lines, and a
// gateway-to-ClickHouse pipeline test. A change of the public API that
// breaks a user's code fails here.
func TestExternalModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests another module")
	}
	// go test puts the go command of its own GOROOT first on PATH.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	// A copy, whose replace directive points at this checkout: -mod=mod
	// then adds what a dependency change of the SDK needs to its go.mod
	// and go.sum without touching the repository's files.
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum", "agg.go", "agg_test.go"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "external", name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "go.mod" {
			b = []byte(strings.Replace(string(b), "=> ../..", "=> "+root, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), goTool, "test", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	t.Logf("go test in a copy of examples/external:\n%s", out)
	if err != nil {
		t.Fatalf("the external module's tests failed: %v", err)
	}
}
