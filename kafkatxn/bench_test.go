package kafkatxn_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/exactlyonce/exactlyonce/testkit"
)

const benchBatch = 100

func benchRecords() ([]kafkatxn.Record, []kafka.Message) {
	recs := make([]kafkatxn.Record, benchBatch)
	msgs := make([]kafka.Message, benchBatch)
	for i := range recs {
		v := make([]byte, 200)
		recs[i] = kafkatxn.Record{Key: []byte("org-1"), Value: v}
		msgs[i] = kafka.Message{Key: []byte("org-1"), Value: v}
	}
	return recs, msgs
}

// BenchmarkProduce compares the idempotent Producer with kafka-go's Writer
// (acks=all, the baseline) on the same batches of 100 records of 200 bytes
// to one partition of the kit's Kafka (Apache Kafka 4.4 unless
// EXACTLYONCE_KAFKA or KAFKA_BROKERS say otherwise).
func BenchmarkProduce(b *testing.B) {
	brokers := testkit.Kafka(b)
	ctx := context.Background()
	recs, msgs := benchRecords()
	b.Run("idempotent", func(b *testing.B) {
		topic := testkit.Name(b, "bi")
		testkit.CreateTopic(b, brokers, topic, 1)
		p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
		require.NoError(b, err)
		defer p.Close()
		b.SetBytes(benchBatch * 200)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Produce(ctx, topic, 0, recs...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kafka-go-writer", func(b *testing.B) {
		topic := testkit.Name(b, "bw")
		testkit.CreateTopic(b, brokers, topic, 1)
		w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll,
			BatchSize: benchBatch, BatchTimeout: time.Millisecond, Balancer: &kafka.LeastBytes{}, Transport: &kafka.Transport{}}
		defer w.Close()
		b.SetBytes(benchBatch * 200)
		b.ReportAllocs()
		for b.Loop() {
			if err := w.WriteMessages(ctx, msgs...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTransactional compares transactional production with plain
// acks=all production of the same records: kafka-go's Writer (the
// baseline), the idempotent Producer, and the TxProducer committing every
// 1, 10 or 100 batches (a commit is EndTxn plus the epoch bump, and the
// first batch of a transaction to a partition adds AddPartitionsToTxn).
// One op is one batch of 100 or 1000 records of 200 bytes to one partition
// of the kit's Kafka (Apache Kafka 4.4 unless EXACTLYONCE_KAFKA or
// KAFKA_BROKERS say otherwise).
func BenchmarkTransactional(b *testing.B) {
	brokers := testkit.Kafka(b)
	ctx := context.Background()
	for _, size := range []int{100, 1000} {
		recs := make([]kafkatxn.Record, size)
		msgs := make([]kafka.Message, size)
		for i := range recs {
			v := make([]byte, 200)
			recs[i] = kafkatxn.Record{Key: []byte("org-1"), Value: v}
			msgs[i] = kafka.Message{Key: []byte("org-1"), Value: v}
		}
		b.Run(fmt.Sprintf("batch=%d/kafka-go-writer", size), func(b *testing.B) {
			topic := testkit.Name(b, "tw")
			testkit.CreateTopic(b, brokers, topic, 1)
			w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, RequiredAcks: kafka.RequireAll,
				BatchSize: size, BatchBytes: 1 << 30, BatchTimeout: time.Millisecond, Balancer: &kafka.LeastBytes{}, Transport: &kafka.Transport{}}
			defer w.Close()
			b.SetBytes(int64(size) * 200)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("batch=%d/idempotent", size), func(b *testing.B) {
			topic := testkit.Name(b, "ti")
			testkit.CreateTopic(b, brokers, topic, 1)
			p, err := kafkatxn.NewProducer(ctx, brokers, kafkatxn.ProducerOptions{})
			require.NoError(b, err)
			defer p.Close()
			b.SetBytes(int64(size) * 200)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Produce(ctx, topic, 0, recs...); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, every := range []int{1, 10, 100} {
			b.Run(fmt.Sprintf("batch=%d/txn-commit-every=%d", size, every), func(b *testing.B) {
				topic := testkit.Name(b, "tt")
				testkit.CreateTopic(b, brokers, topic, 1)
				p, err := kafkatxn.NewTxProducer(ctx, brokers, topic, kafkatxn.TxOptions{})
				require.NoError(b, err)
				defer p.Close()
				b.SetBytes(int64(size) * 200)
				b.ReportAllocs()
				n := 0
				for b.Loop() {
					if _, err := p.Produce(ctx, topic, 0, recs...); err != nil {
						b.Fatal(err)
					}
					if n++; n%every == 0 {
						if err := p.Commit(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := p.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkTxnVersion compares transactions v1 and v2 (KIP-890 part 2) on
// the same broker: one op is one transaction, 1 or 10 batches of 100
// records of 200 bytes to one partition and its Commit. With v1 the
// producer adds the partition (AddPartitionsToTxn) and, at the next
// transaction's first Produce, bumps the epoch (InitProducerId); with v2
// the first Produce adds the partition and EndTxn bumps the epoch.
// commit-µs/op is Commit's share, produce-µs/op the Produces' (v1's epoch
// bump included), records/s the throughput. v2 is skipped where the
// broker offers none (Kafka 3.9). Run it with -count to alternate v1 and
// v2 on one broker.
func BenchmarkTxnVersion(b *testing.B) {
	brokers := testkit.Kafka(b)
	ctx := context.Background()
	recs, _ := benchRecords()
	for _, per := range []int{1, 10} {
		for _, v := range []int{1, 2} {
			b.Run(fmt.Sprintf("batches=%d/v%d", per, v), func(b *testing.B) {
				topic := testkit.Name(b, "tver")
				testkit.CreateTopic(b, brokers, topic, 1)
				p, err := kafkatxn.NewTxProducer(ctx, brokers, topic, kafkatxn.TxOptions{TransactionsV1: v == 1})
				require.NoError(b, err)
				defer p.Close()
				if p.TransactionVersion() != v {
					b.Skipf("the broker runs transactions v%d", p.TransactionVersion())
				}
				b.SetBytes(int64(per) * benchBatch * 200)
				var produce, commit time.Duration
				for b.Loop() {
					t0 := time.Now()
					for range per {
						if _, err := p.Produce(ctx, topic, 0, recs...); err != nil {
							b.Fatal(err)
						}
					}
					t1 := time.Now()
					if err := p.Commit(ctx); err != nil {
						b.Fatal(err)
					}
					produce, commit = produce+t1.Sub(t0), commit+time.Since(t1)
				}
				b.ReportMetric(float64(produce.Microseconds())/float64(b.N), "produce-µs/op")
				b.ReportMetric(float64(commit.Microseconds())/float64(b.N), "commit-µs/op")
				b.ReportMetric(float64(b.N*per*benchBatch)/(produce+commit).Seconds(), "records/s")
			})
		}
	}
}
