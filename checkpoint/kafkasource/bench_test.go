package kafkasource_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// BenchmarkThroughput consumes a topic of 4 × 250,000 records through chains
// with a dedup participant, without checkpoints and with a checkpoint every
// second. Run both in one invocation (-count) to compare on a noisy machine.
func BenchmarkThroughput(b *testing.B) {
	const (
		topic      = "bench"
		partitions = 4
		perPart    = 250_000
	)
	brokers := testkit.Kafka(b)
	testkit.CreateTopic(b, brokers, topic, partitions)
	produce(b, brokers, topic, partitions, 0, perPart)

	for _, tt := range []struct {
		name     string
		interval time.Duration
		batch    bool // ProcessBatch with ObserveBatch instead of Process with Observe
	}{
		{name: "checkpoints=off", interval: -1},
		{name: "interval=1s", interval: time.Second},
		{name: "batch/checkpoints=off", interval: -1, batch: true},
		{name: "batch/interval=1s", interval: time.Second, batch: true},
	} {
		b.Run(tt.name, func(b *testing.B) {
			b.ReportAllocs()
			run := 0
			for b.Loop() {
				run++
				storage, err := checkpoint.NewFSStorage(filepath.Join(b.TempDir(), "s"))
				require.NoError(b, err)
				store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{})
				require.NoError(b, err)
				coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: tt.interval})
				require.NoError(b, err)
				var seen atomic.Int64
				done := make(chan struct{})
				newProc := func(_ context.Context, p checkpoint.TopicPartition) (*kafkasource.Processor, error) {
					d, err := dedup.New(time.Hour, dedup.Options{})
					if err != nil {
						return nil, err
					}
					proc := &kafkasource.Processor{
						Participants: map[string]checkpoint.Participant{"dedup": d},
						Process: func(_ context.Context, m kafka.Message) error {
							if _, err := d.Observe(m.Value, m.Time); err != nil {
								return err
							}
							if seen.Add(1) == partitions*perPart {
								close(done)
							}
							return nil
						},
						Close: d.Close,
					}
					if tt.batch {
						var (
							sightings []dedup.Sighting
							first     []bool
						)
						proc.Process = nil
						proc.ProcessBatch = func(_ context.Context, ms []kafka.Message) (int, error) {
							sightings = sightings[:0]
							for i := range ms {
								sightings = append(sightings, dedup.Sighting{Key: ms[i].Value, Time: ms[i].Time})
							}
							var err error
							if first, err = d.ObserveBatch(sightings, first[:0]); err != nil {
								return len(first), err
							}
							if seen.Add(int64(len(ms))) == partitions*perPart {
								close(done)
							}
							return len(ms), nil
						}
					}
					return proc, nil
				}
				src, err := kafkasource.New(kafkasource.Group{Brokers: brokers, ID: fmt.Sprintf("%s-%d-%d", tt.name, b.N, run), Topics: []string{topic}},
					coord, newProc, fastGroup)
				require.NoError(b, err)
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- src.Run(ctx) }()
				select {
				case <-done:
				case err := <-errc:
					b.Fatalf("Run: %v", err)
				}
				cancel()
				require.NoError(b, <-errc)
				_ = coord.Close()
			}
			b.ReportMetric(float64(partitions*perPart)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
