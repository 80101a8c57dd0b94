package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
	"github.com/segmentio/kafka-go"
)

// KafkaClient returns a kafka-go client with a transport of its own, and
// the function that closes its connections. kafka-go's default transport
// answers Metadata from a cache, so on a shared broker a topic created
// since is "not found", and it pools connections, so one to a broker killed
// since fails.
func KafkaClient(brokers []string, timeout time.Duration) (*kafka.Client, func()) {
	tr := &kafka.Transport{}
	return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
}

// kafkaRecords counts the records in the topic: more than the distinct events
// whenever an ack was lost and the gateway's retry wrote the event again.
func kafkaRecords(ctx context.Context, brokers []string, topic string, partitions int) int64 {
	var total int64
	for p := range partitions {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			return -1
		}
		first, last, err := conn.ReadOffsets()
		_ = conn.Close()
		if err != nil {
			return -1
		}
		total += last - first
	}
	return total
}

// CheckpointLag counts the records of the topic past the highest offset any
// of groups has committed. A processor commits an offset only after the
// checkpoint that covers it completed, and restores from its newest
// checkpoint, so at lag 0 no record will be processed again.
func CheckpointLag(ctx context.Context, brokers []string, topic string, partitions int, groups []string) (int64, error) {
	ends := make([]int64, partitions)
	for p := range partitions {
		conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, p)
		if err != nil {
			return 0, err
		}
		ends[p], err = conn.ReadLastOffset()
		_ = conn.Close()
		if err != nil {
			return 0, err
		}
	}
	committed := make([]int64, partitions)
	client, closeClient := KafkaClient(brokers, 5*time.Second)
	defer closeClient()
	all := make([]int, partitions)
	for p := range all {
		all[p] = p
	}
	for _, g := range groups {
		resp, err := offsetFetch(ctx, client, &kafka.OffsetFetchRequest{GroupID: g, Topics: map[string][]int{topic: all}})
		if err != nil {
			return 0, err
		}
		if errors.Is(resp.Error, kafka.GroupIdNotFound) {
			// kfake forgets a group that never committed once it restarts
			// (real Kafka answers with no offsets): nothing to count.
			continue
		}
		if resp.Error != nil {
			return 0, resp.Error
		}
		for _, p := range resp.Topics[topic] {
			if p.Error == nil && p.Partition >= 0 && p.Partition < partitions {
				committed[p.Partition] = max(committed[p.Partition], p.CommittedOffset)
			}
		}
	}
	var lag int64
	for p := range partitions {
		lag += max(ends[p]-committed[p], 0)
	}
	return lag, nil
}

// offsetFetch sends req until the group coordinator answers: Apache Kafka
// answers NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE while it creates and
// loads __consumer_offsets (the first group request a new broker sees) and
// COORDINATOR_LOAD_IN_PROGRESS after a restart; kfake never does
// (TestCheckpointLagCountsUnknownGroupAsNoCommits failed on Apache Kafka 4.4).
func offsetFetch(ctx context.Context, client *kafka.Client, req *kafka.OffsetFetchRequest) (*kafka.OffsetFetchResponse, error) {
	for {
		resp, err := client.OffsetFetch(ctx, req)
		if err == nil {
			err = resp.Error
		}
		if !errors.Is(err, kafka.NotCoordinatorForGroup) && !errors.Is(err, kafka.GroupCoordinatorNotAvailable) &&
			!errors.Is(err, kafka.GroupLoadInProgress) {
			if err != nil && !errors.Is(err, kafka.GroupIdNotFound) {
				return nil, err
			}
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("offset fetch for group %s: %w (last: %w)", req.GroupID, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// topicDeliveries reads the topic back and counts its records that carry a
// delivery (the gateway's headers) and their distinct delivery ids: every
// record beyond the distinct ones is a delivery written twice (a lost ack,
// a restarted gateway that forgot its keys).
func topicDeliveries(ctx context.Context, brokers []string, topic string, partitions int) (records, distinct int64, err error) {
	seen := map[string]bool{}
	err = ScanTopic(ctx, brokers, topic, partitions, func(m kafka.Message) {
		md, err := kafkapub.ReadMetadata(m)
		if err != nil {
			return // a poison record: no delivery
		}
		records++
		seen[md.Source+"|"+md.EventID] = true
	})
	if err != nil {
		return 0, 0, err
	}
	return records, int64(len(seen)), nil
}

// ScanTopic reads every record of topic's partitions 0 to partitions-1,
// from the first offset to the high watermark at the time of the read, and
// calls fn with each (Partition, Offset, Headers and Value set), partition
// by partition in offset order. It is the full scan the audit, the naive
// report and the chaos report take of what Kafka holds.
func ScanTopic(ctx context.Context, brokers []string, topic string, partitions int, fn func(kafka.Message)) error {
	// A transport of its own: kafka-go's default one pools connections, and
	// a pooled connection to a broker killed since fails with EOF.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 10 * time.Second, Transport: tr}
	fetch := func(p int, offset int64) (resp *kafka.FetchResponse, err error) {
		// A few tries: on a loaded machine a broker can let one fetch run
		// past the client's timeout.
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			resp, err = cl.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: p, Offset: offset,
				MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 50 * time.Millisecond})
			if err == nil {
				err = resp.Error
			}
			if err == nil {
				return resp, nil
			}
			tr.CloseIdleConnections()
			Sleep(ctx, nil, time.Second)
		}
		if err == nil {
			err = ctx.Err()
		}
		return nil, err
	}
	for p := range partitions {
		for offset := int64(0); ; {
			resp, err := fetch(p, offset)
			if err != nil {
				return err
			}
			if offset >= resp.HighWatermark {
				break
			}
			for {
				r, err := resp.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				if r.Offset < offset {
					continue // the fetch answers from the start of a batch
				}
				offset = r.Offset + 1
				value, err := io.ReadAll(r.Value)
				if err != nil {
					return err
				}
				fn(kafka.Message{Topic: topic, Partition: p, Offset: r.Offset, Headers: r.Headers, Value: value, Time: r.Time})
			}
		}
	}
	return nil
}

// ScanCommitted reads topic's partition the way a read_committed consumer
// does (kafkatxn.Reader: no record of an aborted transaction), from its
// first offset to its high watermark at the time of the call, and calls fn
// with each record in offset order. It waits for transactions open below
// that high watermark to end.
func ScanCommitted(ctx context.Context, brokers []string, topic string, partition int, fn func(kafka.Message) error) error {
	cl, closeClient := KafkaClient(brokers, 10*time.Second)
	defer closeClient()
	var first, end int64
	for _, req := range []kafka.OffsetRequest{kafka.FirstOffsetOf(partition), kafka.LastOffsetOf(partition)} {
		resp, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {req}}})
		if err != nil {
			return err
		}
		for _, po := range resp.Topics[topic] {
			if po.Error != nil {
				return po.Error
			}
			first, end = max(first, po.FirstOffset), max(end, po.LastOffset)
		}
	}
	r, err := kafkatxn.NewReader(brokers, topic, partition, first, kafkatxn.ReaderOptions{MaxWait: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer r.Close()
	for r.Offset() < end {
		// Fetch waits for a record: past the last one (only markers or
		// aborted records before end), give up the wait once at end.
		fctx, cancel := context.WithTimeout(ctx, time.Second)
		ms, err := r.Fetch(fctx)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m.Offset >= end {
				return nil
			}
			if err := fn(m); err != nil {
				return err
			}
		}
	}
	return nil
}
