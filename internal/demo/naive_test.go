package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/examples/devmetrics"
)

// TestNaiveJoints runs the demo once, small, with every naive joint beside
// the correct pipeline: each joint must show its bug (a naive figure off
// the ground truth) while the correct pipeline stays exact (Run fails
// otherwise). The faults each one needs are in the run: gateway, publishes
// that fail (lost behind the early 2xx); sink, kills and a stream that goes
// quiet (rows left in the buffer); merge, versions written in separate
// parts; mv, kills that replay inserted batches; avg, none (the zeros
// dilute every average).
func TestNaiveJoints(t *testing.T) {
	if testing.Short() {
		t.Skip("an end-to-end run of about 25 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := testConfig(t)
	cfg.Naive, cfg.Events, cfg.Kills, cfg.KillClickHouse, cfg.KillKafka = "all", 1200, 3, true, false
	cfg.Seed = uint64(time.Now().UnixNano())
	t.Logf("seed %d", cfg.Seed)
	res, err := RunResult(ctx, cfg)
	require.NoError(t, err, "the correct pipeline beside the naive joints")
	for _, n := range devmetrics.Naives() {
		require.NotEmpty(t, res.Naive[n], "naive %s", n)
		assert.True(t, res.NaiveShows[n], "naive %s shows no bug: %+v", n, res.Naive[n])
	}
}
