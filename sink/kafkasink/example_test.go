package kafkasink_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
)

// The calls a chain makes on its sink (kafkasource makes them in a real
// pipeline): writes, the barrier's Snapshot, and CheckpointCompleted. A
// read_committed reader sees the records only after the commit.
func Example() {
	ctx := context.Background()
	k, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out")) // your brokers in production
	defer k.Close()
	brokers := k.ListenAddrs()

	src := checkpoint.TopicPartition{Topic: "events", Partition: 0}
	s, err := kafkasink.New(brokers, "example", src, kafkasink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println("transactional id:", s.TransactionalID())
	for _, v := range []string{"a", "b", "c"} {
		if err := s.Add(ctx, "out", 0, kafkatxn.Record{Value: []byte(v)}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := s.Snapshot(ctx, 1); err != nil { // the barrier: pre-commit
		fmt.Println(err)
		return
	}
	fmt.Println("before the checkpoint completes:", read(brokers))
	if err := s.CheckpointCompleted(ctx, 1); err != nil { // commit
		fmt.Println(err)
		return
	}
	fmt.Println("after:", read(brokers))
	// Output:
	// transactional id: example-events-0
	// before the checkpoint completes: []
	// after: [a b c]
}

func read(brokers []string) []string {
	r, _ := kafkatxn.NewReader(brokers, "out", 0, 0, kafkatxn.ReaderOptions{MaxWait: 50 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	msgs, _ := r.Fetch(ctx)
	vals := []string{}
	for _, m := range msgs {
		vals = append(vals, string(m.Value))
	}
	return vals
}
