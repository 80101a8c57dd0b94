package dedup

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

var (
	_ checkpoint.Participant       = (*Deduplicator)(nil)
	_ checkpoint.ObjectParticipant = (*Deduplicator)(nil)
)

// maxClockNanos is the largest clock value: expiries are 32-bit Unix seconds.
const maxClockNanos = int64(math.MaxUint32) * int64(time.Second)

// Deduplicator remembers the keys it has seen for a TTL and tells first
// sights from duplicates. See the package documentation for the semantics.
//
// A Deduplicator is owned by one partition's processing chain and is not
// safe for concurrent use: call its methods from one goroutine at a time.
// Its metrics may be collected concurrently.
type Deduplicator struct {
	ttl    int64 // nanoseconds
	opts   Options
	t      table
	clock  int64 // Unix nanoseconds, the latest time seen; never decreases
	cursor int   // next slot the incremental cleanup examines
	closed bool
	// noneExpiredBefore is a lower bound of every stored expiry, known from
	// the last full scan that found nothing expired (0: unknown). Not part
	// of a snapshot.
	noneExpiredBefore uint32
	// touched sums the slots ObserveBatch reads ahead, so that the compiler
	// keeps those reads.
	touched uint32

	inc incremental // incremental snapshots (Options.Incremental)

	counts counts // the owner's running totals
	stats  stats  // counts as last published, read by metric collection
	reg    metric.Registration
}

// publishEvery is how many Observe calls may pass between two publications
// of the counts to metric collection.
const publishEvery = 256

// counts are the owner's running totals. They are plain integers: an atomic
// add per decision would serialise the memory accesses of consecutive
// decisions, which otherwise overlap.
type counts struct {
	firstSeen, dropped, expired int64
	calls                       uint32
}

// stats are published by the owner and read by metric collection.
type stats struct {
	firstSeen, dropped, expired, live atomic.Int64
}

func (d *Deduplicator) publish() {
	d.stats.firstSeen.Store(d.counts.firstSeen)
	d.stats.dropped.Store(d.counts.dropped)
	d.stats.expired.Store(d.counts.expired)
	d.stats.live.Store(int64(d.t.count))
}

// tick counts an Observe call and publishes the counts every publishEvery
// calls.
func (d *Deduplicator) tick() {
	d.counts.calls++
	if d.counts.calls%publishEvery == 0 {
		d.publish()
	}
}

// New returns a Deduplicator that remembers each key for ttl after it was
// written (see UpdateType). A ttl is required: there is no "keep forever",
// because state that is never cleaned grows without bound. DefaultTTL is the
// recommended value for webhook sources.
func New(ttl time.Duration, opts Options) (*Deduplicator, error) {
	if ttl < time.Second || ttl > MaxTTL {
		return nil, fmt.Errorf("%w: ttl is %v: want 1s to %v (dedup.DefaultTTL is %v)", ErrInvalidOptions, ttl, MaxTTL, DefaultTTL)
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	d := &Deduplicator{
		ttl:  int64(ttl),
		opts: opts,
		t:    newTable(homesFor(opts.ExpectedKeys), overflowSlots, opts.ExactKeys),
	}
	// Empty, so the change log can hold the whole table (see incremental).
	d.inc.valid, d.inc.fresh = opts.Incremental, opts.Incremental
	if err := d.registerMetrics(); err != nil {
		return nil, err
	}
	return d, nil
}

// Observe records key as seen at time t and reports whether this is its first
// sight: true if the key is absent or its entry has expired (the caller
// passes the event on), false if it is a duplicate (the caller drops it).
//
// With EventTime, t advances the clock (to the largest t seen so far); with
// ProcessingTime, t is ignored and Options.Now is read instead.
//
// On error nothing is recorded and the event is neither first-seen nor a
// duplicate: see ErrFull, ErrTimeOutOfRange, ErrKeyTooLong, ErrClosed.
//
// Each call also examines Options.CleanupBudget slots for expired entries.
// A call that grows the table (see Options.ExpectedKeys) rehashes it, and
// in ExactKeys mode a call whose cleanup leaves more than half of the key
// arena (and over 1 MiB) unreferenced compacts it: pauses proportional to
// the table, amortised over the calls that filled it.
func (d *Deduplicator) Observe(key []byte, t time.Time) (bool, error) {
	return d.observe(key, hashKey(key), t)
}

// A Sighting is one key seen at one time: an element of ObserveBatch's input.
type Sighting struct {
	Key  []byte
	Time time.Time
}

// batchAhead is how many sightings ObserveBatch hashes and looks up ahead of
// deciding them.
const batchAhead = 8

// ObserveBatch decides the sightings in order, with the same answers and the
// same resulting state as one Observe call per sighting, and appends each
// answer (true: first sight) to first, which it returns.
//
// It is faster than the calls it replaces on large tables: it reads the
// table slots of several keys before deciding any of them, so their cache
// misses overlap instead of following one another.
//
// On error, the sightings before the failing one are decided and their
// answers appended; the failing one and those after it are not, and nothing
// is recorded for them. The error is Observe's for the failing sighting.
func (d *Deduplicator) ObserveBatch(s []Sighting, first []bool) ([]bool, error) {
	var hs [batchAhead]hash128
	for len(s) > 0 {
		n := min(len(s), batchAhead)
		for i := range n {
			hs[i] = hashKey(s[i].Key)
		}
		d.touched += d.t.touch(hs[:n])
		for i := range n {
			f, err := d.observe(s[i].Key, hs[i], s[i].Time)
			if err != nil {
				return first, err
			}
			first = append(first, f)
		}
		s = s[n:]
	}
	return first, nil
}

// observe is Observe with the key's hash h computed by the caller.
func (d *Deduplicator) observe(key []byte, h hash128, t time.Time) (bool, error) {
	if d.closed {
		return false, ErrClosed
	}
	clock, err := d.advance(t)
	if err != nil {
		return false, err
	}
	if d.t.exact && len(key) > maxExactKeyLen {
		return false, fmt.Errorf("%w: %d bytes", ErrKeyTooLong, len(key))
	}
	nowSec := uint32(clock / int64(time.Second))
	exp := uint32((clock + d.ttl + int64(time.Second) - 1) / int64(time.Second))

	i, found := d.t.find(h, key)
	if found {
		s := &d.t.slots[i]
		if old := s.exp(); old > nowSec {
			if d.opts.UpdateType == OnReadAndWrite && exp > old {
				s.setExp(exp)
				if d.inc.valid {
					d.logWrite(h, key, exp)
				}
			}
			d.clock = clock
			d.counts.dropped++
			d.tick()
			d.cleanup(d.opts.CleanupBudget, false)
			return false, nil
		}
		// Expired but not yet cleaned up: absent, so write it anew.
		s.setExp(exp)
		if d.inc.valid {
			d.logWrite(h, key, exp)
		}
		d.clock = clock
		d.counts.firstSeen++
		d.tick()
		d.cleanup(d.opts.CleanupBudget, false)
		return true, nil
	}

	if d.opts.MaxKeys > 0 && d.t.count >= d.opts.MaxKeys {
		// Make room from entries expired at this call's clock, not only the
		// committed one: with EventTime only a successful Observe advances
		// the clock, so a new key must be able to free what its own time
		// expires. Remove anything only once an expired entry is known to
		// be in reach, so that this call succeeds and commits the clock
		// anyway; otherwise fail, changing nothing visible.
		if !d.expiredAhead(fullCleanupBudget, nowSec) {
			// Nothing expired near the cursor: look through the whole
			// table once before refusing, or a replayed record would be
			// refused on every restart (a restore resets the cursor).
			at, ok := d.firstExpired(nowSec)
			if !ok {
				return false, fmt.Errorf("%w: %d keys stored", ErrFull, d.t.count)
			}
			d.cursor = at
		}
		d.clock = clock
		d.cleanup(fullCleanupBudget, false)
		i, _ = d.t.find(h, key)
	}
	if d.t.count >= d.t.growAt {
		d.resize(d.t.homes*growNum/growDen, "load")
		i, _ = d.t.find(h, key)
	}
	for !d.t.insert(i, h, key, exp) {
		// The run reached the end of the array: very rare, grow.
		d.resize(d.t.homes*growNum/growDen, "overflow")
		i, _ = d.t.find(h, key)
	}
	if d.inc.valid {
		d.logWrite(h, key, exp)
	}
	d.clock = clock
	d.counts.firstSeen++
	d.tick()
	d.cleanup(d.opts.CleanupBudget, false)
	return true, nil
}

// Contains reports whether key is stored and not expired at the current
// clock (the latest time Observe saw). It changes nothing: it neither
// records the key nor extends it, whatever the UpdateType.
func (d *Deduplicator) Contains(key []byte) bool {
	if d.closed {
		return false
	}
	i, found := d.t.find(hashKey(key), key)
	return found && d.t.slots[i].exp() > uint32(d.clock/int64(time.Second))
}

// Len returns the number of stored entries, including expired entries that
// cleanup has not removed yet.
func (d *Deduplicator) Len() int { return d.t.count }

// Clock returns the deduplicator's clock: the latest time Observe saw (the
// largest event time, or the latest processing time, which Cleanup also
// reads), or the Unix epoch before the first call.
func (d *Deduplicator) Clock() time.Time { return time.Unix(0, d.clock).UTC() }

var _ checkpoint.AsyncParticipant = (*Deduplicator)(nil)

// Close releases the state and unregisters the metrics callback. It is safe
// to call more than once; every other method returns ErrClosed afterwards.
func (d *Deduplicator) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	d.stopCompaction()
	d.t = table{}
	d.inc.log = nil
	return d.reg.Unregister()
}
