package chsql

import (
	"context"
	"fmt"
	"strings"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// Quote returns s as a ClickHouse string literal.
func Quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}

// Ident returns s as a quoted identifier.
func Ident(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}

// JoinIdents returns names as quoted identifiers separated by commas.
func JoinIdents(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = Ident(n)
	}
	return strings.Join(q, ", ")
}

// Strings runs body and returns the rows of its String columns, which
// body names c0, c1 ... c(ncols-1).
func Strings(ctx context.Context, c *ch.Client, body string, ncols int) ([][]string, error) {
	cols := make([]*proto.ColStr, ncols)
	var res proto.Results
	for i := range cols {
		cols[i] = new(proto.ColStr)
		res = append(res, proto.ResultColumn{Name: fmt.Sprintf("c%d", i), Data: cols[i]})
	}
	var rows [][]string
	err := c.Do(ctx, ch.Query{
		Body:   body,
		Result: res,
		OnResult: func(context.Context, proto.Block) error {
			for r := 0; r < cols[0].Rows(); r++ {
				row := make([]string, ncols)
				for i, col := range cols {
					row[i] = col.Row(r)
				}
				rows = append(rows, row)
			}
			for _, col := range cols {
				col.Reset()
			}
			return nil
		},
	})
	return rows, err
}

// DropTable is the statement that drops db.table if it exists, waiting
// until it is gone.
func DropTable(db, table string) string {
	return "DROP TABLE IF EXISTS " + Ident(db) + "." + Ident(table) + " SYNC"
}
