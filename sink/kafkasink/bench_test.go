package kafkasink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/sink/kafkasink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// BenchmarkCheckpointInterval measures the transactional sink's overhead
// against plain acks=all production of the same output: one op is one
// checkpoint interval's output, 1,000 or 10,000 records of 200 bytes to one
// partition, handed over 100 at a time as a chain's ProcessBatch would.
//
//	kafka-go-writer  kafka-go's Writer, acks=all, batches of 100 (the baseline:
//	                 what a chain without exactly-once output would write)
//	idempotent       kafkatxn.Producer, acks=all, batches of 100
//	sink             kafkasink.Sink: Add in batches of 500 (DefaultBatchSize)
//	                 inside the open transaction, then Snapshot (the pre-commit)
//	                 and CheckpointCompleted (the commit), one transaction an op
//
// The broker is the kit's Kafka: Apache Kafka 4.4 unless
// EXACTLYONCE_KAFKA=kfake (franz-go's fake, in process) or KAFKA_BROKERS
// say otherwise.
//
//	go test -run '^$' -bench CheckpointInterval -benchtime 20x ./sink/kafkasink
//	EXACTLYONCE_KAFKA=kfake go test -run '^$' -bench CheckpointInterval -benchtime 20x ./sink/kafkasink
func BenchmarkCheckpointInterval(b *testing.B) {
	brokers := testkit.Kafka(b)
	ctx := context.Background()
	const batch, size = 100, 200
	for _, n := range []int{1000, 10000} {
		recs := make([]kafkatxn.Record, n)
		msgs := make([]kafka.Message, n)
		for i := range recs {
			v := make([]byte, size)
			recs[i] = kafkatxn.Record{Key: []byte("org-1"), Value: v}
			msgs[i] = kafka.Message{Key: []byte("org-1"), Value: v}
		}
		b.Run(fmt.Sprintf("records=%d/kafka-go-writer", n), func(b *testing.B) {
			topic := testkit.Name(b, "w")
			testkit.CreateTopic(b, brokers, topic, 1)
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll,
				BatchSize: batch, BatchTimeout: time.Millisecond, Balancer: &kafka.LeastBytes{}, Transport: &kafka.Transport{}}
			defer w.Close()
			b.SetBytes(int64(n) * size)
			b.ReportAllocs()
			for b.Loop() {
				for i := 0; i < n; i += batch {
					if err := w.WriteMessages(ctx, msgs[i:i+batch]...); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("records=%d/idempotent", n), func(b *testing.B) {
			topic := testkit.Name(b, "i")
			testkit.CreateTopic(b, brokers, topic, 1)
			p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
			require.NoError(b, err)
			defer p.Close()
			b.SetBytes(int64(n) * size)
			b.ReportAllocs()
			for b.Loop() {
				for i := 0; i < n; i += batch {
					if _, err := p.Produce(ctx, topic, 0, recs[i:i+batch]...); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("records=%d/sink", n), func(b *testing.B) {
			topic := testkit.Name(b, "s")
			testkit.CreateTopic(b, brokers, topic, 1)
			s, err := kafkasink.New(brokers, testkit.Name(b, "bench"), checkpoint.TopicPartition{Topic: "in", Partition: 0},
				kafkasink.Options{})
			require.NoError(b, err)
			defer s.Close()
			b.SetBytes(int64(n) * size)
			b.ReportAllocs()
			id := checkpoint.ID(0)
			for b.Loop() {
				for i := 0; i < n; i += batch {
					if err := s.Add(ctx, topic, 0, recs[i:i+batch]...); err != nil {
						b.Fatal(err)
					}
				}
				id++
				if _, err := s.Snapshot(ctx, id); err != nil {
					b.Fatal(err)
				}
				if err := s.CheckpointCompleted(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
