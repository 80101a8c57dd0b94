package dedup

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// UpdateType says which operations extend an entry's lifetime, as Flink's
// StateTtlConfig.UpdateType does.
type UpdateType uint8

const (
	// OnCreateAndWrite extends an entry only when it is written: on first
	// sight, and on first sight again after it expired. Finding a duplicate
	// does not keep the key alive, so a key lives TTL after its first
	// delivery however often it is redelivered. This is the default and the
	// setting the guarantee is reasoned about with.
	OnCreateAndWrite UpdateType = iota
	// OnReadAndWrite also extends an entry each time a duplicate is found,
	// so a key redelivered more often than every TTL never expires.
	OnReadAndWrite
)

func (u UpdateType) String() string {
	switch u {
	case OnCreateAndWrite:
		return "OnCreateAndWrite"
	case OnReadAndWrite:
		return "OnReadAndWrite"
	}
	return fmt.Sprintf("UpdateType(%d)", uint8(u))
}

// TimeCharacteristic says where the deduplicator's clock comes from.
type TimeCharacteristic uint8

const (
	// EventTime (the default) drives the clock by the timestamps passed to
	// Observe: the clock is the largest timestamp seen so far, kept in
	// snapshots. Decisions then depend only on the input and its order, so
	// replaying a partition from a checkpoint gives the same answers.
	//
	// Pass a timestamp that advances with the stream (the Kafka record
	// timestamp, or the time the gateway received the event), not a time
	// copied from the event's payload: a redelivery carries the original
	// payload, and a clock that never advances never expires anything. One
	// timestamp far in the future advances the clock and expires every
	// entry early, so bound timestamps upstream.
	EventTime TimeCharacteristic = iota
	// ProcessingTime drives the clock by Options.Now, ignoring the
	// timestamps passed to Observe. Decisions after a replay may differ from
	// the first run when entries expire in between.
	ProcessingTime
)

func (c TimeCharacteristic) String() string {
	switch c {
	case EventTime:
		return "EventTime"
	case ProcessingTime:
		return "ProcessingTime"
	}
	return fmt.Sprintf("TimeCharacteristic(%d)", uint8(c))
}

const (
	// DefaultTTL is the TTL we recommend passing to New for GitHub and Jira
	// webhooks. The TTL must cover the longest gap between two deliveries
	// of one event: how long the provider keeps retrying, and how late an
	// operator may redeliver by hand (GitHub allows redelivery of
	// deliveries from the past three days). It has nothing to do with how
	// long Kafka retains data. Four days adds a day of margin; state grows
	// linearly with the TTL (about 25-38 bytes per key in it).
	DefaultTTL = 96 * time.Hour

	// MaxTTL is the longest TTL New accepts.
	MaxTTL = 100 * 365 * 24 * time.Hour

	// DefaultCleanupBudget is the number of table slots each Observe call
	// examines for expired entries when Options.CleanupBudget is 0.
	DefaultCleanupBudget = 8

	// MaxExpectedKeys is the largest Options.ExpectedKeys New accepts: a
	// table of about 100 GiB.
	MaxExpectedKeys = 1 << 32

	// fullCleanupBudget is the number of slots examined before Observe
	// reports ErrFull, to free expired entries first.
	fullCleanupBudget = 1024
)

// Options configures a Deduplicator. The zero value is valid.
type Options struct {
	// UpdateType says whether finding a duplicate extends the entry.
	// Default OnCreateAndWrite.
	UpdateType UpdateType

	// TimeCharacteristic selects event time (default, deterministic on
	// replay) or processing time.
	TimeCharacteristic TimeCharacteristic

	// Now is the processing-time clock. Default time.Now. Setting it with
	// EventTime is an error.
	Now func() time.Time

	// ExactKeys stores every key's bytes beside its 128-bit fingerprint, so
	// two keys with the same fingerprint are still told apart. Default
	// false: only fingerprints are kept, and two distinct keys collide (the
	// second is wrongly reported as a duplicate) with probability about
	// n²/2¹²⁹ for n live keys: 1.5e-21 at 10⁹ keys. Exact keys cost the
	// key's bytes plus about 15 bytes of references per key, and the key
	// arena grows by doubling: 115 bytes per 53-byte key in the benchmark,
	// against 37 without and 109 for a map[string]int64.
	ExactKeys bool

	// MaxKeys caps the number of stored entries. When the cap is reached,
	// Observe of a new key returns ErrFull and records nothing; no entry is
	// ever evicted to make room, since evicting a key silently lets its
	// duplicate through. Expired entries count until cleanup removes them;
	// at the cap, Observe of a new key first looks for entries expired at
	// that key's time among the next 1024 slots of the cleanup sweep, then
	// through the whole table (a pause proportional to it, at most once per
	// second of the clock while the table stays full of live keys), and
	// frees them if there are any. So ErrFull means MaxKeys live keys, and a
	// refused call changes no state.
	// Default 0: no cap (memory is bounded by the TTL and the input rate).
	MaxKeys int

	// ExpectedKeys presizes the table for this many entries, so that the
	// table does not grow (a pause proportional to its size) while it fills.
	// At most MaxExpectedKeys. Default 0: start small and grow by half when
	// 80% full.
	ExpectedKeys int

	// CleanupBudget is the number of table slots each Observe examines for
	// expired entries, bounding the work per call. A table of S slots is
	// swept once every S/CleanupBudget calls, so expired entries hold
	// memory for at most that long. Default DefaultCleanupBudget.
	CleanupBudget int

	// Incremental makes each checkpoint write only the keys written since
	// the previous one, when the deduplicator is attached to a
	// checkpoint.Coordinator (which calls UseObjects; otherwise Snapshot
	// writes full snapshots). Snapshot then writes a delta object beside
	// the checkpoint file (the first time, a base holding every key) and
	// returns a manifest of a few hundred bytes naming the base and the
	// deltas; a checkpoint of a table of 10 million keys of which 1% changed
	// writes about 2 MB instead of 200 MB. Every MaxDeltas deltas, or when
	// the deltas outweigh half the base, a compaction merges base and deltas
	// into a new base in the background, from the objects, so no checkpoint
	// waits for it. Restore reads the base and the deltas, so a restart
	// reads about as much as with full snapshots. Restore accepts full
	// snapshots and manifests whatever this option says. Default false:
	// every checkpoint holds the whole state.
	Incremental bool

	// MaxDeltas is how many deltas an incremental chain holds before a
	// compaction starts (see Incremental). Fewer means less to read at
	// restore and more compaction work. Default DefaultMaxDeltas.
	MaxDeltas int

	// Logger receives debug messages about table growth and warnings about
	// failed compactions. Default discards.
	Logger *slog.Logger

	// MeterProvider provides the instruments exactlyonce.dedup.first_seen,
	// exactlyonce.dedup.dropped, exactlyonce.dedup.keys and
	// exactlyonce.dedup.expired (see the table in docs/metrics.md). The
	// values are published every 256 Observe calls and at every Snapshot
	// and Cleanup, so a collection may lag by up to 255 calls. Default: a
	// no-op provider.
	MeterProvider metric.MeterProvider

	// MetricAttributes are added to every measurement, for example the
	// topic and partition the deduplicator serves, under the OpenTelemetry
	// keys messaging.destination.name and messaging.destination.partition.id
	// as the SDK's other metrics carry them.
	MetricAttributes []attribute.KeyValue
}

func (o *Options) setDefaults() error {
	switch o.UpdateType {
	case OnCreateAndWrite, OnReadAndWrite:
	default:
		return fmt.Errorf("%w: Options.UpdateType is %v: want OnCreateAndWrite (the zero value) or OnReadAndWrite", ErrInvalidOptions, o.UpdateType)
	}
	switch o.TimeCharacteristic {
	case EventTime:
		if o.Now != nil {
			return fmt.Errorf("%w: Options.Now is set but Options.TimeCharacteristic is EventTime, which ignores it: unset Now, or set TimeCharacteristic to ProcessingTime", ErrInvalidOptions)
		}
	case ProcessingTime:
		if o.Now == nil {
			o.Now = time.Now
		}
	default:
		return fmt.Errorf("%w: Options.TimeCharacteristic is %v: want EventTime (the zero value) or ProcessingTime", ErrInvalidOptions, o.TimeCharacteristic)
	}
	if o.MaxKeys < 0 {
		return fmt.Errorf("%w: Options.MaxKeys is %d: want 0 (no limit) or more", ErrInvalidOptions, o.MaxKeys)
	}
	if o.ExpectedKeys < 0 || o.ExpectedKeys > MaxExpectedKeys {
		return fmt.Errorf("%w: Options.ExpectedKeys is %d: want 0 (the default) to %d", ErrInvalidOptions, o.ExpectedKeys, MaxExpectedKeys)
	}
	if o.CleanupBudget < 0 {
		return fmt.Errorf("%w: Options.CleanupBudget is %d: want 0 (DefaultCleanupBudget) or more", ErrInvalidOptions, o.CleanupBudget)
	}
	if o.CleanupBudget == 0 {
		o.CleanupBudget = DefaultCleanupBudget
	}
	if o.MaxDeltas < 0 {
		return fmt.Errorf("%w: Options.MaxDeltas is %d: want 0 (DefaultMaxDeltas) or more", ErrInvalidOptions, o.MaxDeltas)
	}
	if o.MaxDeltas == 0 {
		o.MaxDeltas = DefaultMaxDeltas
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MeterProvider == nil {
		o.MeterProvider = noop.NewMeterProvider()
	}
	return nil
}

var (
	// ErrInvalidOptions is returned by New for a missing TTL or an invalid
	// option.
	ErrInvalidOptions = errors.New("dedup: invalid options")

	// ErrFull is returned by Observe when a new key arrives while
	// Options.MaxKeys entries are stored, and by Restore for a snapshot
	// holding more. Nothing was recorded: the event was neither accepted
	// nor dropped, and the caller must not pass it on as first-seen nor
	// drop it as a duplicate; fail the partition's task or back off.
	ErrFull = errors.New("dedup: MaxKeys reached")

	// ErrTimeOutOfRange is returned by Observe when the clock plus the TTL
	// lies past 2106-02-07 (expiries are stored as 32-bit Unix seconds).
	// Nothing was recorded. The error is deterministic: retrying or
	// replaying the record fails again, so validate timestamps upstream
	// or route such records aside.
	ErrTimeOutOfRange = errors.New("dedup: time out of range")

	// ErrKeyTooLong is returned by Observe in exact mode for a key longer
	// than 16 MiB - 1. Nothing was recorded, and retrying fails again.
	ErrKeyTooLong = errors.New("dedup: key too long")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("dedup: closed")

	// ErrCorrupt is wrapped by the error Restore returns for a
	// truncated, corrupt or non-canonical snapshot. Nothing was loaded.
	ErrCorrupt = errors.New("dedup: corrupt snapshot")

	// ErrUnsupportedVersion is wrapped by the error Restore returns for a
	// snapshot written by a newer, unknown format version. Nothing was
	// loaded.
	ErrUnsupportedVersion = errors.New("dedup: unsupported snapshot version")

	// ErrIncompatible is returned by Restore when a snapshot of
	// fingerprints only is restored into a deduplicator with ExactKeys.
	// Nothing was loaded.
	ErrIncompatible = errors.New("dedup: snapshot has no exact keys")
)
