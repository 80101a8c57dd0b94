package state

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// entry is a stored value and when it expires.
type entry[V any] struct {
	v   V
	exp int64 // Unix nanoseconds from which the entry is absent; 0: never
}

// pending is an expiry in the cleanup queue: key k expires at exp, unless
// it was written or removed since (then the queue item is stale).
type pending[C comparable] struct {
	k   C
	exp int64
}

// table is the state behind a Value and a Map: a Go map from a comparable
// key to an entry, a clock, and a queue of expiries.
//
// The queue makes cleanup cost nothing per idle entry: the clock never goes
// back and the TTL is fixed, so every write expires no earlier than every
// write before it, and appending each write's expiry keeps the queue in
// expiry order. Cleanup pops from the front while the front has expired;
// an item whose key was written again or removed since is stale and is
// skipped. One case breaks the order: entries restored from a
// snapshot written with a longer TTL, followed by new writes. Cleanup then
// lags (it stops at the first item that has not expired), never removes
// too early, and the queue is sorted again before MaxKeys refuses a write.
type table[C comparable, V any] struct {
	opts  Options
	ttl   int64
	m     map[C]entry[V]
	q     []pending[C]
	qHead int
	// sorted is false when an item was appended with an expiry below the
	// last one: cleanup may then stop at a front item that has not expired
	// while later ones have. MaxKeys sorts the queue before refusing.
	sorted bool
	clock  int64 // Unix nanoseconds, the latest time seen; never decreases
	closed bool
	hints  sizeHints
	// onRemove, if set, learns every key removed from m (the Map's index).
	onRemove func(C)

	counts counts
	stats  stats
	reg    metric.Registration
}

type counts struct {
	writes, reads, expired int64
	calls                  uint32
}

type stats struct {
	writes, reads, expired, entries atomic.Int64
}

// publishEvery is how many calls may pass between two publications of the
// counts to metric collection.
const publishEvery = 256

// init sets up an empty table; the table holds atomics and is not copied.
func (t *table[C, V]) init(opts Options) error {
	if err := opts.setDefaults(); err != nil {
		return err
	}
	t.opts, t.ttl, t.m, t.sorted = opts, int64(opts.TTL), make(map[C]entry[V]), true
	return t.registerMetrics()
}

func (t *table[C, V]) publish() {
	t.stats.writes.Store(t.counts.writes)
	t.stats.reads.Store(t.counts.reads)
	t.stats.expired.Store(t.counts.expired)
	t.stats.entries.Store(int64(len(t.m)))
}

// tick counts a call, publishes every publishEvery calls and removes up to
// CleanupBudget expired entries.
func (t *table[C, V]) tick() {
	t.counts.calls++
	if t.counts.calls%publishEvery == 0 {
		t.publish()
	}
	t.cleanup(t.opts.CleanupBudget)
}

// advance returns the clock after time at, without committing it.
func (t *table[C, V]) advance(at time.Time) int64 {
	if t.opts.TimeCharacteristic == ProcessingTime {
		at = t.opts.Now()
	}
	switch sec := at.Unix(); {
	case sec < 0:
		return t.clock // before the epoch: the clock cannot go there
	case sec >= math.MaxInt64/int64(time.Second):
		return math.MaxInt64 // 2262 and later
	}
	return max(t.clock, at.UnixNano())
}

// expiry returns the expiry of an entry written at clock.
func (t *table[C, V]) expiry(clock int64) int64 {
	if t.ttl == 0 {
		return 0
	}
	if clock > math.MaxInt64-t.ttl {
		return math.MaxInt64
	}
	return clock + t.ttl
}

func live(exp, clock int64) bool { return exp == 0 || exp > clock }

// get returns k's value if it is stored and live at time at.
func (t *table[C, V]) get(k C, at time.Time) (V, bool) {
	t.clock = t.advance(at)
	t.counts.reads++
	e, ok := t.m[k]
	if !ok || !live(e.exp, t.clock) {
		t.tick()
		var zero V
		return zero, false
	}
	if t.opts.UpdateType == OnReadAndWrite && t.ttl != 0 {
		if exp := t.expiry(t.clock); exp > e.exp {
			e.exp = exp
			t.m[k] = e
			t.enqueue(k, exp)
		}
	}
	t.tick()
	return e.v, true
}

// put stores v under k at time at.
func (t *table[C, V]) put(k C, v V, at time.Time) error {
	clock := t.advance(at)
	if t.opts.MaxKeys > 0 && len(t.m) >= t.opts.MaxKeys && !t.has(k) {
		// Make room from entries expired at this call's clock. Remove
		// anything only once one is known to have expired, so that a
		// refused call changes nothing (not even the clock).
		if !t.expiredAt(clock) {
			return fmt.Errorf("%w: %d entries stored", ErrFull, len(t.m))
		}
		t.clock = clock
		t.cleanup(1) // the front item, which expiredAt found expired
	}
	t.clock = clock
	exp := t.expiry(clock)
	t.m[k] = entry[V]{v: v, exp: exp}
	if exp != 0 {
		t.enqueue(k, exp)
	}
	t.counts.writes++
	t.tick()
	return nil
}

func (t *table[C, V]) has(k C) bool {
	_, ok := t.m[k]
	return ok
}

// remove deletes k at time at and reports whether it was stored and live.
func (t *table[C, V]) remove(k C, at time.Time) bool {
	t.clock = t.advance(at)
	e, ok := t.m[k]
	if ok {
		delete(t.m, k)
		if t.onRemove != nil {
			t.onRemove(k)
		}
		t.counts.writes++
	}
	t.tick()
	return ok && live(e.exp, t.clock)
}

func (t *table[C, V]) enqueue(k C, exp int64) {
	if n := len(t.q); n > t.qHead && t.q[n-1].exp > exp {
		t.sorted = false
	}
	t.q = append(t.q, pending[C]{k: k, exp: exp})
	// Stale items pile up when keys are written often: rebuild the queue
	// from the map when it holds more than twice as many items as entries.
	if live := len(t.q) - t.qHead; live > 1024 && live > 2*len(t.m) {
		t.rebuildQueue()
	}
}

// rebuildQueue makes the queue hold exactly one item per expiring entry,
// in expiry order: proportional to the state, at most once per as many
// writes as it holds entries.
func (t *table[C, V]) rebuildQueue() {
	// Reuse the queue's array: it holds more items than the map has
	// entries whenever a rebuild is due, and the old items are not read.
	old := t.q
	q := t.q[:0]
	for k, e := range t.m {
		if e.exp != 0 {
			q = append(q, pending[C]{k: k, exp: e.exp})
		}
	}
	if len(q) < len(old) {
		clear(old[len(q):]) // let the keys of stale items go
	}
	t.opts.Logger.Debug("state: expiry queue rebuilt",
		slog.Int("entries", len(t.m)), slog.Int("items_before", len(old)-t.qHead), slog.Int("items", len(q)))
	// Ties in any order: cleanup removes them all at the same clock.
	slices.SortFunc(q, func(a, b pending[C]) int { return cmp.Compare(a.exp, b.exp) })
	t.q, t.qHead, t.sorted = q, 0, true
}

// expiredAt reports whether an entry has expired at clock, sorting the
// queue first if it is out of order.
func (t *table[C, V]) expiredAt(clock int64) bool {
	if !t.sorted {
		t.rebuildQueue()
	}
	for t.qHead < len(t.q) {
		p := t.q[t.qHead]
		if e, ok := t.m[p.k]; !ok || e.exp != p.exp {
			t.pop() // stale
			continue
		}
		return p.exp <= clock
	}
	return false
}

func (t *table[C, V]) pop() {
	var zero pending[C]
	t.q[t.qHead] = zero // let the key go
	t.qHead++
	switch {
	case t.qHead == len(t.q):
		t.q, t.qHead = t.q[:0], 0
	case t.qHead > 1024 && t.qHead > len(t.q)/2:
		n := copy(t.q, t.q[t.qHead:])
		clear(t.q[n:])
		t.q, t.qHead = t.q[:n], 0
	}
}

// cleanup examines up to n queue items at the clock, removes the entries
// that expired and returns how many.
func (t *table[C, V]) cleanup(n int) int {
	removed := 0
	for ; n > 0 && t.qHead < len(t.q); n-- {
		p := t.q[t.qHead]
		if p.exp > t.clock {
			break
		}
		t.pop()
		if e, ok := t.m[p.k]; ok && e.exp == p.exp {
			delete(t.m, p.k)
			if t.onRemove != nil {
				t.onRemove(p.k)
			}
			removed++
		}
	}
	t.counts.expired += int64(removed)
	return removed
}

// cleanupAll is Cleanup: with ProcessingTime it reads the clock first.
func (t *table[C, V]) cleanupAll(n int) int {
	if t.closed {
		return 0
	}
	if t.opts.TimeCharacteristic == ProcessingTime {
		t.clock = t.advance(time.Time{})
	}
	if !t.sorted {
		t.rebuildQueue()
	}
	removed := t.cleanup(n)
	t.publish()
	return removed
}

func (t *table[C, V]) close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	t.m, t.q, t.qHead = nil, nil, 0
	if t.reg != nil {
		return t.reg.Unregister()
	}
	return nil
}
