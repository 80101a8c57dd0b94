package testkit_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestNoAWSDependency proves a module that imports testkit (and not
// testkit/s3kit) does not compile the AWS SDK: S3 lives in s3kit so that
// Kafka, ClickHouse and Redis tests stay light.
func TestNoAWSDependency(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err)
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", "github.com/exactlyonce/exactlyonce/testkit").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/exactlyonce/exactlyonce/internal/embedded")
	for _, d := range deps {
		assert.False(t, strings.Contains(d, "aws") || strings.Contains(d, "smithy"), "testkit depends on %s", d)
	}
}

// TestUserModuleHasNoAWS proves what a user's module gets from importing
// testkit and nothing else of the SDK: after go mod tidy, its go.mod and
// go.sum name no AWS module, and none is compiled into its tests. (go list
// -m all of that module still prints the AWS SDK modules: it lists the
// SDK's own requirements, which checkpoint/s3storage and testkit/s3kit
// need, whether used or not; none of them is downloaded or built.)
func TestUserModuleHasNoAWS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in another module")
	}
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err)
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	sdkMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	goLine := "go 1.26.0"
	for l := range strings.Lines(string(sdkMod)) {
		if strings.HasPrefix(l, "go ") {
			goLine = strings.TrimSpace(l) // the SDK's minimum, so tidy changes nothing else
		}
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/kitonly\n\n" + goLine + "\n\nrequire github.com/exactlyonce/exactlyonce v0.0.0\n\n" +
			"replace github.com/exactlyonce/exactlyonce => " + root + "\n",
		"kit_test.go": "package kitonly\n\nimport (\n\t\"testing\"\n\n\t\"github.com/exactlyonce/exactlyonce/testkit\"\n)\n\n" +
			"func TestKit(t *testing.T) { _ = testkit.Name(t, \"x\") }\n",
	}
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), goTool, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil && offline(string(out)) {
			testkit.Unavailable(t, "the Go module proxy (go "+args[0]+" needs the module cache or the network)", fmt.Errorf("%w: %s", err, out))
		}
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run("mod", "tidy")
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if name == "go.sum" && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		for l := range strings.Lines(string(b)) {
			assert.False(t, isAWS(l), "%s of a module importing only testkit has %q", name, strings.TrimSpace(l))
		}
	}
	mods := strings.Fields(run("list", "-deps", "-test", "-f", "{{with .Module}}{{.Path}}{{end}}", "./..."))
	require.Contains(t, mods, "github.com/exactlyonce/exactlyonce")
	for _, m := range mods {
		assert.False(t, isAWS(m), "the tests of a module importing only testkit build %s", m)
	}
}

func isAWS(s string) bool { return strings.Contains(s, "github.com/aws/") }

// offline says whether the go command failed for want of the network or the
// module proxy, not because of the module.
func offline(out string) bool {
	for _, s := range []string{"dial tcp", "no such host", "i/o timeout", "connection refused", "GOPROXY=off", "network is unreachable", "TLS handshake"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}
