package exactlyonce_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// apiFile records the exported API of every public package, one
// declaration a line, without comments: a change to it shows in review.
const apiFile = "api/exactlyonce.txt"

// TestAPI fails when the exported API differs from apiFile. After an
// intended change, UPDATE_API=1 go test -run TestAPI . rewrites the file;
// a removal or a changed signature is a breaking change and belongs in
// the CHANGELOG.
func TestAPI(t *testing.T) {
	got := exportedAPI(t)
	if os.Getenv("UPDATE_API") == "1" {
		require.NoError(t, os.WriteFile(apiFile, []byte(got), 0o644))
	}
	want, err := os.ReadFile(apiFile)
	require.NoError(t, err, "UPDATE_API=1 go test -run TestAPI . writes it")
	assert.Equal(t, string(want), got, "the exported API changed: review the diff, then UPDATE_API=1 go test -run TestAPI . (and say it in CHANGELOG.md)")
}

// exportedAPI lists the exported declarations of the public packages:
// every package outside internal/, harness/, examples/, cmd/ and testdata.
func exportedAPI(t *testing.T) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		base := d.Name()
		if path != "." && (strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") || slices.Contains([]string{"internal", "harness", "examples", "cmd", "testdata", "bench", "api", "docs", "deploy"}, base)) {
			return filepath.SkipDir
		}
		if path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
		}
		decls, err := packageAPI(path)
		if err != nil {
			return err
		}
		lines = append(lines, decls...)
		return nil
	})
	require.NoError(t, err)
	return strings.Join(lines, "\n") + "\n"
}

func packageAPI(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pkgPath := "github.com/exactlyonce/exactlyonce"
	if dir != "." {
		pkgPath += "/" + filepath.ToSlash(dir)
	}
	fset := token.NewFileSet()
	var lines []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			for _, s := range declAPI(fset, decl) {
				lines = append(lines, pkgPath+": "+s)
			}
		}
	}
	slices.Sort(lines)
	return lines, nil
}

func declAPI(fset *token.FileSet, decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
			return nil
		}
		fn := *d
		fn.Doc, fn.Body = nil, nil
		return []string{node(fset, &fn)}
	case *ast.GenDecl:
		var out []string
		for _, spec := range d.Specs {
			switch s := spec.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				ts := *s
				ts.Doc, ts.Comment = nil, nil
				ts.Type = exportedOnly(ts.Type)
				out = append(out, "type "+node(fset, &ts))
			case *ast.ValueSpec:
				for _, name := range s.Names {
					if !name.IsExported() {
						continue
					}
					line := d.Tok.String() + " " + name.Name
					if s.Type != nil {
						line += " " + node(fset, s.Type)
					}
					out = append(out, line)
				}
			}
		}
		return out
	}
	return nil
}

func exportedRecv(recv *ast.FieldList) bool {
	typ := recv.List[0].Type
	for {
		switch x := typ.(type) {
		case *ast.StarExpr:
			typ = x.X
		case *ast.IndexExpr:
			typ = x.X
		case *ast.IndexListExpr:
			typ = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}

// exportedOnly drops a struct's unexported fields and every comment of a
// struct or interface.
func exportedOnly(typ ast.Expr) ast.Expr {
	switch x := typ.(type) {
	case *ast.StructType:
		fields := &ast.FieldList{}
		for _, f := range x.Fields.List {
			g := *f
			g.Doc, g.Comment, g.Names = nil, nil, nil
			for _, n := range f.Names {
				if n.IsExported() {
					g.Names = append(g.Names, n)
				}
			}
			embeddedExported := len(f.Names) == 0 && exportedRecv(&ast.FieldList{List: []*ast.Field{f}})
			if len(g.Names) > 0 || embeddedExported {
				fields.List = append(fields.List, &g)
			}
		}
		return &ast.StructType{Fields: fields}
	case *ast.InterfaceType:
		methods := &ast.FieldList{}
		for _, f := range x.Methods.List {
			g := *f
			g.Doc, g.Comment = nil, nil
			methods.List = append(methods.List, &g)
		}
		return &ast.InterfaceType{Methods: methods}
	}
	return typ
}

func node(fset *token.FileSet, n any) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, fset, n); err != nil {
		return "?" + err.Error()
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
