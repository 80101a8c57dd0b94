package state

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
// StateTtlConfig.UpdateType does (and dedup.UpdateType).
type UpdateType uint8

const (
	// OnCreateAndWrite extends an entry only when it is written (Put): an
	// entry lives TTL after its last write, however often it is read. The
	// default.
	OnCreateAndWrite UpdateType = iota
	// OnReadAndWrite also extends an entry each time Get finds it, so an
	// entry read more often than every TTL never expires.
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

// TimeCharacteristic says where the state's clock, which TTLs are measured
// on, comes from.
type TimeCharacteristic uint8

const (
	// EventTime (the default) drives the clock by the times passed to Get,
	// Put and Delete: the clock is the largest time passed so far, kept in
	// snapshots. What expires then depends only on the input and its
	// order, so a replay from a checkpoint sees the same entries as the
	// first run. Pass the Kafka record's timestamp, which advances with
	// the stream; one time far in the future expires every entry early,
	// so bound times upstream.
	EventTime TimeCharacteristic = iota
	// ProcessingTime drives the clock by Options.Now and ignores the times
	// passed in. A replay may see entries expire that the first run still
	// found.
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
	// MaxTTL is the longest Options.TTL accepted.
	MaxTTL = 100 * 365 * 24 * time.Hour

	// DefaultCleanupBudget is how many expired entries each call may
	// remove when Options.CleanupBudget is 0.
	DefaultCleanupBudget = 8
)

// Options configures a Value or a Map. The zero value is valid: entries
// never expire, event time, no cap.
type Options struct {
	// TTL is how long an entry lives after it was written (and with
	// OnReadAndWrite, read), measured on the state's clock. Default 0:
	// entries never expire, which suits a bounded key set (one entry per
	// repository); state keyed by something unbounded (pull requests,
	// users, sessions) grows forever without a TTL or explicit Delete.
	TTL time.Duration

	// UpdateType says whether Get extends an entry. Default
	// OnCreateAndWrite.
	UpdateType UpdateType

	// TimeCharacteristic selects event time (default, deterministic on
	// replay) or processing time.
	TimeCharacteristic TimeCharacteristic

	// Now is the processing-time clock. Default time.Now. Setting it with
	// EventTime is an error.
	Now func() time.Time

	// MaxKeys caps the number of stored entries (for a Map, pairs of key
	// and user key). At the cap, Put of a new entry first removes entries
	// expired at its time and, if none, returns ErrFull and changes
	// nothing: no entry is ever evicted to make room, since a state that
	// forgets silently gives wrong answers. Default 0: no cap.
	MaxKeys int

	// CleanupBudget is how many expired entries each Get, Put or Delete
	// may remove, bounding the work per call. Expired entries are found in
	// expiry order, without a scan. Default DefaultCleanupBudget.
	CleanupBudget int

	// Logger receives a debug message each time the expiry queue is
	// rebuilt (a pause proportional to the state, amortised over as many
	// writes). Default discards.
	Logger *slog.Logger

	// MeterProvider provides the instruments exactlyonce.state.entries,
	// exactlyonce.state.writes, exactlyonce.state.reads and
	// exactlyonce.state.expired (see docs/metrics.md). Values are published
	// every 256 calls and at every Snapshot and Cleanup. Default: a no-op
	// provider.
	MeterProvider metric.MeterProvider

	// MetricAttributes are added to every measurement: the state's name
	// and the topic and partition it serves, under the keys the SDK's
	// other metrics use (messaging.destination.name,
	// messaging.destination.partition.id).
	MetricAttributes []attribute.KeyValue
}

func (o *Options) setDefaults() error {
	if o.TTL < 0 || o.TTL > MaxTTL {
		return fmt.Errorf("%w: Options.TTL is %v: want 0 (never expire) to %v", ErrInvalidOptions, o.TTL, MaxTTL)
	}
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
	if o.CleanupBudget < 0 {
		return fmt.Errorf("%w: Options.CleanupBudget is %d: want 0 (DefaultCleanupBudget) or more", ErrInvalidOptions, o.CleanupBudget)
	}
	if o.CleanupBudget == 0 {
		o.CleanupBudget = DefaultCleanupBudget
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
	// ErrInvalidOptions is returned by NewValue and NewMap for an invalid
	// option or a missing codec.
	ErrInvalidOptions = errors.New("state: invalid options")

	// ErrFull is returned by Put for a new entry while Options.MaxKeys
	// live entries are stored, and by Restore for a snapshot holding more.
	// Nothing was stored: fail the partition's task or back off; never
	// drop the record.
	ErrFull = errors.New("state: MaxKeys reached")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("state: closed")

	// ErrCorrupt is wrapped by the error Restore returns for a truncated,
	// corrupt or non-canonical snapshot, or one whose keys or values the
	// codecs refuse. Nothing was loaded.
	ErrCorrupt = errors.New("state: corrupt snapshot")

	// ErrUnsupportedVersion is wrapped by the error Restore returns for a
	// snapshot of an unknown format version. Nothing was loaded.
	ErrUnsupportedVersion = errors.New("state: unsupported snapshot version")

	// ErrIncompatible is wrapped by the error Restore returns for the
	// snapshot of another kind of state (a Map's restored into a Value, or
	// the other way round). Nothing was loaded.
	ErrIncompatible = errors.New("state: snapshot of another kind of state")

	// ErrAmbiguousKey is wrapped by the error Snapshot returns when two
	// stored keys encode to the same bytes (a NaN key, a time.Time key in
	// two locations, a codec that loses information): no snapshot could
	// restore both. The checkpoint fails; fix the key codec or the keys.
	ErrAmbiguousKey = errors.New("state: two keys with one encoding")
)
