package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// TestNaiveJoints runs the demo once per naive joint, small: each must show
// its bug (a naive figure off the ground truth) while the correct pipeline
// beside it stays exact (Run fails otherwise). The faults each one needs:
// gateway, publishes that fail (lost behind the early 2xx); sink, a stream
// that goes quiet and kills (rows left in the buffer); merge, versions
// written in separate parts; mv, kills that replay inserted batches; avg,
// none (the zeros dilute every average).
func TestNaiveJoints(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end runs of about 15 s each")
	}
	tests := []struct {
		naive          devmetrics.Naive
		events, kills  int
		killClickHouse bool
	}{
		{naive: devmetrics.NaiveGateway, events: 1000},
		{naive: devmetrics.NaiveSink, events: 1000, kills: 1},
		{naive: devmetrics.NaiveMerge, events: 1000},
		{naive: devmetrics.NaiveMV, events: 1200, kills: 3, killClickHouse: true},
		{naive: devmetrics.NaiveAvg, events: 1000},
	}
	for _, tt := range tests {
		t.Run(string(tt.naive), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cfg := testConfig(t)
			cfg.Naive, cfg.Events, cfg.Kills = string(tt.naive), tt.events, tt.kills
			cfg.KillClickHouse, cfg.KillKafka = tt.killClickHouse, false
			cfg.Seed = uint64(time.Now().UnixNano())
			t.Logf("seed %d", cfg.Seed)
			res, err := RunResult(ctx, cfg)
			require.NoError(t, err, "the correct pipeline beside the naive %s joint", tt.naive)
			require.NotEmpty(t, res.Naive)
			assert.True(t, res.NaiveShows, "naive %s shows no bug: %+v", tt.naive, res.Naive)
		})
	}
}
