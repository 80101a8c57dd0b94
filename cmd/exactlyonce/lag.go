package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// lagRow is one partition of lag's table.
type lagRow struct {
	Partition     int       `json:"partition"`
	HighWatermark int64     `json:"high_watermark"`
	Committed     int64     `json:"committed"`     // the group's offset; -1 none
	CommittedLag  int64     `json:"committed_lag"` // records after it
	Checkpoint    uint64    `json:"checkpoint"`    // the checkpoint a restart restores; 0 none
	CheckpointAt  int64     `json:"checkpoint_offset"`
	CheckpointLag int64     `json:"checkpoint_lag"` // records a restart would replay or read
	Created       time.Time `json:"checkpoint_created,omitzero"`
	Age           string    `json:"checkpoint_age,omitempty"`
}

func runLag(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("lag")
	var sf storageFlags
	sf.register(fs, env)
	brokers := fs.String("brokers", envOr(env, "KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated (KAFKA_BROKERS)")
	group := fs.String("group", envOr(env, "KAFKA_GROUP", "processor"), "the processors' consumer group (KAFKA_GROUP)")
	topic := fs.String("topic", envOr(env, "KAFKA_TOPIC", "webhooks"), "the topic (KAFKA_TOPIC)")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for Kafka")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var st checkpoint.Storage
	if sf.stateDir != "" || sf.bucket != "" {
		var err error
		if st, err = sf.open(env); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	// A Transport of its own, closed on return: kafka-go's shared default
	// one answers Metadata from a cache that may predate the topic.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(strings.Split(*brokers, ",")...), Timeout: *timeout, Transport: tr}
	meta, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{*topic}})
	if err != nil {
		return fmt.Errorf("reach Kafka at %s: %w", *brokers, err)
	}
	if len(meta.Topics) != 1 || meta.Topics[0].Error != nil {
		var terr error = errors.New("not in the metadata")
		if len(meta.Topics) == 1 {
			terr = meta.Topics[0].Error
		}
		return fmt.Errorf("topic %s: %w", *topic, terr)
	}
	var parts []int
	var reqs []kafka.OffsetRequest
	for _, p := range meta.Topics[0].Partitions {
		parts = append(parts, p.ID)
		reqs = append(reqs, kafka.LastOffsetOf(p.ID))
	}
	slices.Sort(parts)
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{*topic: reqs}})
	if err != nil {
		return fmt.Errorf("list offsets of %s: %w", *topic, err)
	}
	hwm := map[int]int64{}
	for _, po := range offs.Topics[*topic] {
		if po.Error != nil {
			return fmt.Errorf("list offsets of %s/%d: %w", *topic, po.Partition, po.Error)
		}
		hwm[po.Partition] = po.LastOffset
	}
	fetched, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: *group, Topics: map[string][]int{*topic: parts}})
	if err != nil {
		return fmt.Errorf("committed offsets of group %s: %w", *group, err)
	}
	committed := map[int]int64{}
	for _, p := range fetched.Topics[*topic] {
		committed[p.Partition] = p.CommittedOffset
	}
	var rows []lagRow
	now := time.Now()
	for _, p := range parts {
		r := lagRow{Partition: p, HighWatermark: hwm[p], Committed: -1, CheckpointAt: -1}
		if c, ok := committed[p]; ok && c >= 0 {
			r.Committed, r.CommittedLag = c, hwm[p]-c
		} else {
			r.CommittedLag = hwm[p]
		}
		r.CheckpointLag = -1
		if st != nil {
			tp := checkpoint.TopicPartition{Topic: *topic, Partition: p}
			fl, err := files(ctx, st, sf.ckptPrefix, *topic, p)
			if err != nil {
				return err
			}
			restored, err := restoredID(ctx, st, sf.ckptPrefix, tp)
			if err != nil {
				return err
			}
			for _, f := range fl {
				if f.ID != restored {
					continue
				}
				e, _ := read(ctx, st, sf.ckptPrefix, tp, f)
				r.Checkpoint, r.CheckpointAt, r.Created = e.ID, e.NextOffset, e.Created
				r.CheckpointLag = hwm[p] - e.NextOffset
				r.Age = now.Sub(e.Created).Round(time.Millisecond).String()
				break
			}
		}
		rows = append(rows, r)
	}
	if *asJSON {
		return printJSON(stdout, rows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "partition\thigh watermark\tcommitted\tlag\tcheckpoint\tat offset\tlag from checkpoint\tcheckpoint age\t")
	for _, r := range rows {
		ck, at, lag, age := "none", "-", "-", "-"
		if r.Checkpoint != 0 || r.CheckpointAt >= 0 {
			ck, at, lag, age = fmt.Sprint(r.Checkpoint), fmt.Sprint(r.CheckpointAt), fmt.Sprint(r.CheckpointLag), r.Age
		}
		if st == nil {
			ck = "(no -state-dir)"
		}
		com := "none"
		if r.Committed >= 0 {
			com = fmt.Sprint(r.Committed)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t\n", r.Partition, r.HighWatermark, com, r.CommittedLag, ck, at, lag, age)
	}
	return tw.Flush()
}
