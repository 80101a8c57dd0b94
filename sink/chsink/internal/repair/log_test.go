package repair

import (
	"context"
	"testing"

	"github.com/ClickHouse/ch-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogWatch: a watched query asks for the server's log without
// changing the caller's settings, and collects the dropped blocks its log
// reports, nothing else.
func TestLogWatch(t *testing.T) {
	settings := make([]ch.Setting, 1, 4)
	settings[0] = ch.Setting{Key: "insert_deduplication_token", Value: "tok"}
	var log Log
	q := log.Watch(ch.Query{Body: "INSERT", Settings: settings})
	assert.Equal(t, []ch.Setting{settings[0], {Key: "send_logs_level", Value: "information"}}, q.Settings)
	assert.Equal(t, ch.Setting{}, settings[:2][1], "the caller's array, which had room, is not written")

	require.NoError(t, q.OnLogs(context.Background(), []ch.Log{
		{Source: "demo.events (x)", Text: "Renaming temporary part"},
		{Source: "demo.events (x)", Text: "Block with ID all_1_2 already exists as part all_19_19_1; ignoring it"},
	}))
	assert.Equal(t, []dedupHit{{db: "demo", table: "events", part: "all_19_19_1"}}, log.hits)
}

// TestSettleWithoutHits: with no dropped block to check, Settle does
// nothing, not even a query (the connection is nil here; a batch of an
// earlier run would have the server's run read).
func TestSettleWithoutHits(t *testing.T) {
	r := New(Config{Database: "db", Table: "events"})
	in := intent
	in.Boot = "an earlier run"
	for _, log := range []*Log{nil, {}} {
		held, err := r.Settle(context.Background(), nil, nil, in, AsJournaled, log)
		assert.NoError(t, err)
		assert.Empty(t, held)
	}
}
