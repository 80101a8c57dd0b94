package peers

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// tableDDL is every system's output, in a database of its own per run.
var tableDDL = []string{
	`CREATE TABLE %[1]s.events (tenant LowCardinality(String), event_id String, at DateTime64(3, 'UTC'))
	ENGINE = MergeTree ORDER BY (tenant, at, event_id)
	SETTINGS non_replicated_deduplication_window = 10000, enable_block_number_column = 1`,
	`CREATE TABLE %[1]s.tenant_minute (tenant String, start DateTime64(3, 'UTC'), version UInt64, events UInt64)
	ENGINE = ReplacingMergeTree(version) ORDER BY (tenant, start)
	SETTINGS non_replicated_deduplication_window = 10000`,
}

// newOutput creates a run's database and tables.
func newOutput(t *testing.T, e *env) string {
	t.Helper()
	db := testkit.NewDatabase(t, e.chAddr)
	for _, q := range tableDDL {
		if err := testkit.Exec(context.Background(), e.chAddr, "", fmt.Sprintf(q, db)); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// dupes is what an at-least-once output holds beyond the ground truth.
type dupes struct {
	rows       int64 // rows of events beyond one per event id
	windows    int   // windows whose count (FINAL) is over the truth
	overCounts int64 // by how many events, summed
}

func (d dupes) String() string {
	return fmt.Sprintf("%d duplicate events rows, %d windows over-counted (by %d events)", d.rows, d.windows, d.overCounts)
}

// check compares the output with the ground truth: every event id once,
// no other, and every window's count (FINAL) exact.
func check(t *testing.T, e *env, db string) error {
	t.Helper()
	d, err := audit(t, e, db)
	if err == nil && d != (dupes{}) {
		err = fmt.Errorf("not exact: %v", d)
	}
	return err
}

// audit compares the output with the ground truth and counts its
// duplicates; anything else is an error: an event id missing (or not of
// the input), a window missing, under-counted or not of the input.
func audit(t *testing.T, e *env, db string) (dupes, error) {
	t.Helper()
	var d dupes
	rows, err := testkit.QueryStrings(context.Background(), e.chAddr, "",
		fmt.Sprintf("SELECT count(), uniqExact(event_id) FROM %s.events", db))
	if err != nil {
		return d, err
	}
	n, _ := strconv.ParseInt(rows[0][0], 10, 64)
	if rows[0][1] != strconv.Itoa(e.in.unique) || n < int64(e.in.unique) {
		return d, fmt.Errorf("events: %s rows, %s distinct ids; want %d of each", rows[0][0], rows[0][1], e.in.unique)
	}
	d.rows = n - int64(e.in.unique)
	rows, err = testkit.QueryStrings(context.Background(), e.chAddr, "",
		fmt.Sprintf("SELECT tenant, toUnixTimestamp64Milli(start), events FROM %s.tenant_minute FINAL WHERE NOT startsWith(tenant, '%s')", db, e.in.sentinel))
	if err != nil {
		return d, err
	}
	got := map[window]int64{}
	for _, r := range rows {
		start, _ := strconv.ParseInt(r[1], 10, 64)
		n, _ := strconv.ParseInt(r[2], 10, 64)
		got[window{r[0], start}] = n
	}
	var wrong []string
	for w, want := range e.in.windows {
		switch n := got[w]; {
		case n > want:
			d.windows++
			d.overCounts += n - want
		case n < want:
			wrong = append(wrong, fmt.Sprintf("%s %s: %d, want %d", w.tenant, time.UnixMilli(w.start).UTC().Format("15:04"), n, want))
		}
	}
	for w, n := range got {
		if _, ok := e.in.windows[w]; !ok {
			wrong = append(wrong, fmt.Sprintf("%s %s: %d, want none", w.tenant, time.UnixMilli(w.start).UTC().Format("15:04"), n))
		}
	}
	if len(wrong) > 0 {
		sort.Strings(wrong)
		return d, fmt.Errorf("%d of %d windows wrong, e.g. %s", len(wrong), len(e.in.windows), strings.Join(wrong[:min(5, len(wrong))], "; "))
	}
	return d, nil
}
