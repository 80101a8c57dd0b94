package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/kafkawire"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// errLive is returned by rewind when a processor may still own the
// partition: its consumer group has members. Exit status 3.
var errLive = errors.New("refused: the consumer group has live members")

// rewound is what rewind did or would do.
type rewound struct {
	Partition string        `json:"partition"`
	Target    ckptEntry     `json:"target"`
	Deleted   []ckptFile    `json:"deleted"`  // the newer checkpoints
	Journals  []journalInfo `json:"journals"` // fenced: their epoch raised
	DryRun    bool          `json:"dry_run"`
}

// runRewind makes an older checkpoint of one partition its newest, so the
// next processor to take the partition restores from it and replays the
// records after it: the fallback a restore takes past a corrupt newest
// checkpoint, chosen by the operator (a bad deploy wrote wrong state). It
// deletes the newer checkpoints and fences the partition's sink journals.
//
// Fenced like an owner: it refuses (exit 3) while the processors' consumer
// group has any member, so a live processor never has its checkpoints
// taken from under it; it then claims every sink journal of the partition
// (chsink.Fence), so a processor the group no longer lists but that still
// runs (paused, cut off) gets sink.ErrFenced at its next batch and inserts
// nothing; and it looks at the group again after deleting. It refuses a
// target that is damaged, whose records Kafka no longer holds, or that is
// older than a sink journal's prune point (the journal no longer has the
// batches to replay with their tokens: ClickHouse would get those rows
// twice). Without -yes it only prints what it would do.
//
// Every participant already tolerates a restore from any kept checkpoint
// (a restore falls back past a corrupt newest one, package checkpoint), so
// a rewind asks nothing new of them; the Kafka offsets the group committed
// are left alone, since a chain reads from its checkpoint's offset.
func runRewind(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("rewind")
	var sf storageFlags
	sf.register(fs, env)
	brokers := fs.String("brokers", envOr(env, "KAFKA_BROKERS", "localhost:9092"), "Kafka bootstrap brokers, comma-separated (KAFKA_BROKERS)")
	group := fs.String("group", envOr(env, "KAFKA_GROUP", "processor"), "the processors' consumer group, which must have no member (KAFKA_GROUP)")
	topic := fs.String("topic", envOr(env, "KAFKA_TOPIC", "webhooks"), "the topic (KAFKA_TOPIC)")
	partition := fs.Int("partition", -1, "the partition to rewind (required)")
	to := fs.Uint64("to", 0, "the checkpoint id to make the newest (required; see exactlyonce checkpoints)")
	yes := fs.Bool("yes", false, "rewind: without it the command only prints what it would do")
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for Kafka and the storage")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *partition < 0 || *to == 0 {
		return errors.New("-partition and -to are required")
	}
	st, err := sf.openWritable(env)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	tp := checkpoint.TopicPartition{Topic: *topic, Partition: *partition}
	fl, err := files(ctx, st, sf.ckptPrefix, *topic, *partition)
	if err != nil {
		return err
	}
	out := rewound{Partition: tp.String(), DryRun: !*yes, Deleted: []ckptFile{}}
	var target *checkpoint.Checkpoint
	for _, f := range fl {
		if f.ID > *to {
			out.Deleted = append(out.Deleted, f)
			continue
		}
		if f.ID == *to && target == nil {
			var e ckptEntry
			if e, target = read(ctx, st, sf.ckptPrefix, tp, f); e.Error != "" {
				return fmt.Errorf("checkpoint %d of %s is damaged, rewind to another: %s", *to, tp, e.Error)
			}
			out.Target = e
		}
	}
	if target == nil {
		return fmt.Errorf("%s has no checkpoint %d (exactlyonce checkpoints lists them)", tp, *to)
	}
	if out.Journals, err = readJournals(ctx, st, *topic, *partition); err != nil {
		return err
	}
	if err := replayable(ctx, target, out.Journals); err != nil {
		return err
	}
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	bs := strings.Split(*brokers, ",")
	client := &kafka.Client{Addr: kafka.TCP(bs...), Timeout: *timeout, Transport: tr}
	if err := inLog(ctx, client, tp, target.NextOffset); err != nil {
		return err
	}
	if err := noMembers(ctx, client, bs, *group, tp); err != nil {
		return err
	}
	if *yes && len(out.Deleted) > 0 {
		// Fence first: from here a processor that slipped past the group
		// check inserts nothing. Then delete newest first, so that a
		// rewind stopped half-way leaves a newest checkpoint that is one
		// of the kept ones, never a gap.
		for i, j := range out.Journals {
			table, _, _ := strings.Cut(j.Name, "/")
			if err := chsink.Fence(ctx, st, table, tp); err != nil {
				return fmt.Errorf("fence sink journal %s: %w", j.Name, err)
			}
			out.Journals[i].Epoch++
		}
		for _, f := range out.Deleted {
			if err := st.Delete(ctx, f.Name); err != nil {
				return fmt.Errorf("delete checkpoint %d: %w (the checkpoints newer than it are gone; run rewind again)", f.ID, err)
			}
		}
		if err := noMembers(ctx, client, bs, *group, tp); err != nil {
			return fmt.Errorf("%w: a processor joined while rewinding and may have restored a deleted checkpoint: stop it and run rewind again", err)
		}
	}
	if *asJSON {
		return printJSON(stdout, out)
	}
	verb := "rewound"
	if out.DryRun {
		verb = "would rewind (dry run: -yes rewinds)"
	}
	fmt.Fprintf(stdout, "%s %s to checkpoint %d (next offset %d, created %s)\n", verb, tp, target.ID, target.NextOffset, target.Created.UTC().Format(time.RFC3339))
	if len(out.Deleted) == 0 {
		fmt.Fprintf(stdout, "checkpoint %d is the newest already: nothing to do\n", target.ID)
		return nil
	}
	for _, f := range out.Deleted {
		fmt.Fprintf(stdout, "  delete checkpoint %d (generation %d)\n", f.ID, f.Generation)
	}
	for _, j := range out.Journals {
		fmt.Fprintf(stdout, "  fence sink journal %s (epoch %d)\n", j.Name, j.Epoch)
	}
	fmt.Fprintf(stdout, "the next processor to take %s restores checkpoint %d and reads from offset %d\n", tp, target.ID, target.NextOffset)
	return nil
}

// replayable checks that every sink journal still holds the batches a
// restore from target replays: its prune point is not past the sink's
// position in target.
func replayable(ctx context.Context, target *checkpoint.Checkpoint, journals []journalInfo) error {
	covered := map[string]*sink.Position{}
	for name, state := range target.States {
		noObjects := func(context.Context, string, string) ([]byte, error) { return nil, errors.New("not read") }
		if info := decodeState(ctx, name, state, noObjects); info.Sink != nil {
			covered[info.Sink.Table] = info.Sink.Covered
		}
	}
	for _, j := range journals {
		if len(j.Problems) > 0 {
			return fmt.Errorf("sink journal %s is damaged (exactlyonce verify): %s", j.Name, strings.Join(j.Problems, "; "))
		}
		if j.Pruned == nil {
			continue
		}
		table, _, _ := strings.Cut(j.Name, "/")
		c, ok := covered[table]
		if !ok || c == nil || c.Compare(*j.Pruned) < 0 {
			return fmt.Errorf("sink journal %s is pruned through %v, past checkpoint %d's position: a restore from it would insert rows ClickHouse already holds; rewind to a newer checkpoint", j.Name, *j.Pruned, target.ID)
		}
	}
	return nil
}

// inLog checks that Kafka still holds the record at offset of tp.
func inLog(ctx context.Context, client *kafka.Client, tp checkpoint.TopicPartition, offset int64) error {
	offs, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{
		tp.Topic: {kafka.FirstOffsetOf(tp.Partition), kafka.LastOffsetOf(tp.Partition)}}})
	if err != nil {
		return fmt.Errorf("list offsets of %s in Kafka: %w", tp, err)
	}
	for _, po := range offs.Topics[tp.Topic] {
		if po.Partition != tp.Partition {
			continue
		}
		if po.Error != nil {
			return fmt.Errorf("list offsets of %s in Kafka: %w", tp, po.Error)
		}
		if offset < po.FirstOffset || offset > po.LastOffset {
			return fmt.Errorf("checkpoint's next offset %d is outside %s's log [%d, %d]: its records are gone, rewind to a newer checkpoint", offset, tp, po.FirstOffset, po.LastOffset)
		}
		return nil
	}
	return fmt.Errorf("no offsets of %s in Kafka", tp)
}

// noMembers returns errLive, naming them, while group has members, and an
// error when group never committed an offset of tp (a wrong -group would
// make the check vacuous).
func noMembers(ctx context.Context, client *kafka.Client, brokers []string, group string, tp checkpoint.TopicPartition) error {
	resp, err := client.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return fmt.Errorf("describe group %s in Kafka: %w", group, err)
	}
	if len(resp.Groups) != 1 {
		return fmt.Errorf("describe group %s in Kafka: %d groups in the answer", group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if g.Error != nil {
		return fmt.Errorf("describe group %s in Kafka: %w", group, g.Error)
	}
	if len(g.Members) > 0 {
		var who []string
		for _, m := range g.Members {
			who = append(who, fmt.Sprintf("%s (client %s at %s)", m.MemberID, m.ClientID, m.ClientHost))
		}
		return fmt.Errorf("%w: group %s is %s with %d member(s): %s; stop the processors first", errLive, group, g.GroupState, len(g.Members), strings.Join(who, ", "))
	}
	if err := noConsumerMembers(ctx, brokers, client.Timeout, group); err != nil {
		return err
	}
	fetched, err := client.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{tp.Topic: {tp.Partition}}})
	if err != nil {
		return fmt.Errorf("committed offsets of group %s in Kafka: %w", group, err)
	}
	for _, p := range fetched.Topics[tp.Topic] {
		if p.Partition == tp.Partition && p.Error == nil && p.CommittedOffset >= 0 {
			return nil
		}
	}
	return fmt.Errorf("group %s never committed an offset of %s: is -group the processors' group?", group, tp)
}

// noConsumerMembers is noMembers for a group under Kafka's consumer group
// protocol (KIP-848; kafkasource's default on Kafka 4), whose members
// DescribeGroups does not show: Kafka answers it as a group without
// members. ConsumerGroupDescribe does; a broker without the protocol
// (Kafka 3.x) has no such groups, and a classic group or none is answered
// GROUP_ID_NOT_FOUND.
func noConsumerMembers(ctx context.Context, brokers []string, timeout time.Duration, group string) error {
	conn := &kafkawire.GroupConn{Dialer: &kafka.Dialer{Timeout: timeout}, Brokers: brokers, GroupID: group}
	defer conn.Close()
	d, err := conn.Describe(ctx)
	switch {
	case errors.Is(err, kafkawire.ErrNoConsumerProtocol):
		return nil
	case err != nil:
		return fmt.Errorf("describe group %s in Kafka (consumer group protocol): %w", group, err)
	case kafka.Error(d.ErrorCode) == kafka.GroupIdNotFound:
		return nil
	case d.ErrorCode != 0:
		return fmt.Errorf("describe group %s in Kafka (consumer group protocol): %w: %s", group, kafka.Error(d.ErrorCode), d.ErrorMessage)
	case len(d.Members) > 0:
		var who []string
		for _, m := range d.Members {
			who = append(who, fmt.Sprintf("%s (epoch %d, %d partitions)", m.MemberID, m.MemberEpoch, m.Assigned))
		}
		return fmt.Errorf("%w: group %s is %s with %d member(s) of the consumer group protocol: %s; stop the processors first",
			errLive, group, d.State, len(d.Members), strings.Join(who, ", "))
	}
	return nil
}

// openWritable returns the storage for a command that writes.
func (s *storageFlags) openWritable(env func(string) string) (checkpoint.Storage, error) {
	return s.openStorage(env, true)
}
