package kafkasink_test

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
)

// A sink that is part of a chain: Open takes the source partition from the
// chain and registers the sink under the name given. A kafkasource Source
// builds the chain (kafkasource.Chains) and attaches it; here a Coordinator
// attaches it by hand, and one checkpoint commits the records.
func ExampleOpen() {
	ctx := context.Background()
	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out")) // your brokers in production
	defer k.Close()
	brokers := k.ListenAddrs()

	store, _ := checkpoint.NewStore(checkpoint.NewMemoryStorage(), checkpoint.StoreOptions{})
	coord, _ := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	defer coord.Close()
	c, _ := checkpoint.NewChain(store, checkpoint.TopicPartition{Topic: "events", Partition: 0})
	// "zz-output" sorts after the chain's other participants: it snapshots
	// last, after every one that may decline the barrier.
	s, err := kafkasink.Open(c, "zz-output", brokers, "example", kafkasink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	task, err := coord.Attach(ctx, c.Partition(), c.Participants()) // starts the producer
	if err != nil {
		fmt.Println(err)
		return
	}
	defer task.Detach()
	for _, v := range []string{"a", "b"} {
		if err := s.Add(ctx, "out", 0, kafkatxn.Record{Value: []byte(v)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := task.Checkpoint(ctx, nil, 2, checkpoint.Meta{}, nil); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("participants:", len(c.Participants()), "after the checkpoint:", read(brokers))
	// Output:
	// participants: 1 after the checkpoint: [a b]
}
