package testkit

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// ReadOption changes how Table reads a table.
type ReadOption int

const (
	// Final reads the table with FINAL: a ReplacingMergeTree (or another
	// merging engine) shows its rows as merged, whatever the background
	// merges have done so far. Use it to check what a query of the merged
	// result would see.
	Final ReadOption = iota + 1
)

// Table returns every row of table in database, ordered by all columns,
// each column formatted as ClickHouse's toString does. With Final the
// table is read with FINAL. It fails the test on error.
func Table(t testing.TB, addr, database, table string, opts ...ReadOption) [][]string {
	t.Helper()
	from := quoteIdent(table)
	for _, o := range opts {
		if o == Final {
			from += " FINAL"
		}
	}
	return Rows(t, addr, database, "SELECT * FROM "+from+" ORDER BY ALL")
}

// Rows runs query in database and returns its rows, each column formatted
// as ClickHouse's toString does (a NULL as "NULL"), in the query's order. It fails the test on
// error.
func Rows(t testing.TB, addr, database, query string) [][]string {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	rows, err := QueryStrings(ctx, addr, database, query)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Count returns the result of a query that selects one number, such as
// "SELECT count() FROM events FINAL". It fails the test on error.
func Count(t testing.TB, addr, database, query string) uint64 {
	t.Helper()
	ctx, cancel := setupContext(t)
	defer cancel()
	n, err := QueryCount(ctx, addr, database, query)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// QueryStrings is Rows without a test: it learns the query's columns with
// DESCRIBE, then reads each of them through toString.
func QueryStrings(ctx context.Context, addr, database, query string) ([][]string, error) {
	c, err := dialClickHouse(ctx, addr, database)
	if err != nil {
		return nil, fmt.Errorf("testkit: dial clickhouse %s: %w", addr, err)
	}
	defer c.Close()

	// DESCRIBE answers String columns only (name, type, defaults, ...).
	var desc proto.Results
	var names []string
	if err := c.Do(ctx, ch.Query{
		Body:   "DESCRIBE (" + query + ")",
		Result: desc.Auto(),
		OnResult: func(context.Context, proto.Block) error {
			for _, col := range desc {
				if col.Name != "name" {
					continue
				}
				var str *proto.ColStr
				switch d := col.Data.(type) {
				case *proto.ColStr:
					str = d
				case *proto.ColAuto:
					str, _ = d.Data.(*proto.ColStr)
				}
				if str == nil {
					return fmt.Errorf("DESCRIBE name column of type %s", col.Data.Type())
				}
				for i := 0; i < str.Rows(); i++ {
					names = append(names, str.Row(i))
				}
				str.Reset()
			}
			return nil
		},
	}); err != nil {
		return nil, fmt.Errorf("testkit: describe %s: %w", firstLine(query), err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("testkit: %s: no columns", firstLine(query))
	}
	exprs := make([]string, len(names))
	cols := make([]*proto.ColStr, len(names))
	res := make(proto.Results, len(names))
	for i := range exprs {
		exprs[i] = fmt.Sprintf("ifNull(toString(%s), 'NULL') AS c%d", quoteIdent(names[i]), i)
		cols[i] = new(proto.ColStr)
		res[i] = proto.ResultColumn{Name: fmt.Sprintf("c%d", i), Data: cols[i]}
	}
	var rows [][]string
	err = c.Do(ctx, ch.Query{
		Body:   "SELECT " + strings.Join(exprs, ", ") + " FROM (" + query + ")",
		Result: res,
		OnResult: func(context.Context, proto.Block) error {
			for r := 0; r < cols[0].Rows(); r++ {
				row := make([]string, len(cols))
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
	if err != nil {
		return nil, fmt.Errorf("testkit: %s: %w", firstLine(query), err)
	}
	return rows, nil
}

func quoteIdent(s string) string {
	// A qualified name db.table keeps its dot.
	parts := strings.Split(s, ".")
	for i, p := range parts {
		parts[i] = "`" + strings.ReplaceAll(p, "`", "``") + "`"
	}
	return strings.Join(parts, ".")
}

func firstLine(q string) string {
	q = strings.TrimSpace(q)
	if i := strings.IndexByte(q, '\n'); i >= 0 {
		q = q[:i] + " ..."
	}
	return q
}

// eventuallyTimeout bounds EventuallyRows: a service restarted after a
// kill rejoins its consumer group and replays from its checkpoint first.
const eventuallyTimeout = 2 * time.Minute

// EventuallyRows runs query in database every 100 ms until its rows, as
// Rows formats them, equal want, and fails the test with the last rows
// beside want if they do not within two minutes. Read with FINAL (or
// Table's Final) to check what a query of the merged result sees:
//
//	testkit.EventuallyRows(t, addr, db, "SELECT org, start, events FROM org_minute FINAL ORDER BY ALL", want)
//
// Rows of event-time windows appear only once a later event's watermark
// closes them: an input whose last events are the ones checked needs one
// more event after them. An event behind a closed window is dropped as
// late (windowsink.Sink.Late, the window.late_events metric), never
// written.
func EventuallyRows(t testing.TB, addr, database, query string, want [][]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), eventuallyTimeout)
	if tt, ok := t.(interface{ Context() context.Context }); ok {
		ctx, cancel = context.WithTimeout(tt.Context(), eventuallyTimeout)
	}
	defer cancel()
	start := time.Now()
	var got [][]string
	var err error
	for attempt := 0; ; attempt++ {
		rows, qerr := QueryStrings(ctx, addr, database, query)
		if qerr == nil && (len(rows) == 0 && len(want) == 0 || reflect.DeepEqual(rows, want)) {
			return
		}
		// The failure shows the last answer of a query that ran to its
		// end: one the deadline cut off may look like no rows at all.
		if attempt == 0 || ctx.Err() == nil {
			got, err = rows, qerr
		}
		select {
		case <-ctx.Done():
			if err != nil {
				t.Fatalf("testkit: EventuallyRows: %v", err)
			}
			t.Fatalf("testkit: EventuallyRows: after %v, %s\nreturns %d rows:\n%swant %d rows:\n%s",
				time.Since(start).Round(time.Millisecond), firstLine(query), len(got), formatRows(got), len(want), formatRows(want))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// formatRows prints rows one a line, at most 50 of them.
func formatRows(rows [][]string) string {
	var b strings.Builder
	for i, r := range rows {
		if i == 50 {
			fmt.Fprintf(&b, "\t... %d more\n", len(rows)-50)
			break
		}
		fmt.Fprintf(&b, "\t%s\n", strings.Join(r, " | "))
	}
	return b.String()
}
