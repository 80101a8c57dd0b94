package audit

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
)

// The stages the SDK's binaries count. A stage is any short name; these are
// the ones DefaultChecks compares.
const (
	// StageAccepted: deliveries the gateway accepted, counted once the side
	// effect (the Kafka publish) succeeded, before the 2xx.
	StageAccepted = "gateway.accepted"
	// StageRead: records the processor read from the topic, duplicates
	// included.
	StageRead = "processor.read"
	// StageFirstSeen: records dedup saw for the first time (passed on to
	// the sinks).
	StageFirstSeen = "processor.first_seen"
	// StageDuplicate: records dedup dropped.
	StageDuplicate = "processor.duplicate"
	// StageDeadLettered: records sent to the dead-letter topic.
	StageDeadLettered = "processor.dead_lettered"
)

// TableStage is the stage of the rows found in table by the verifier
// ("clickhouse.<table>").
func TableStage(table string) string { return "clickhouse." + table }

// SinkStage is the stage of the rows a sink of table acknowledged
// ("sink.<table>"): the chain adds each row to its Counter once the sink's
// Add returned nil. The Counter and the sink are participants of one
// chain, and a checkpoint completes only after the sink's inserts through
// its barrier are acknowledged, so the counts of a completed checkpoint
// are exactly the rows ClickHouse acknowledged before it, and a replay
// counts each row once more only where it was not checkpointed.
// SinkCheck compares them with the rows the table holds.
func SinkStage(table string) string { return "sink." + table }

// Defaults of Options.
const (
	DefaultBucket    = time.Minute
	DefaultRetention = 7 * 24 * time.Hour
)

// Errors.
var (
	// ErrCorrupt is wrapped by Restore's error for a state it cannot read.
	ErrCorrupt = errors.New("audit: corrupt counter state")
	// ErrUnsupportedVersion is wrapped by Restore's error for a state of a
	// newer format.
	ErrUnsupportedVersion = errors.New("audit: unsupported counter state version")
	// ErrBucketChanged is wrapped by Restore's error for a state counted in
	// buckets of another width: its counts cannot be folded into these.
	ErrBucketChanged = errors.New("audit: bucket width changed")
	// ErrInvalidOptions is wrapped by NewCounter's error for bad options.
	ErrInvalidOptions = errors.New("audit: invalid options")
)

// Options configure a Counter. The zero value is valid.
type Options struct {
	// Bucket is the width of the event-time buckets. Default DefaultBucket.
	// Every stage of one pipeline must use the same width.
	Bucket time.Duration
	// Retention is how far behind the newest bucket a bucket is kept: an
	// event older than that starts its bucket's count over (and the
	// verifier reports the bucket short). Keep it above the longest
	// lateness of an event (a Jira retry window, GitHub's three days of
	// redelivery). Default DefaultRetention.
	Retention time.Duration
}

// Key names one count: a stage, a tenant and the start of a bucket.
type Key struct {
	Stage  string
	Tenant string
	Bucket time.Time // UTC, a multiple of the bucket width
}

// Row is one count as written to the audit table: Counter says who counted
// (a chain's topic/partition), Count is its running total for Key, which
// only grows.
type Row struct {
	Key
	Counter string
	Count   uint64
}

// Counter counts events per stage, tenant and bucket for one chain. It is a
// checkpoint.Participant: register it in the chain beside the sink its rows
// go to. Like every participant it is used from the chain goroutine only.
type Counter struct {
	name      string
	width     time.Duration
	retention time.Duration
	counts    map[Key]uint64
	dirty     map[Key]struct{}
	newest    time.Time
	cursor    sink.Cursor
}

var _ checkpoint.Participant = (*Counter)(nil)

// NewCounter returns a Counter whose rows carry name as their Counter (use
// the chain's topic/partition, unique among the pipeline's chains).
func NewCounter(name string, opts Options) (*Counter, error) {
	if opts.Bucket == 0 {
		opts.Bucket = DefaultBucket
	}
	if opts.Retention == 0 {
		opts.Retention = DefaultRetention
	}
	switch {
	case name == "":
		return nil, fmt.Errorf("%w: empty counter name", ErrInvalidOptions)
	case opts.Bucket < time.Second || opts.Bucket%time.Second != 0:
		return nil, fmt.Errorf("%w: Bucket %v: want whole seconds", ErrInvalidOptions, opts.Bucket)
	case opts.Retention < opts.Bucket:
		return nil, fmt.Errorf("%w: Retention %v shorter than Bucket %v", ErrInvalidOptions, opts.Retention, opts.Bucket)
	}
	return &Counter{name: name, width: opts.Bucket, retention: opts.Retention,
		counts: map[Key]uint64{}, dirty: map[Key]struct{}{}}, nil
}

// BucketOf returns the start of the bucket of width w that holds t, in UTC.
func BucketOf(t time.Time, w time.Duration) time.Time { return t.UTC().Truncate(w) }

// At moves the position of the rows Flush returns to the record at offset,
// as sink.Cursor.At does: call it for every record, before Add.
func (c *Counter) At(offset int64) { c.cursor.At(offset) }

// Add counts n events of tenant at event time at in stage.
func (c *Counter) Add(stage, tenant string, at time.Time, n uint64) {
	k := Key{Stage: stage, Tenant: tenant, Bucket: BucketOf(at, c.width)}
	c.counts[k] += n
	c.dirty[k] = struct{}{}
	if k.Bucket.After(c.newest) {
		c.newest = k.Bucket
	}
}

// Count returns the running total of k (its Bucket truncated to the width).
func (c *Counter) Count(stage, tenant string, at time.Time) uint64 {
	return c.counts[Key{Stage: stage, Tenant: tenant, Bucket: BucketOf(at, c.width)}]
}

// Flush appends a row for every count that changed since the last Flush
// (every count after a Restore), in key order, with the positions to add
// them to a sink at, and forgets buckets older than the retention. Call it
// from the chain's Tick: the rows are a function of the state, so writing
// them again is harmless, and their positions continue the Counter's own
// cursor (give the rows' sink chsink.MismatchReinsert, as for a window's
// rows closed by a tick).
func (c *Counter) Flush(rows []Row, pos []sink.Position) ([]Row, []sink.Position) {
	keys := slices.SortedFunc(maps.Keys(c.dirty), compareKeys)
	for _, k := range keys {
		rows = append(rows, Row{Key: k, Counter: c.name, Count: c.counts[k]})
		pos = append(pos, c.cursor.Next())
	}
	clear(c.dirty)
	old := c.newest.Add(-c.retention)
	for k := range c.counts {
		if k.Bucket.Before(old) {
			delete(c.counts, k)
		}
	}
	return rows, pos
}

// Rows returns every count the Counter holds, in key order (for tests and
// the operator's inspection).
func (c *Counter) Rows() []Row {
	keys := slices.SortedFunc(maps.Keys(c.counts), compareKeys)
	out := make([]Row, len(keys))
	for i, k := range keys {
		out[i] = Row{Key: k, Counter: c.name, Count: c.counts[k]}
	}
	return out
}

func compareKeys(a, b Key) int {
	return cmp.Or(strings.Compare(a.Stage, b.Stage), strings.Compare(a.Tenant, b.Tenant), a.Bucket.Compare(b.Bucket))
}

// counterVersion is the first byte of a Counter's state. Layout, version 1:
//
//	version   byte
//	cursor    13 bytes, sink.Cursor's state
//	width     uvarint, seconds
//	n         uvarint, number of counts
//	n times:  stage (uvarint length, bytes), tenant (same), bucket (varint,
//	          Unix seconds), count (uvarint), changed since the last Flush
//	          (byte, 0 or 1), in key order
//
// The changed flags are state: a restored Counter flushes only what had
// not been flushed at the checkpoint (and what the replay changes), so the
// audit table's write time of a count stays that of its first write,
// which is what tells a late bucket (CompareOptions.Settle). They depend
// on when Flush ran (a Tick), so two runs over the same records may
// snapshot different flags, never different counts.
const counterVersion = 1

// Snapshot encodes the counts and the rows' cursor. Equal states encode to
// equal bytes.
func (c *Counter) Snapshot(ctx context.Context, id checkpoint.ID) ([]byte, error) {
	cur, err := c.cursor.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	b := append([]byte{counterVersion}, cur...)
	b = binary.AppendUvarint(b, uint64(c.width/time.Second))
	keys := slices.SortedFunc(maps.Keys(c.counts), compareKeys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k.Stage)
		b = appendString(b, k.Tenant)
		b = binary.AppendVarint(b, k.Bucket.Unix())
		b = binary.AppendUvarint(b, c.counts[k])
		_, dirty := c.dirty[k]
		b = append(b, boolByte(dirty))
	}
	return b, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// Restore replaces the counts with a Snapshot's, with their changed
// flags: the next Flush writes what had not been flushed. A damaged state wraps
// ErrCorrupt, one of another format ErrUnsupportedVersion, one counted in
// buckets of another width ErrBucketChanged; the Counter is then unchanged.
func (c *Counter) Restore(ctx context.Context, state []byte) error {
	st, err := DecodeState(state)
	if err != nil {
		return err
	}
	if st.Bucket != c.width {
		return fmt.Errorf("%w: the checkpoint counted in buckets of %v, this counter in %v", ErrBucketChanged, st.Bucket, c.width)
	}
	c.cursor = st.cursor
	c.counts = make(map[Key]uint64, len(st.Counts))
	c.dirty = make(map[Key]struct{}, len(st.Counts))
	c.newest = time.Time{}
	for i, r := range st.Counts {
		c.counts[r.Key] = r.Count
		if st.changed[i] {
			c.dirty[r.Key] = struct{}{}
		}
		if r.Bucket.After(c.newest) {
			c.newest = r.Bucket
		}
	}
	return nil
}

// CheckpointCompleted does nothing: the Counter keeps no resources.
func (c *Counter) CheckpointCompleted(context.Context, checkpoint.ID) error { return nil }

// State is a Counter's decoded Snapshot, for inspection.
type State struct {
	Bucket time.Duration
	Next   sink.Position // the position of the next row
	Counts []Row         // Counter empty: a state does not name its counter
	// Unflushed is how many counts changed since the last Flush.
	Unflushed int
	cursor    sink.Cursor
	changed   []bool
}

// DecodeState decodes a Counter's Snapshot. Errors wrap ErrCorrupt or
// ErrUnsupportedVersion.
func DecodeState(state []byte) (*State, error) {
	if len(state) == 0 {
		return nil, fmt.Errorf("%w: empty state", ErrCorrupt)
	}
	if state[0] != counterVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrUnsupportedVersion, state[0], counterVersion)
	}
	if len(state) < 14 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrCorrupt, len(state))
	}
	var st State
	if err := st.cursor.Restore(context.Background(), state[1:14]); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	st.Next = st.cursor.Peek()
	r := bytes.NewReader(state[14:])
	corrupt := func(what string) error {
		return fmt.Errorf("%w: %s at byte %d", ErrCorrupt, what, len(state)-r.Len())
	}
	w, err := binary.ReadUvarint(r)
	if err != nil || w == 0 || w > uint64(365*24*time.Hour/time.Second) {
		return nil, corrupt("bucket width")
	}
	st.Bucket = time.Duration(w) * time.Second
	n, err := binary.ReadUvarint(r)
	if err != nil || n > uint64(r.Len()) {
		return nil, corrupt("count of counts")
	}
	readString := func() (string, bool) {
		l, err := binary.ReadUvarint(r)
		if err != nil || l > uint64(r.Len()) {
			return "", false
		}
		b := make([]byte, l)
		_, _ = r.Read(b)
		return string(b), true
	}
	st.Counts = make([]Row, 0, n)
	for range n {
		var row Row
		var ok bool
		if row.Stage, ok = readString(); !ok {
			return nil, corrupt("stage")
		}
		if row.Tenant, ok = readString(); !ok {
			return nil, corrupt("tenant")
		}
		sec, err := binary.ReadVarint(r)
		if err != nil {
			return nil, corrupt("bucket")
		}
		row.Bucket = time.Unix(sec, 0).UTC()
		if row.Count, err = binary.ReadUvarint(r); err != nil {
			return nil, corrupt("count")
		}
		flag, err := r.ReadByte()
		if err != nil || flag > 1 {
			return nil, corrupt("changed flag")
		}
		st.changed = append(st.changed, flag == 1)
		st.Unflushed += int(flag)
		if len(st.Counts) > 0 && compareKeys(st.Counts[len(st.Counts)-1].Key, row.Key) >= 0 {
			return nil, corrupt("counts out of order")
		}
		st.Counts = append(st.Counts, row)
	}
	if r.Len() != 0 {
		return nil, corrupt(fmt.Sprintf("%d bytes after the counts", r.Len()))
	}
	return &st, nil
}
