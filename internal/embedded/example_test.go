package embedded_test

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/internal/embedded"
)

// Start an in-process Kafka cluster, create a topic with three partitions
// and read its layout back.
func Example_kafka() {
	k, err := embedded.StartKafka(embedded.KafkaOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer k.Close()

	ctx := context.Background()
	if err := embedded.CreateTopic(ctx, k.Brokers(), "events", 3); err != nil {
		fmt.Println(err)
		return
	}
	conn, err := kafka.DialContext(ctx, "tcp", k.Brokers()[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	parts, err := conn.ReadPartitions("events")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("partitions:", len(parts))
	// Output: partitions: 3
}
