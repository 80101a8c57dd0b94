package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"
	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/audit/chaudit"
)

// scanFlags configure the full check by event id of exactlyonce audit.
type scanFlags struct {
	topic, header, brokers string
	table, column          string
	final                  bool
	shards, examples       int
}

func (s *scanFlags) register(fs interface {
	StringVar(*string, string, string, string)
	BoolVar(*bool, string, bool, string)
	IntVar(*int, string, int, string)
}, env func(string) string) {
	fs.StringVar(&s.topic, "scan-topic", "", "full check: read every record of this topic and compare its event ids with -scan-table's")
	fs.StringVar(&s.header, "scan-header", "event-id", "the record header holding the event id (the gateway's kafkapub.HeaderEventID)")
	fs.StringVar(&s.brokers, "brokers", envOr(env, "KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated, for -scan-topic (KAFKA_BROKERS)")
	fs.StringVar(&s.table, "scan-table", "", "the table of -database the -scan-topic's events land in, one row per event")
	fs.StringVar(&s.column, "scan-id", "event_id", "-scan-table's event id column")
	fs.BoolVar(&s.final, "scan-final", false, "read -scan-table with FINAL (a ReplacingMergeTree)")
	fs.IntVar(&s.shards, "scan-shards", 1, "split the ids into this many parts, scanned one after the other: memory holds one part's ids (about 100 bytes an id), the topic is read once per part")
	fs.IntVar(&s.examples, "scan-examples", 10, "event ids listed per finding")
}

// scanReport is the full check by event id.
type scanReport struct {
	Topic        string  `json:"topic"`
	Table        string  `json:"table"`
	Shards       int     `json:"shards"`
	Records      uint64  `json:"records"`       // read from the topic
	NoID         uint64  `json:"records_no_id"` // without the id header (not judged)
	IDs          uint64  `json:"ids"`           // distinct ids in the topic
	KafkaRepeats uint64  `json:"kafka_repeats"` // records of an id beyond its first: lost acknowledgements, absorbed by dedup
	Rows         uint64  `json:"rows"`          // in the table
	TableIDs     uint64  `json:"table_ids"`     // distinct ids in the table
	Missing      idList  `json:"missing"`       // in the topic, settled, not in the table: lost
	Pending      idList  `json:"pending"`       // in the topic younger than -settle, not in the table yet
	Doubled      idList  `json:"doubled"`       // more than one row in the table: duplicated
	NotInTopic   idList  `json:"not_in_topic"`  // in the table only: older than the topic's retention, or written by someone else
	FirstOffsets []int64 `json:"first_offsets"` // per partition: records before these are gone (retention)
}

// idList counts ids and keeps the first few as examples.
type idList struct {
	Count    uint64   `json:"count"`
	Examples []string `json:"examples"`
}

func (l *idList) add(id string, max int) {
	l.Count++
	if len(l.Examples) < max {
		l.Examples = append(l.Examples, id)
	}
}

func (r *scanReport) failed() bool { return r.Missing.Count+r.Doubled.Count > 0 }

// scan compares the event ids of the topic and the table, one shard of the
// id space at a time. Per shard it reads the table first and the topic up
// to its end after that, so every row's record is read: an id in the table
// and not in the topic is older than the topic's retention (or foreign),
// never in flight.
func (s *scanFlags) scan(ctx context.Context, opts ch.Options, database string, now time.Time, settle time.Duration) (*scanReport, error) {
	if s.table == "" {
		return nil, errors.New("-scan-topic needs -scan-table")
	}
	if s.shards < 1 {
		return nil, fmt.Errorf("-scan-shards %d: want 1 or more", s.shards)
	}
	rep := &scanReport{Topic: s.topic, Table: database + "." + s.table, Shards: s.shards,
		Missing: idList{Examples: []string{}}, Pending: idList{Examples: []string{}}, Doubled: idList{Examples: []string{}}, NotInTopic: idList{Examples: []string{}}}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(strings.Split(s.brokers, ",")...), Timeout: 30 * time.Second, Transport: tr}
	type seen struct {
		records uint32
		newest  int64 // unix milliseconds of its newest record
	}
	for i := range s.shards {
		shard := chaudit.Shard{Index: i, Shards: s.shards}
		rows := map[string]uint64{}
		err := chaudit.ScanIDs(ctx, opts, database, s.table, s.column, s.final, shard, func(id string, n uint64) { rows[id] = n })
		if err != nil {
			return nil, err
		}
		ids := map[string]seen{}
		first, err := readTopic(ctx, client, s.topic, func(r kafka.Record) {
			rep.Records++ // counted in every shard: divided below
			var id string
			ok := false
			for _, h := range r.Headers {
				if h.Key == s.header {
					id, ok = string(h.Value), true
				}
			}
			if !ok {
				rep.NoID++
				return
			}
			if !shard.Has(id) {
				return
			}
			e := ids[id]
			e.records++
			e.newest = max(e.newest, r.Time.UnixMilli())
			ids[id] = e
		})
		if err != nil {
			return nil, err
		}
		rep.FirstOffsets = first
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			e := ids[id]
			rep.IDs++
			rep.KafkaRepeats += uint64(e.records - 1)
			switch n := rows[id]; {
			case n == 0 && now.Sub(time.UnixMilli(e.newest)) < settle:
				rep.Pending.add(id, s.examples)
			case n == 0:
				rep.Missing.add(id, s.examples)
			case n > 1:
				rep.Doubled.add(id, s.examples)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(rows)) {
			rep.Rows += rows[id]
			rep.TableIDs++
			if _, ok := ids[id]; !ok {
				rep.NotInTopic.add(id, s.examples)
			}
		}
	}
	rep.Records /= uint64(s.shards)
	rep.NoID /= uint64(s.shards)
	return rep, nil
}

// readTopic calls fn with every record of topic from each partition's
// first offset to its high watermark as read when it starts, and returns
// the first offsets.
func readTopic(ctx context.Context, client *kafka.Client, topic string, fn func(kafka.Record)) ([]int64, error) {
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("reach Kafka at %s: %w", client.Addr, err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		var terr error = errors.New("not in the metadata")
		if len(meta.Topics) == 1 {
			terr = meta.Topics[0].Error
		}
		return nil, fmt.Errorf("-scan-topic %s: %w", topic, terr)
	}
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		reqs = append(reqs, kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	parts := offs.Topics[topic]
	slices.SortFunc(parts, func(a, b kafka.PartitionOffsets) int { return a.Partition - b.Partition })
	first := make([]int64, len(parts))
	for i, po := range parts {
		if po.Error != nil {
			return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		first[i] = po.FirstOffset
		for offset := po.FirstOffset; offset < po.LastOffset; {
			resp, err := client.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: po.Partition, Offset: offset,
				MinBytes: 1, MaxBytes: 4 << 20, MaxWait: 100 * time.Millisecond})
			if err == nil {
				err = resp.Error
			}
			if err != nil {
				return nil, fmt.Errorf("read %s/%d at %d: %w", topic, po.Partition, offset, err)
			}
			before := offset
			for {
				r, err := resp.Records.ReadRecord()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("read %s/%d at %d: %w", topic, po.Partition, offset, err)
				}
				if r.Offset < offset || r.Offset >= po.LastOffset {
					continue
				}
				offset = r.Offset + 1
				fn(*r)
			}
			if offset == before {
				// Nothing readable here (a transaction's control records, or
				// aborted ones): step over the batch.
				offset = max(offset+1, resp.HighWatermark)
				if offset > po.LastOffset {
					break
				}
			}
		}
	}
	return first, nil
}

// writeScan prints the full check.
func writeScan(w io.Writer, r *scanReport) {
	fmt.Fprintf(w, "full check by event id, %s against %s (%d part(s)):\n", r.Topic, r.Table, r.Shards)
	fmt.Fprintf(w, "  topic: %d records, %d event ids (%d records again: lost acknowledgements, absorbed by dedup), %d without an id\n",
		r.Records, r.IDs, r.KafkaRepeats, r.NoID)
	fmt.Fprintf(w, "  table: %d rows, %d event ids\n", r.Rows, r.TableIDs)
	line := func(status, what string, l idList) {
		if l.Count == 0 {
			return
		}
		fmt.Fprintf(w, "  %s: %d event ids %s, e.g. %s\n", status, l.Count, what, strings.Join(l.Examples, ", "))
	}
	line("LOST", "in the topic, not in the table", r.Missing)
	line("DUPLICATED", "in more than one row", r.Doubled)
	line("pending", "in the topic younger than -settle, not in the table yet", r.Pending)
	line("not in the topic", "in the table only (older than the topic's retention, or written by someone else)", r.NotInTopic)
	if !r.failed() {
		fmt.Fprintln(w, "  every settled event id of the topic is in the table exactly once")
	}
}
