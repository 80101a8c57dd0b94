package demo

import (
	"context"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPipelineUnderFaults runs the whole pipeline with a random seed:
// failed and lost-acknowledged publishes, duplicate deliveries, processors
// killed with SIGKILL four times, ClickHouse killed and restarted, a gateway
// restart with manual redeliveries (keys in memory or in Redis, by the
// seed's parity). With one processor the run is on an Apache Kafka broker
// of its own, which it kills with SIGKILL and restarts on the same log. Two
// processors share one consumer group, so partitions move between them on
// every kill; they run on kfake, the one broker that loses produce
// acknowledgements at the wire after the write (kafkafault.ProduceLostAck;
// Apache Kafka has no such hook, so there the gateway loses them itself),
// and the gateway's idempotent producer must write no record twice. GitHub
// sends each delivery once and a redeliverer recovers the failed ones
// through a fake GitHub REST API; Jira retries. A run fails unless every
// failed GitHub delivery was recovered, ClickHouse ends up holding every
// normalized event exactly once and every per-employee hourly metric exact
// (materialized-view rollup, window table FINAL, deployments and incidents
// FINAL), the hourly dashboard saw partial (early) window rows of hours
// that had not closed yet, and the dead-letter topic holds each poison
// record once. Reproduce a failure with the logged seed: PIPELINE_SEED=N go
// test -run TestPipelineUnderFaults ./harness/internal/demo.
func TestPipelineUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end runs of about 20 s each")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PIPELINE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	store := []string{"memory", "redis"}[seed%2]
	t.Logf("seed %d, keys in %s (set PIPELINE_SEED to replay it)", seed, store)
	tests := []struct {
		name        string
		kafka       string
		instances   int
		killKafka   bool
		checkpoints string
	}{
		{name: "one processor on Apache Kafka killed", kafka: KafkaApache, instances: 1, killKafka: true, checkpoints: "fs"},
		{name: "two processors with checkpoints on S3 and acks lost at the wire", kafka: KafkaFake, instances: 2, killKafka: false, checkpoints: "s3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Generous: under -race at load 60 the Apache Kafka run was
			// still delivering after 5 minutes (its broker's start and
			// restart take 20 to 30 s each there).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cfg := testConfig(t)
			cfg.Events, cfg.Kills, cfg.Store, cfg.Seed = 3000, 4, store, seed
			cfg.Instances, cfg.KillKafka, cfg.Checkpoints, cfg.Kafka = tt.instances, tt.killKafka, tt.checkpoints, tt.kafka
			res, err := RunResult(ctx, cfg)
			require.NoError(t, err)
			if tt.kafka == KafkaFake && os.Getenv("KAFKA_BROKERS") == "" {
				// The idempotent producer, through lost acknowledgements at
				// the wire. (A produce in flight when the broker is killed
				// has an unknown outcome: the provider's retry may write it
				// again, which dedup drops; so only without that kill.)
				assert.Positive(t, res.LostAcks, "lost acknowledgements injected at the wire")
				assert.Equal(t, res.Distinct, res.Records, "records written twice by the idempotent producer after %d lost acks", res.LostAcks)
			}
		})
	}
}

// testConfig is the demo's default configuration (its flags' defaults),
// in a temporary directory, reporting through t.Log.
func testConfig(t *testing.T) Config {
	var cfg Config
	cfg.RegisterFlags(flag.NewFlagSet("demo", flag.PanicOnError))
	cfg.Dir = t.TempDir()
	cfg.Stdout = testWriter{t}
	cfg.Binaries = binaries(t)
	return cfg
}

// testWriter writes each line to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
