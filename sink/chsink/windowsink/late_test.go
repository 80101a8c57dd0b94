package windowsink_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// lockedBuffer is a bytes.Buffer a logger and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.Lines(l.b.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == "WARN" {
			out = append(out, m)
		}
	}
	return out
}

// Late events are never dropped without a word: the first is warned of at
// once, the next ones in one line per 10 s with their count, and Late
// returns each after its Add.
func TestLateEventsWarned(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE minutes (key String, start DateTime64(3, 'UTC'), "+
		"end DateTime64(3, 'UTC'), events UInt64, version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start) "+
		"SETTINGS non_replicated_deduplication_window = 100"))
	var logs lockedBuffer
	clock := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	op, err := window.New(window.Tumbling(time.Minute), window.Count[int]{}, window.Options{})
	require.NoError(t, err)
	ws, err := windowsink.New(t.Context(), chsink.Table{Addr: addr, Name: "minutes"}, checkpoint.TopicPartition{Topic: "t"},
		checkpoint.NewMemoryStorage(), op, sessionColumns, windowsink.Options{Sink: chsink.Options{Database: db,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Now: func() time.Time { return clock }}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ws.Close() })

	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	offset := int64(0)
	add := func(at time.Time) int {
		require.NoError(t, ws.Add(t.Context(), offset, window.Event[int]{Key: "k", Time: at, Value: 1}))
		offset++
		return len(ws.Late())
	}
	require.Zero(t, add(base.Add(5*time.Minute)), "the watermark at 08:05")
	assert.Equal(t, 1, add(base), "late: its window closed at 08:01")
	require.Len(t, logs.lines(), 1, "the first late event is warned of at once")
	assert.Equal(t, 1, add(base.Add(time.Second)))
	assert.Equal(t, 1, add(base.Add(2*time.Second)))
	require.Len(t, logs.lines(), 1, "no second line within 10 s")
	clock = clock.Add(11 * time.Second)
	assert.Equal(t, 1, add(base.Add(3*time.Second)))
	warns := logs.lines()
	require.Len(t, warns, 2)
	assert.Equal(t, []any{float64(1), float64(1)}, []any{warns[0]["late"], warns[0]["late_total"]})
	assert.Equal(t, []any{float64(3), float64(4)}, []any{warns[1]["late"], warns[1]["late_total"]}, "the count since the last line")
	assert.Equal(t, "minutes", warns[1]["table"])
	assert.Contains(t, warns[1]["msg"], "late events not written")
	assert.Equal(t, uint64(4), op.Counters().Late, "the metric's counter")
}
