package kafkasource_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
)

// total is a participant summing record values.
type total struct{ n int }

func (s *total) Snapshot(context.Context, checkpoint.ID) ([]byte, error) {
	return []byte(strconv.Itoa(s.n)), nil
}
func (s *total) Restore(_ context.Context, b []byte) (err error) {
	s.n, err = strconv.Atoi(string(b))
	return err
}
func (s *total) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

func Example() {
	ctx := context.Background()
	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "numbers")) // a real Kafka in production
	defer k.Close()
	cl, _ := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...))
	for i := 1; i <= 10; i++ {
		cl.ProduceSync(ctx, &kgo.Record{Topic: "numbers", Value: []byte(strconv.Itoa(i))})
	}
	cl.Close()

	store, _ := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1}) // on demand only, to keep the output exact
	defer coord.Close()
	var processed atomic.Int64
	src, _ := kafkasource.New(
		kafkasource.Group{Brokers: k.ListenAddrs(), ID: "example", Topics: []string{"numbers"}},
		coord,
		kafkasource.Chains(store, func(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {
			sum := &total{}
			if err := c.Add("sum", sum); err != nil { // "sum" keys its state in every checkpoint
				return nil, err
			}
			return &kafkasource.Processor{
				Process: func(ctx context.Context, m kafka.Message) error {
					v, err := strconv.Atoi(string(m.Value))
					if err != nil {
						return err
					}
					sum.n += v
					processed.Add(1)
					return nil
				},
			}, nil
		}),
		kafkasource.Options{HeartbeatInterval: 100 * time.Millisecond})

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	for processed.Load() < 10 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := src.Checkpoint(ctx); err != nil { // usually every Interval
		fmt.Println(err)
	}
	stop()
	fmt.Println("Run:", <-done)

	cp, _ := store.Latest(ctx, checkpoint.TopicPartition{Topic: "numbers", Partition: 0})
	fmt.Printf("checkpoint %d: next offset %d, sum %s\n", cp.ID, cp.NextOffset, cp.States["sum"])
	// Output:
	// Run: <nil>
	// checkpoint 1: next offset 10, sum 55
}
