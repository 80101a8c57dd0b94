package testkit_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(t.Context(), goTool, "test", "-count=1", "./...")
	cmd.Dir = filepath.Join("..", "examples", "external")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	t.Logf("go test in %s:\n%s", cmd.Dir, out)
	if err != nil {
		t.Fatalf("the external module's tests failed: %v", err)
	}
}
