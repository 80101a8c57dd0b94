package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
	"github.com/exactlyonce/exactlyonce/kafkatxn"
)

// finalReads records the final reads of ClickHouse and of both topics.
func (c *chaos) finalReads(ctx context.Context) error {
	d := c.d
	type topic struct {
		topic, of  string
		partitions int
	}
	topics := []topic{{d.Topic, streamWebhooks, c.cfg.Partitions}, {c.txnTopic(), streamTxn, txnPartitions}}
	if c.cfg.KafkaSink {
		topics = append(topics, topic{c.outTopic(), streamProcessed, c.cfg.Partitions})
	}
	for _, t := range topics {
		key := c.keyFunc(t.topic)
		for p := range t.partitions {
			v := history.Value{Table: "kafka." + t.topic, Of: t.of, Partition: p}
			var processed []string // what the output leg owes, of the pipeline's topic
			err := readPartition(ctx, d.Servers.Brokers, t.topic, p, func(m kafka.Message) {
				k := key(m)
				v.Offsets, v.Keys = append(v.Offsets, m.Offset), append(v.Keys, k)
				if t.topic == d.Topic && !strings.HasPrefix(k, rawKey) {
					processed = append(processed, fmt.Sprintf("%d/%d", m.Partition, m.Offset))
				}
			})
			if err != nil {
				return fmt.Errorf("read %s/%d: %w", t.topic, p, err)
			}
			c.hist.h.Add(history.Op{Process: "verifier", Type: history.OK, F: history.Read, Value: v})
			if c.cfg.KafkaSink {
				// The input read says what the output must hold: one
				// acknowledged write per record.
				for _, k := range processed {
					c.hist.h.Add(history.Op{Process: "input", Type: history.OK, F: history.Send, Value: history.Value{Table: streamProcessed, Key: k}})
				}
			}
		}
	}
	conn, err := ch.Dial(ctx, ch.Options{Address: d.Servers.ClickHouseAddr, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer conn.Close()
	var org, source, id proto.ColStr
	return conn.Do(ctx, ch.Query{
		Body:   fmt.Sprintf("SELECT CAST(org_id, 'String') AS o, CAST(source, 'String') AS s, event_id FROM %s.normalized_events", d.DB),
		Result: proto.Results{{Name: "o", Data: &org}, {Name: "s", Data: &source}, {Name: "event_id", Data: &id}},
		OnResult: func(context.Context, proto.Block) error {
			v := history.Value{Table: "clickhouse.normalized_events", Of: streamWebhooks, Keys: make([]string, 0, id.Rows())}
			for i := range id.Rows() {
				k := deliveryKey(source.Row(i), id.Row(i))
				if strings.HasPrefix(org.Row(i), demo.OtherWriterOrg) {
					k = otherKey + k
				}
				v.Keys = append(v.Keys, k)
			}
			c.hist.h.Add(history.Op{Process: "verifier", Type: history.OK, F: history.Read, Value: v})
			org.Reset()
			source.Reset()
			id.Reset()
			return nil
		},
	})
}

// readPartition reads one partition with isolation read_committed from its
// start to its end as it stands now. Every transaction has ended by then
// (the writer stopped; one a fault left open ends within txnTimeout), so
// the read waits for the last stable offset to reach the end.
func readPartition(ctx context.Context, brokers []string, topic string, partition int, f func(kafka.Message)) error {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return err
	}
	end, err := conn.ReadLastOffset()
	_ = conn.Close()
	if err != nil {
		return err
	}
	// A transaction a fault left open ends within txnTimeout (on Apache
	// Kafka 10 s later at most); a fetch that fails (a connection timing
	// out) is tried again from where the read stands.
	const within = time.Minute
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	next, last := int64(0), error(nil)
	for next < end {
		if ctx.Err() != nil {
			return fmt.Errorf("at offset %d of %d after %v: %w (last error: %v)", next, end, within, ctx.Err(), last)
		}
		r, err := kafkatxn.NewReader(brokers, topic, partition, next, kafkatxn.ReaderOptions{MaxWait: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		for next < end {
			ms, err := r.Fetch(ctx)
			if err != nil {
				last = err
				break
			}
			for _, m := range ms {
				f(m)
			}
			next = r.Offset()
		}
		_ = r.Close()
		if next < end {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}
