package testkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a testing.TB that records Fatalf and Skipf instead of ending
// the test.
type recorder struct {
	testing.TB
	fataled, skipped bool
	msg              string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fataled, r.msg = true, fmt.Sprintf(format, args...)
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
}

// TestUnavailable proves the CI rule: with CI=true an unavailable service
// fails the test, otherwise it skips it, with the reason either way.
func TestUnavailable(t *testing.T) {
	tests := []struct {
		name        string
		give        string
		wantFatal   bool
		wantSkipped bool
	}{
		{name: "CI=true fails", give: "true", wantFatal: true},
		{name: "CI unset skips", give: "", wantSkipped: true},
		{name: "CI=false skips", give: "false", wantSkipped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvCI, tt.give)
			r := &recorder{TB: t}
			Unavailable(r, "redis", errors.New("no redis-server"))
			assert.Equal(t, tt.wantFatal, r.fataled)
			assert.Equal(t, tt.wantSkipped, r.skipped)
			assert.Contains(t, r.msg, "no redis-server")
		})
	}
}

func TestName(t *testing.T) {
	a, b := Name(t, "topic"), Name(t, "topic")
	assert.NotEqual(t, a, b, "unique per call")
	assert.True(t, strings.HasPrefix(a, "topic_testname_"), a)
	assert.LessOrEqual(t, len(a), 60)
	for _, r := range a {
		assert.True(t, r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9', "rune %q in %q", r, a)
	}
	long := Name(t, strings.Repeat("x", 100))
	assert.LessOrEqual(t, len(long), 60)
}

// ctxRecorder is a recorder whose Context ends when the test says.
type ctxRecorder struct {
	*recorder
	ctx context.Context
}

func (r ctxRecorder) Context() context.Context { return r.ctx }

// EventuallyRows returns once the rows equal want, and otherwise fails
// with the last rows beside want.
func TestEventuallyRows(t *testing.T) {
	addr, db := ClickHouse(t)
	require.NoError(t, Exec(t.Context(), addr, db, "CREATE TABLE t (k String, n UInt64) ENGINE = ReplacingMergeTree(n) ORDER BY k"))
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = Exec(context.Background(), addr, db, "INSERT INTO t VALUES ('a', 1), ('b', 2)")
		_ = Exec(context.Background(), addr, db, "INSERT INTO t VALUES ('a', 3)")
	}()
	EventuallyRows(t, addr, db, "SELECT k, n FROM t FINAL ORDER BY k", [][]string{{"a", "3"}, {"b", "2"}})

	// Long enough for a query to complete on a loaded machine: the
	// failure shows the last complete answer.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r := ctxRecorder{&recorder{TB: t}, ctx}
	EventuallyRows(r, addr, db, "SELECT k, n FROM t FINAL ORDER BY k", [][]string{{"a", "4"}})
	require.True(t, r.fataled)
	assert.Contains(t, r.msg, "returns 2 rows:\n\ta | 3\n\tb | 2\nwant 1 rows:\n\ta | 4\n")
}
