package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// ckptFile is one checkpoint file of a partition as the store names it:
// <prefix>/<topic>/<partition>/<id>-<generation>.ckpt.
type ckptFile struct {
	Name       string `json:"name"`
	ID         uint64 `json:"id"`
	Generation int64  `json:"generation"`
}

// ckptEntry is a checkpoint file read back.
type ckptEntry struct {
	ckptFile
	Bytes        int            `json:"bytes"`
	NextOffset   int64          `json:"next_offset"`
	Created      time.Time      `json:"created"`
	Duration     string         `json:"duration"`
	Member       string         `json:"member"`
	Participants map[string]int `json:"participants"` // name: state bytes
	Objects      int            `json:"objects"`
	Error        string         `json:"error,omitempty"` // why it does not read back intact
	// Restored: the checkpoint a restart restores (checkpoint.Store.Latest).
	Restored bool `json:"restored,omitempty"`
	// Superseded: intact, but saved by a revoked owner after a later
	// owner's checkpoint (checkpoint.ErrSuperseded): a restart skips it.
	Superseded bool `json:"superseded,omitempty"`
}

// restoredID returns the ID of the checkpoint of tp a restart restores,
// 0 when there is none: the store's own choice (past damaged checkpoints
// and those a revoked owner saved after a later owner's), so that the
// commands never name one a restore would skip.
func restoredID(ctx context.Context, st checkpoint.Storage, prefix string, tp checkpoint.TopicPartition) (uint64, error) {
	store, err := checkpoint.NewStore(st, checkpoint.StoreOptions{Prefix: prefix})
	if err != nil {
		return 0, err
	}
	cp, err := store.Latest(ctx, tp)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return uint64(cp.ID), nil
}

// mark sets e.Restored and e.Superseded from restored, the ID restoredID
// returned: an intact checkpoint newer than the restored one is one the
// store skips as superseded (a damaged one is skipped as damaged).
func (e *ckptEntry) mark(restored uint64) {
	e.Restored = e.Error == "" && e.ID == restored
	e.Superseded = e.Error == "" && e.ID > restored
}

// partitionFlags select a topic and one partition or all of them.
type partitionFlags struct {
	topic     string
	partition int
}

func (p *partitionFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.topic, "topic", "webhooks", "the topic the chains read")
	fs.IntVar(&p.partition, "partition", -1, "one partition; -1: every partition with checkpoints")
}

// partitions lists the partitions of topic that have checkpoints.
func partitions(ctx context.Context, st checkpoint.Storage, prefix, topic string) ([]int, error) {
	names, err := st.List(ctx, prefix+"/"+topic+"/")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, n := range names {
		rest := strings.TrimPrefix(n, prefix+"/"+topic+"/")
		p, err := strconv.Atoi(rest[:max(strings.IndexByte(rest, '/'), 0)])
		if err == nil && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (p *partitionFlags) list(ctx context.Context, st checkpoint.Storage, prefix string) ([]int, error) {
	if p.partition >= 0 {
		return []int{p.partition}, nil
	}
	ps, err := partitions(ctx, st, prefix, p.topic)
	if err == nil && len(ps) == 0 {
		err = fmt.Errorf("no checkpoints of topic %q under %s/ (is -topic or -checkpoint-prefix right?)", p.topic, prefix)
	}
	return ps, err
}

// files lists a partition's checkpoint files, newest first, as Store
// orders them.
func files(ctx context.Context, st checkpoint.Storage, prefix, topic string, partition int) ([]ckptFile, error) {
	dir := fmt.Sprintf("%s/%s/%d/", prefix, topic, partition)
	names, err := st.List(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []ckptFile
	for _, n := range names {
		base, ok := strings.CutSuffix(strings.TrimPrefix(n, dir), ".ckpt")
		idStr, genStr, ok2 := strings.Cut(base, "-")
		id, err1 := strconv.ParseUint(idStr, 10, 64)
		gen, err2 := strconv.ParseInt(genStr, 10, 64)
		if ok && ok2 && err1 == nil && err2 == nil {
			out = append(out, ckptFile{Name: n, ID: id, Generation: gen})
		}
	}
	slices.SortFunc(out, func(a, b ckptFile) int {
		return cmp.Or(cmp.Compare(b.ID, a.ID), cmp.Compare(b.Generation, a.Generation))
	})
	return out, nil
}

// read reads and checks one checkpoint file: it decodes (CRC), names its
// own partition and id, and every object it references is stored.
func read(ctx context.Context, st checkpoint.Storage, prefix string, p checkpoint.TopicPartition, f ckptFile) (ckptEntry, *checkpoint.Checkpoint) {
	e := ckptEntry{ckptFile: f, Participants: map[string]int{}}
	data, err := st.Get(ctx, f.Name)
	if err != nil {
		e.Error = err.Error()
		return e, nil
	}
	e.Bytes = len(data)
	cp, err := checkpoint.Decode(data)
	if err != nil {
		e.Error = err.Error()
		return e, nil
	}
	e.NextOffset, e.Created, e.Duration, e.Member, e.Objects = cp.NextOffset, cp.Created, cp.Duration.String(), cp.Member, len(cp.Objects)
	for name, s := range cp.States {
		e.Participants[name] = len(s)
	}
	if cp.Partition != p || cp.ID != checkpoint.ID(f.ID) {
		e.Error = fmt.Sprintf("holds %s checkpoint %d, not %s %d", cp.Partition, cp.ID, p, f.ID)
		return e, cp
	}
	for _, o := range cp.Objects {
		name := fmt.Sprintf("%s/%s/%d/objects/%s", prefix, p.Topic, p.Partition, o)
		if _, err := st.Get(ctx, name); err != nil {
			e.Error = fmt.Sprintf("object %s: %v", o, err)
			break
		}
	}
	return e, cp
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runCheckpoints(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("checkpoints")
	var sf storageFlags
	var pf partitionFlags
	sf.register(fs, env)
	pf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := sf.open(env)
	if err != nil {
		return err
	}
	ps, err := pf.list(ctx, st, sf.ckptPrefix)
	if err != nil {
		return err
	}
	all := map[string][]ckptEntry{}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "partition\tid\tgeneration\tnext offset\tcreated\tduration\tbytes\tparticipants\tobjects\tmember\tstatus")
	}
	for _, part := range ps {
		tp := checkpoint.TopicPartition{Topic: pf.topic, Partition: part}
		fl, err := files(ctx, st, sf.ckptPrefix, pf.topic, part)
		if err != nil {
			return err
		}
		restored, err := restoredID(ctx, st, sf.ckptPrefix, tp)
		if err != nil {
			return err
		}
		entries := []ckptEntry{}
		for _, f := range fl {
			e, _ := read(ctx, st, sf.ckptPrefix, tp, f)
			e.mark(restored)
			entries = append(entries, e)
			if *asJSON {
				continue
			}
			var parts []string
			for _, n := range slices.Sorted(mapsKeys(e.Participants)) {
				parts = append(parts, fmt.Sprintf("%s:%d", n, e.Participants[n]))
			}
			status := "intact"
			switch {
			case e.Error != "":
				status = "DAMAGED: " + e.Error
			case e.Superseded:
				status = "SUPERSEDED: saved by a revoked owner after a later owner's checkpoint; a restart skips it"
			case e.Restored:
				status = "intact, restored next"
			}
			fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", part, e.ID, e.Generation, e.NextOffset,
				e.Created.Format(time.RFC3339Nano), e.Duration, e.Bytes, strings.Join(parts, " "), e.Objects, e.Member, status)
		}
		all[strconv.Itoa(part)] = entries
	}
	if *asJSON {
		return printJSON(stdout, all)
	}
	return tw.Flush()
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// shown is what show prints.
type shown struct {
	Checkpoint ckptEntry     `json:"checkpoint"`
	States     []stateInfo   `json:"states"`
	Journals   []journalInfo `json:"journals"`
}

func runShow(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("show")
	var sf storageFlags
	sf.register(fs, env)
	topic := fs.String("topic", "webhooks", "the topic the chains read")
	partition := fs.Int("partition", 0, "the partition")
	id := fs.Uint64("id", 0, "the checkpoint's id; 0: the one a restart restores")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := sf.open(env)
	if err != nil {
		return err
	}
	tp := checkpoint.TopicPartition{Topic: *topic, Partition: *partition}
	fl, err := files(ctx, st, sf.ckptPrefix, *topic, *partition)
	if err != nil {
		return err
	}
	restored, err := restoredID(ctx, st, sf.ckptPrefix, tp)
	if err != nil {
		return err
	}
	want := *id
	if want == 0 {
		if restored == 0 {
			return fmt.Errorf("%s: no checkpoint under %s/ a restart would restore", tp, sf.ckptPrefix)
		}
		want = restored
	}
	var out shown
	var cp *checkpoint.Checkpoint
	for _, f := range fl {
		if f.ID == want {
			out.Checkpoint, cp = read(ctx, st, sf.ckptPrefix, tp, f)
			out.Checkpoint.mark(restored)
			break
		}
	}
	if cp == nil {
		return fmt.Errorf("%s: no checkpoint %d", tp, want)
	}
	object := func(ctx context.Context, participant, name string) ([]byte, error) {
		return st.Get(ctx, fmt.Sprintf("%s/%s/%d/objects/%s/%s", sf.ckptPrefix, tp.Topic, tp.Partition, participant, name))
	}
	for _, name := range slices.Sorted(mapsKeys(cp.States)) {
		out.States = append(out.States, decodeState(ctx, name, cp.States[name], object))
	}
	if out.Journals, err = readJournals(ctx, st, tp.Topic, tp.Partition); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, out)
	}
	printShown(stdout, tp, out)
	if out.Checkpoint.Error != "" {
		return errFound
	}
	return nil
}

func printShown(w io.Writer, tp checkpoint.TopicPartition, s shown) {
	c := s.Checkpoint
	fmt.Fprintf(w, "checkpoint %d of %s (generation %d, member %s): next offset %d, created %s, took %s, %d bytes, %d objects\n",
		c.ID, tp, c.Generation, c.Member, c.NextOffset, c.Created.Format(time.RFC3339Nano), c.Duration, c.Bytes, c.Objects)
	if c.Error != "" {
		fmt.Fprintf(w, "  DAMAGED: %s\n", c.Error)
	}
	ts := func(t time.Time) string {
		if t.IsZero() {
			return "none"
		}
		return t.Format(time.RFC3339)
	}
	for _, st := range s.States {
		fmt.Fprintf(w, "  %s (%s, %d bytes): ", st.Name, st.Kind, st.Bytes)
		switch {
		case st.Error != "":
			fmt.Fprintf(w, "CANNOT DECODE: %s\n", st.Error)
		case st.Dedup != nil:
			d := st.Dedup
			fmt.Fprintf(w, "%d keys, clock %s, expiring from %s to %s", d.Keys, ts(d.Clock), ts(d.FirstExpiry), ts(d.LastExpiry))
			if len(d.Objects) > 0 {
				fmt.Fprintf(w, ", incremental: a base and %d deltas", len(d.Objects)-1)
			}
			fmt.Fprintln(w)
		case st.Window != nil:
			win := st.Window
			fmt.Fprintf(w, "%d open windows of %v (%d events), starting %s to %s, watermark %s, %d inputs\n",
				win.Open, win.Size, win.Events, ts(win.FirstStart), ts(win.LastStart), ts(win.Watermark), win.Inputs)
		case st.Sink != nil:
			sk := st.Sink
			covered := "nothing yet"
			if sk.Covered != nil {
				covered = sk.Covered.String()
			}
			fmt.Fprintf(w, "table %s, rows durable through %s, %d journaled batches to replay", sk.Table, covered, sk.Pending)
			if sk.Pending > 0 {
				fmt.Fprintf(w, " (%v to %v)", sk.First, sk.Last)
			}
			fmt.Fprintln(w)
		case st.Cursor != nil:
			fmt.Fprintf(w, "next row position %v\n", st.Cursor)
		case st.Audit != nil:
			a := st.Audit
			fmt.Fprintf(w, "%d audit counts in buckets of %s from %s to %s; totals %v\n", a.Counts, a.Bucket, ts(a.First), ts(a.Last), a.Stages)
		default:
			fmt.Fprintln(w, "not a state this command knows")
		}
	}
	for _, j := range s.Journals {
		pruned := "nothing"
		if j.Pruned != nil {
			pruned = j.Pruned.String()
		}
		fmt.Fprintf(w, "  sink journal %s: epoch %d, owner %s, pruned through %s, %d intents, %d acks of replayed batches\n",
			j.Name, j.Epoch, j.Owner, pruned, len(j.Intents), j.Acks)
		for _, in := range j.Intents {
			state := "not acknowledged"
			if in.Acked {
				state = "acknowledged"
			}
			fmt.Fprintf(w, "    %v..%v: %d rows, epoch %d, token %s, %s\n", in.First, in.Last, in.Rows, in.Epoch, in.Token, state)
		}
		for _, p := range j.Problems {
			fmt.Fprintf(w, "    PROBLEM: %s\n", p)
		}
	}
}
