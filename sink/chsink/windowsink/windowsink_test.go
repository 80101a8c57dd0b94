package windowsink_test

import (
	"errors"
	"fmt"
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

// New refuses, at start-up and with the reason, every table that would
// not keep exactly the latest row of each window, and options it would
// have to ignore.
func TestNewRefusesTablesThatDoNotReplace(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	const cols = "key String, start DateTime64(3, 'UTC'), end DateTime64(3, 'UTC'), events UInt64"
	const dedup = " SETTINGS non_replicated_deduplication_window = 100"
	tests := []struct {
		name, engine string
		session      bool
		opts         windowsink.Options
		want         string // in the error; "" accepts
	}{
		{"plain MergeTree", ", version UInt64) ENGINE = MergeTree ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "window rows need ReplacingMergeTree(version)"},
		{"no version", ", version UInt64) ENGINE = ReplacingMergeTree ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "has no version column"},
		{"other version", ", v UInt64, version UInt64) ENGINE = ReplacingMergeTree(v) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, `version column is "v", Options.VersionColumn is "version"`},
		{"version type", ", version UInt32) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, "is UInt32; the sink writes Row.Version as UInt64"},
		{"session without deleted", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, true, windowsink.Options{}, "session windows need ReplacingMergeTree(version, deleted)"},
		{"other deleted", ", version UInt64, del UInt8) ENGINE = ReplacingMergeTree(version, del) ORDER BY (key, start)" + dedup, true, windowsink.Options{}, `is_deleted column is "del", Options.DeletedColumn is "deleted"`},
		{"windows", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{}, ""},
		{"sessions", ", ver UInt64, del UInt8) ENGINE = ReplacingMergeTree(ver, del) ORDER BY (key, start)" + dedup, true, windowsink.Options{VersionColumn: "ver", DeletedColumn: "del"}, ""},
		{"keep first", ", version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY (key, start)" + dedup, false, windowsink.Options{Sink: chsink.Options{OnMismatch: chsink.MismatchKeepFirst}}, "leave it unset"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			table := fmt.Sprintf("t%d", i)
			require.NoError(t, testkit.Exec(t.Context(), addr, db, "CREATE TABLE "+table+" ("+cols+tt.engine))
			spec := window.Tumbling(time.Minute)
			if tt.session {
				spec = window.Session(time.Minute)
			}
			op, err := window.New(spec, window.Count[int]{}, window.Options{})
			require.NoError(t, err)
			tt.opts.Sink.Database = db
			ws, err := windowsink.New(t.Context(), chsink.Table{Addr: addr, Name: table}, checkpoint.TopicPartition{Topic: "t", Partition: 0},
				checkpoint.NewMemStorage(), op, sessionColumns, tt.opts)
			if tt.want == "" {
				require.NoError(t, err)
				require.NoError(t, ws.Close())
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if _, ok := errors.AsType[*chsink.TableCheckError](err); ok {
				assert.ErrorIs(t, err, windowsink.ErrNotReplacing)
			} else {
				assert.ErrorIs(t, err, windowsink.ErrInvalidOptions)
			}
		})
	}
}
