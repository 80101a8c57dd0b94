package windowsink

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Engines as ClickHouse 26.7 prints them in system.tables.engine_full.
func TestParseEngine(t *testing.T) {
	tests := []struct {
		engine, full string
		want         replacing
	}{
		{"ReplacingMergeTree", "ReplacingMergeTree(version, deleted) ORDER BY (key, start) SETTINGS index_granularity = 8192",
			replacing{family: true, version: "version", deleted: "deleted"}},
		{"ReplacingMergeTree", "ReplacingMergeTree(version) ORDER BY (org, start) SETTINGS non_replicated_deduplication_window = 1000, index_granularity = 8192",
			replacing{family: true, version: "version"}},
		{"ReplacingMergeTree", "ReplacingMergeTree ORDER BY (org, start) SETTINGS index_granularity = 8192",
			replacing{family: true}},
		{"ReplicatedReplacingMergeTree", "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/db/t', '{replica}', ver, `is del`) ORDER BY k",
			replacing{family: true, version: "ver", deleted: "is del"}},
		{"ReplicatedReplacingMergeTree", "ReplicatedReplacingMergeTree('/p,(x)', 'r1') ORDER BY k",
			replacing{family: true}},
		{"SharedReplacingMergeTree", "SharedReplacingMergeTree('/clickhouse/tables/{uuid}/{shard}', '{replica}', version) ORDER BY k",
			replacing{family: true, version: "version"}},
		{"MergeTree", "MergeTree ORDER BY k SETTINGS index_granularity = 8192", replacing{}},
		{"SummingMergeTree", "SummingMergeTree(events) ORDER BY k", replacing{}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, parseEngine(tt.engine, tt.full), tt.full)
	}
}
