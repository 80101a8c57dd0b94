package exactlyonce_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/exactlyonce/exactlyonce"

// TestLayers keeps the tree's layers apart: internal/ holds the ground
// every layer may use (it imports no public package), and no program a
// user deploys is built with the project's harness (the demo, chaos and
// simulation machinery under harness/), with or without the demo tag.
func TestLayers(t *testing.T) {
	for _, tags := range []string{"", "demo"} {
		imports := goList(t, tags, "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
		for _, line := range imports {
			pkg, deps, _ := strings.Cut(line, " ")
			if !strings.HasPrefix(pkg, module+"/internal/") {
				continue
			}
			for _, dep := range strings.Fields(deps) {
				if strings.HasPrefix(dep, module+"/") && !strings.HasPrefix(dep, module+"/internal/") {
					t.Errorf("%s imports the public package %s: internal/ is the ground layer (tags %q)", pkg, dep, tags)
				}
			}
		}
		for _, bin := range []string{"./cmd/...", "./examples/gateway", "./examples/processor", "./examples/devmetrics", "./examples/githubredeliver"} {
			for _, dep := range goList(t, tags, "{{.ImportPath}}", "-deps", bin) {
				assert.False(t, strings.HasPrefix(dep, module+"/harness/"),
					"%s is built with the harness package %s (tags %q)", bin, dep, tags)
			}
		}
	}
}

func goList(t *testing.T, tags, format string, args ...string) []string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-tags=" + tags, "-f", format}, args...)...)
	out, err := cmd.Output()
	require.NoError(t, err, "go list %v", args)
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
