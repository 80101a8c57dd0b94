package chsink

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/ch-go"
	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/internal/backoff"
)

// Defaults for Options.
const (
	DefaultMaxRows  = 100_000
	DefaultMaxBytes = 64 << 20
	DefaultMaxDelay = time.Second
	// DefaultFlushAheadMinRows is the smallest batch flushed ahead of a
	// checkpoint barrier. Every insert costs ClickHouse a fixed amount of
	// CPU (a part to write, later to merge) and a round trip; flushing ahead
	// adds one insert per interval to save the barrier the rows' share of
	// its insert, which outweighs that round trip only from tens of
	// thousands of rows (BenchmarkFlushPolicy and BENCHMARKS.md).
	DefaultFlushAheadMinRows = 50_000
	// DefaultMaxAttempts, DefaultInitialBackoff and DefaultMaxBackoff are
	// the insert's retries: 6 attempts (the first and 5 retries), the
	// waits between them growing from 100 ms to at most 5 s.
	DefaultMaxAttempts    = 6
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 5 * time.Second
	DefaultInsertTimeout  = 30 * time.Second
	DefaultDialTimeout    = 2 * time.Second
)

// MismatchPolicy says what to do when replayed rows differ from the
// journaled batch that covers their positions (non-deterministic processing).
type MismatchPolicy int

const (
	// MismatchFail (default) returns a *sink.ContentMismatchError and stops
	// the sink: nothing is inserted for the batch.
	MismatchFail MismatchPolicy = iota
	// MismatchKeepFirst reuses the journaled token for the new content, so
	// ClickHouse keeps exactly one version of the batch: the old one if it
	// had landed (the replayed version is dropped), else the replayed one.
	// Use it only when the versions differ in ways that do not matter
	// (a processing timestamp). The mismatch is logged at Warn.
	MismatchKeepFirst
	// MismatchReinsert inserts the replayed rows under a fresh token derived
	// from the journaled one and the new content hash (sink.ReinsertToken),
	// and journals them as superseding the old batch, so a second replay of
	// the same new content is deduplicated again. The table then holds the
	// new rows, and the old ones too if they had landed: correct only for
	// tables where inserting rows again under the same key is idempotent,
	// such as window output (key, window start, end, version) written to a
	// ReplacingMergeTree(version) and read with FINAL or argMax. New refuses
	// it (ErrNotIdempotent) unless the table, and the target of every
	// materialized view fed by it, is a ReplacingMergeTree: on a plain
	// MergeTree, or through a view into a Summing-, Aggregating- or
	// CollapsingMergeTree, the rows would be counted twice. The dependent
	// views see the replayed rows again (they are a new block), so they must
	// be idempotent too; an Aggregating table is so only when its aggregate
	// functions are (max, any, argMax, not sum or count), which New cannot
	// check, so it refuses the whole family. A replay that produces no rows in the batch's positions inserts
	// nothing. Logged at Warn.
	MismatchReinsert
)

// WindowPolicy says what to do with a journaled batch whose insert outcome is
// unknown when it is no longer inside the table's deduplication window.
type WindowPolicy int

const (
	// WindowFail (default) returns a *sink.OutsideWindowError: an operator
	// decides (widen the window, check the table, choose a policy).
	WindowFail WindowPolicy = iota
	// WindowReinsert inserts the batch anyway: at-least-once for that batch
	// (it may be duplicated). Logged at Error.
	WindowReinsert
	// WindowSkip does not insert it: at-most-once for that batch (it may be
	// lost). Logged at Error.
	WindowSkip
)

// Options configures a Sink. The zero value is valid.
type Options struct {
	// Database defaults to "default".
	Database string
	// ParticipantName is the name Open registers the sink under in its
	// checkpoint.Chain: the key of its state in every checkpoint, so keep
	// it stable across versions of the program (a checkpoint holding state
	// under a name the chain lacks is refused at restore). Default: the
	// table's name. It is for a chain whose sink had another name before it
	// moved to Open; open each table at most once per chain either way (its
	// sinks would share one journal). New, which registers nothing,
	// ignores it.
	ParticipantName string
	// User and Password default to ClickHouse's "default" user, no password.
	User, Password string
	// DialTimeout bounds connecting; default DefaultDialTimeout.
	DialTimeout time.Duration
	// Client is the base of every connection's ch-go options: TLS (a
	// *tls.Config, for ClickHouse Cloud's secure native port 9440),
	// Compression, Settings sent with every query, QuotaKey, a custom
	// Dialer. The sink sets Address from Table.Addr, Database and
	// DialTimeout from the fields above, User and Password when they are
	// set above, ReadTimeout to InsertTimeout, and ClientName when empty.
	// Default: the zero ch.Options (plain TCP, no compression).
	Client ch.Options

	// MaxRows flushes a batch at this many rows; default DefaultMaxRows.
	// Keep it below the server's max_insert_block_size (1,048,449) so a
	// batch is one block, deduplicated as a whole.
	MaxRows int
	// MaxBytes flushes a batch when its estimated encoded size reaches this;
	// default DefaultMaxBytes. The estimate uses the previous batch's exact
	// bytes per row.
	MaxBytes int
	// MaxDelay flushes a non-empty batch this long after its first row, by a
	// real timer (Run must be running); default DefaultMaxDelay. Smaller
	// values make more blocks: size the deduplication window for them. It
	// bounds how long a row waits to be visible; the size of the inserts of
	// a busy chain is better left to the checkpoint interval and flushing
	// ahead (below): a MaxDelay shorter than the interval cuts every
	// interval into MaxDelay-sized inserts, which cost ClickHouse more CPU
	// per row.
	MaxDelay time.Duration

	// NoFlushAhead turns flushing ahead of the checkpoint barrier off.
	//
	// By default, once the sink has seen two barriers (Snapshot calls) it
	// expects the next one an interval later (the average of the last
	// intervals) and, shortly before it, starts the insert of what is
	// buffered in the background, as a MaxDelay flush would: journaled
	// first, then inserted with its token while the chain goes on. The
	// barrier then waits only for the rows that arrived after that (the
	// tail) instead of a whole interval's rows, and each interval costs two
	// inserts: a large one and the tail. "Shortly" is twice what the
	// previous such flush took, from sealing to ClickHouse's ack, plus
	// twice the barriers' jitter, kept between a twentieth and half of the
	// interval. A batch smaller than FlushAheadMinRows is left to the
	// barrier, one insert for the interval. The exactly-once contract does
	// not change: the flush is journaled before its insert like any other,
	// and a replay cuts the same batches whatever the timing was.
	//
	// With it off, a chain whose MaxDelay is longer than its checkpoint
	// interval inserts once per interval, at the barrier, which waits for
	// the whole insert.
	NoFlushAhead bool
	// FlushAheadMinRows is the smallest batch flushed ahead of a barrier;
	// default DefaultFlushAheadMinRows. Lower it when the checkpoints'
	// latency matters more than ClickHouse's CPU: from 10,000 rows, at
	// 40,000 rows per interval, the barrier inserted 3-5x fewer rows itself
	// for 23 % more ClickHouse CPU per row (BENCHMARKS.md); the metrics
	// exactlyonce.sink.snapshot_duration and batches_flushed_ahead show the
	// effect.
	FlushAheadMinRows int

	// MaxAttempts bounds the attempts to insert a batch, the first one
	// included; default DefaultMaxAttempts; 1 means no retry. When
	// exhausted the error is returned and the checkpoint fails; the batch
	// is never dropped.
	MaxAttempts int
	// InitialBackoff and MaxBackoff shape the exponential backoff with full
	// jitter (package internal/backoff, the SDK's one policy): the n-th
	// retry waits a random time in [0, min(MaxBackoff,
	// InitialBackoff*2^(n-1))]. Defaults DefaultInitialBackoff and
	// DefaultMaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// InsertTimeout bounds one insert attempt; default DefaultInsertTimeout.
	InsertTimeout time.Duration

	// KeepCheckpoints is how many completed checkpoints the checkpoint
	// store keeps per partition (checkpoint.StoreOptions.Keep); the journal
	// is pruned only through the oldest of them, so restore can fall back to
	// any of them. Default checkpoint.DefaultKeep. A value below the store's
	// makes a fallback to its oldest checkpoints fail with
	// sink.ErrStaleCheckpoint; nothing is lost either way.
	KeepCheckpoints int
	// AllowFreshStart lets a sink that starts without a restored checkpoint
	// run over a journal that was already pruned, which happens only when
	// every checkpoint of the partition was lost or unreadable. The batches
	// before the prune point are gone, so what the source replays is
	// inserted again under new batch cuts (duplicates, if the source starts
	// before the prune point). Default false: the first Add fails with
	// sink.ErrPrunedJournal.
	AllowFreshStart bool

	// DistinctViewRows lets New accept a materialized view target (fed by
	// the table) that is a plain MergeTree, not replicated, with
	// enable_block_number_column = 1. Default false: New refuses such a
	// target with ErrUnprovenTarget.
	//
	// The trade-off: after a server restart the sink can tell whether such
	// a target holds a batch's rows only by the rows themselves (the part
	// name the deduplication log gives may be another insert's by then),
	// and another insert that wrote the same rows there (another
	// partition's batch counted into the same hour, say) is taken for the
	// batch's, whose rows are then missing from the target for good. Set it
	// only when no insert but the batch's own can write into each such
	// target the rows the batch's insert wrote there: every row the views
	// write carries a key that only this sink's partition writes (an
	// organisation whose events all go to one partition, say). The sink's
	// own table is told by the batch's rows in any case (see the package's
	// Guarantees).
	DistinctViewRows bool

	// OnMismatch: default MismatchFail.
	OnMismatch MismatchPolicy
	// OnOutsideWindow: default WindowFail.
	OnOutsideWindow WindowPolicy

	// Now is the clock used for journal timestamps and window ages; default
	// time.Now. The flush timer always measures real time.
	Now func() time.Time
	// Logger defaults to a logger that discards.
	Logger *slog.Logger
	// MeterProvider defaults to a no-op provider.
	MeterProvider metric.MeterProvider
}

func (o *Options) setDefaults() error {
	if o.Database == "" {
		o.Database = "default"
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.MaxRows == 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = DefaultMaxDelay
	}
	if o.FlushAheadMinRows == 0 {
		o.FlushAheadMinRows = DefaultFlushAheadMinRows
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	if o.InsertTimeout == 0 {
		o.InsertTimeout = DefaultInsertTimeout
	}
	if o.KeepCheckpoints == 0 {
		o.KeepCheckpoints = checkpoint.DefaultKeep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case o.MaxRows < 0 || o.MaxRows > 1_000_000:
		return fmt.Errorf("%w: Options.MaxRows is %d: want 0 (DefaultMaxRows) or 1 to 1000000, below the server's max_insert_block_size", ErrInvalidOptions, o.MaxRows)
	case o.KeepCheckpoints < 0:
		return fmt.Errorf("%w: Options.KeepCheckpoints is %d: want 0 (checkpoint.DefaultKeep) or the checkpoint store's Keep", ErrInvalidOptions, o.KeepCheckpoints)
	case o.MaxBackoff < o.InitialBackoff:
		return fmt.Errorf("%w: Options.MaxBackoff (%v) is below InitialBackoff (%v): want MaxBackoff >= InitialBackoff", ErrInvalidOptions, o.MaxBackoff, o.InitialBackoff)
	case o.MaxAttempts < 0:
		return fmt.Errorf("%w: Options.MaxAttempts is %d: want 0 (DefaultMaxAttempts) or at least 1 (1: no retry)", ErrInvalidOptions, o.MaxAttempts)
	case o.OnMismatch < MismatchFail || o.OnMismatch > MismatchReinsert:
		return fmt.Errorf("%w: Options.OnMismatch is %d: want MismatchFail (the zero value), MismatchKeepFirst or MismatchReinsert", ErrInvalidOptions, o.OnMismatch)
	case o.OnOutsideWindow < WindowFail || o.OnOutsideWindow > WindowSkip:
		return fmt.Errorf("%w: Options.OnOutsideWindow is %d: want WindowFail (the zero value), WindowReinsert or WindowSkip", ErrInvalidOptions, o.OnOutsideWindow)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"MaxBytes", int64(o.MaxBytes)}, {"MaxDelay", int64(o.MaxDelay)}, {"FlushAheadMinRows", int64(o.FlushAheadMinRows)},
		{"InitialBackoff", int64(o.InitialBackoff)}, {"InsertTimeout", int64(o.InsertTimeout)}, {"DialTimeout", int64(o.DialTimeout)}} {
		if f.v < 0 {
			return fmt.Errorf("%w: Options.%s is negative: want 0 (its default) or more", ErrInvalidOptions, f.name)
		}
	}
	return nil
}

// policy is the insert's retry policy: exponential, doubling, full jitter.
func (o *Options) policy() backoff.Policy {
	return backoff.Policy{Initial: o.InitialBackoff, Max: o.MaxBackoff, Multiplier: 2, Jitter: 1, MaxAttempts: o.MaxAttempts}
}
