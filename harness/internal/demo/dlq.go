package demo

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
)

// InjectPoison writes two records no gateway would publish (no delivery
// headers, a value that is no payload) to the topic, as a misconfigured
// producer would. The processor cannot normalize them: each must reach the
// dead-letter topic exactly once, through every kill and replay, while the
// partition goes on.
func (d *Pipeline) InjectPoison(ctx context.Context) error {
	cl, closeClient := KafkaClient(d.Servers.Brokers, 10*time.Second)
	defer closeClient()
	for i, value := range []string{"not json at all", `{"org_id":"acme-00","note":"hand-written"}`} {
		resp, err := cl.Produce(ctx, &kafka.ProduceRequest{Topic: d.Topic, Partition: i % d.Config.Partitions,
			RequiredAcks: kafka.RequireAll, Records: kafka.NewRecordReader(kafka.Record{Value: kafka.NewBytes([]byte(value))})})
		if err == nil {
			err = resp.Error
		}
		if err != nil {
			return fmt.Errorf("write a poison record: %w", err)
		}
		d.poison = append(d.poison, int64(i%d.Config.Partitions)<<32|resp.BaseOffset)
	}
	d.Say("fault: 2 records that are no webhook written straight to Kafka (poison records for the dead-letter topic)")
	return nil
}

// CheckDeadLetters checks that the dead-letter topic holds each poison
// record exactly once, as a read_committed consumer sees it: dead letters
// are written in transactions, and a revoked owner's aborted write is no
// dead letter.
func (d *Pipeline) CheckDeadLetters(ctx context.Context) error {
	var got []int64
	err := ScanCommitted(ctx, d.Servers.Brokers, d.DLQ, 0, func(m kafka.Message) error {
		o, err := kafkasource.ParseDeadLetter(m)
		if err != nil {
			return err
		}
		got = append(got, int64(o.Partition)<<32|o.Offset)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the dead-letter topic: %w", err)
	}
	slices.Sort(got)
	want := slices.Clone(d.poison)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("dead-letter topic holds %d records %x, want each of the %d poison records %x once", len(got), got, len(want), want)
	}
	d.Say("dead-letter topic %s: each of the %d poison records exactly once", d.DLQ, len(want))
	return nil
}
