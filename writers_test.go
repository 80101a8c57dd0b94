package exactlyonce_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWritersWaitForAcks: every kafka.Writer literal in the module, tests
// included, names its RequiredAcks. kafka-go's zero value is acks=none: a
// write the broker drops (a new topic's leader not ready yet on a freshly
// started broker, say) returns no error, and a test then waits for records
// that were never written — TestOperatorCommands did, 1 run in 8 on a
// loaded machine.
func TestWritersWaitForAcks(t *testing.T) {
	fset := token.NewFileSet()
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
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isKafkaWriter(lit.Type) {
				return true
			}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "RequiredAcks" {
						return true
					}
				}
			}
			t.Errorf("%s: a kafka.Writer without RequiredAcks writes with acks=none: set kafka.RequireAll", fset.Position(lit.Pos()))
			return true
		})
		return nil
	})
	require.NoError(t, err)
}

func isKafkaWriter(e ast.Expr) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Writer" {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "kafka"
}
