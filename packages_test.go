package exactlyonce_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPackagesListed checks docs/packages.md against `go list ./...`:
// every public package (not under internal/) is named there in
// backquotes, by its path in the module, and the client versions it
// states are the go.mod's.
func TestPackagesListed(t *testing.T) {
	goTool, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err)
	out, err := exec.CommandContext(t.Context(), goTool, "list", "./...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile("docs/packages.md")
	require.NoError(t, err)
	doc := string(b)
	const module = "github.com/exactlyonce/exactlyonce"
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "internal" || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") {
			continue
		}
		if rel == "" {
			rel = module
		}
		assert.True(t, strings.Contains(doc, "`"+rel+"`"), "docs/packages.md does not list %s (as `%s`)", pkg, rel)
	}

	mod, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	for _, client := range []string{"github.com/ClickHouse/ch-go", "github.com/segmentio/kafka-go"} {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(client) + ` (v\S+)`).FindStringSubmatch(string(mod))
		require.NotNil(t, m, "go.mod requires %s", client)
		assert.True(t, strings.Contains(doc, "`"+client+"` "+m[1]), "docs/packages.md does not state the range of %s from go.mod's %s", client, m[1])
	}
}

// TestPackageDocs: every library package (as in TestPackagesStability) has
// a doc.go whose package comment has a "# Guarantees" section (what the
// package promises, which its tests hold it to) and links each of its
// sentinel errors ([ErrX], in its # Errors section).
func TestPackageDocs(t *testing.T) {
	goTool, err := exec.LookPath("go")
	require.NoError(t, err)
	out, err := exec.CommandContext(t.Context(), goTool, "list", "-f", "{{.ImportPath}} {{.Dir}} {{.Name}}", "./...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	const module = "github.com/exactlyonce/exactlyonce/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		rel, ok := strings.CutPrefix(f[0], module)
		if !ok || !library(rel) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(f[1], "doc.go"))
		if !assert.NoError(t, err, "%s has no doc.go", rel) {
			continue
		}
		doc, _, found := strings.Cut(string(b), "\npackage "+f[2]+"\n")
		assert.True(t, found, "%s/doc.go declares package %s", rel, f[2])
		assert.True(t, strings.HasPrefix(doc, "// Package "+f[2]+" "), "%s/doc.go's comment starts with \"Package %s\"", rel, f[2])
		assert.Contains(t, doc, "\n// # Guarantees\n", "%s/doc.go's package comment has no # Guarantees section", rel)
		for _, name := range sentinels(t, f[1]) {
			assert.Contains(t, doc, "["+name+"]", "%s/doc.go's # Errors section does not link [%s]", rel, name)
		}
	}
}

// sentinels returns the exported Err variables of the package in dir that
// are not deprecated.
func sentinels(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				comment := vs.Doc
				if comment == nil && len(g.Specs) == 1 {
					comment = g.Doc
				}
				if comment != nil && strings.Contains(comment.Text(), "Deprecated:") {
					continue
				}
				for _, n := range vs.Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	return names
}

// library reports whether the package at rel (a path in the module) is
// one of the SDK's library packages: not internal, not the harness, an
// example or a command.
func library(rel string) bool {
	return !(rel == "internal" || strings.HasPrefix(rel, "internal/") || strings.Contains(rel, "/internal/") ||
		strings.HasPrefix(rel, "harness/") || strings.HasPrefix(rel, "examples/") || strings.HasPrefix(rel, "cmd/"))
}

// TestPackagesStability: every library package (not internal/, harness/,
// examples/ or cmd/) is named in docs/packages.md's "## Stability" section,
// so a new package gets a place in the stable or the experimental list.
func TestPackagesStability(t *testing.T) {
	goTool, err := exec.LookPath("go")
	require.NoError(t, err)
	out, err := exec.CommandContext(t.Context(), goTool, "list", "./...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile("docs/packages.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Stability\n")
	require.True(t, ok, "docs/packages.md has a ## Stability section")
	section, _, _ = strings.Cut(section, "\n## ")
	const module = "github.com/exactlyonce/exactlyonce/"
	for _, pkg := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok || !library(rel) {
			continue
		}
		assert.True(t, strings.Contains(section, "`"+rel+"`"), "docs/packages.md's Stability section does not place %s (as `%s`)", pkg, rel)
	}
}
