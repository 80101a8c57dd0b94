package testkit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPRReviewsModule runs the tests of examples/prreviews, a module of its
// own (example.com/prreviews): the second service a user writes, keyed
// state (state.Value) for first-review times beside a window and two
// sinks, killed with SIGKILL twice while it writes rows, the rows checked
// with FINAL. Like TestExternalModule it uses the exported API only, so a
// change that breaks a user's code fails here.
func TestPRReviewsModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests another module")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// A copy, whose replace directive points at this checkout, so that
	// -mod=mod touches no file of the repository.
	dir := t.TempDir()
	for _, name := range []string{"go.mod", "go.sum", "prreviews.go", "prreviews_test.go"} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "prreviews", name))
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
	t.Logf("go test in a copy of examples/prreviews:\n%s", out)
	if err != nil {
		t.Fatalf("the prreviews module's tests failed: %v", err)
	}
}
