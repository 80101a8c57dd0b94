package dedup

import (
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Cleanup examines up to n slots for expired entries (continuing where the
// last examination stopped), removes those it finds and returns how many it
// removed. Observe already does this with Options.CleanupBudget; call Cleanup
// when the partition is idle to free memory sooner. When a Cleanup call's
// examination wraps around the end of the table and finds it less than a
// fifth full, it also shrinks the table (not below Options.ExpectedKeys), a
// pause proportional to the table's size; Observe never shrinks the table.
//
// With ProcessingTime, Cleanup first advances the clock to Options.Now (if
// later), so that keys which expired while no Observe came are removed: an
// idle deduplicator gives its memory back. With EventTime the clock is the
// largest event time seen, which only Observe moves.
func (d *Deduplicator) Cleanup(n int) int {
	if d.closed {
		return 0
	}
	if d.opts.TimeCharacteristic == ProcessingTime {
		// advance fails only for a Now past 2106 minus the TTL: keep the
		// clock then, as Observe would refuse that time too.
		if clock, err := d.advance(time.Time{}); err == nil {
			d.clock = clock
		}
	}
	removed := d.cleanup(n, true)
	d.publish()
	return removed
}

// advance returns the clock after time t, without committing it.
func (d *Deduplicator) advance(t time.Time) (int64, error) {
	if d.opts.TimeCharacteristic == ProcessingTime {
		t = d.opts.Now()
	}
	sec := t.Unix()
	if sec < 0 {
		return d.clock, nil // before the epoch: cannot advance the clock
	}
	if sec > int64(math.MaxUint32) {
		return 0, fmt.Errorf("%w: %v", ErrTimeOutOfRange, t)
	}
	c := max(d.clock, t.UnixNano())
	if c+d.ttl > maxClockNanos {
		return 0, fmt.Errorf("%w: %v plus TTL", ErrTimeOutOfRange, t)
	}
	return c, nil
}

// expiredAhead reports whether one of the n slots cleanup examines next
// holds an entry expired at nowSec. If so, cleanup(n) at that clock removes
// at least one entry: removals only shift entries back towards the cursor.
// firstExpired returns the first slot holding an entry expired at nowSec,
// scanning the whole table. A scan that finds none records the earliest
// expiry it saw: until nowSec reaches it nothing can have expired, since
// every later write expires after every stored entry (the clock never goes
// back and the TTL is fixed), so refusals at MaxKeys cost a full scan only
// once per expiry second, not once per call.
func (d *Deduplicator) firstExpired(nowSec uint32) (int, bool) {
	if nowSec < d.noneExpiredBefore {
		return 0, false
	}
	earliest := uint32(math.MaxUint32)
	for i := range d.t.slots {
		e := d.t.slots[i].exp()
		if e == 0 {
			continue
		}
		if e <= nowSec {
			return i, true
		}
		earliest = min(earliest, e)
	}
	d.noneExpiredBefore = earliest
	return 0, false
}

func (d *Deduplicator) expiredAhead(n int, nowSec uint32) bool {
	c := d.cursor
	for range min(n, len(d.t.slots)) {
		if c >= len(d.t.slots) {
			c = 0
		}
		if e := d.t.slots[c].exp(); e != 0 && e <= nowSec {
			return true
		}
		c++
	}
	return false
}

func (d *Deduplicator) cleanup(n int, shrink bool) int {
	nowSec := uint32(d.clock / int64(time.Second))
	removed := 0
	wrapped := false
	c := d.cursor
	for n > 0 {
		if c >= len(d.t.slots) {
			c = 0
			wrapped = true
		}
		// Fast path: scan for the first expired entry in range. An empty
		// slot has expiry 0, which wraps to the largest value here.
		span := d.t.slots[c:min(c+n, len(d.t.slots))]
		i := 0
		for i < len(span) && span[i].exp()-1 >= nowSec {
			i++
		}
		c += i
		n -= i
		if i == len(span) {
			continue
		}
		// The next entry may shift into c: examine it next.
		d.t.remove(c)
		removed++
		n--
	}
	d.cursor = c
	if removed > 0 {
		d.counts.expired += int64(removed)
		if d.t.exact && d.t.dead > 1<<20 && d.t.dead > len(d.t.arena)/2 {
			d.resize(d.t.homes, "compact")
		}
	}
	// After a full sweep by Cleanup, give memory back if the table is
	// mostly empty (a burst of keys expired), keeping the presized size.
	// Observe never does this: the rebuild is proportional to the table.
	if shrink && wrapped && d.t.count < d.t.growAt/4 {
		if homes := homesFor(max(2*d.t.count, d.opts.ExpectedKeys)); homes < d.t.homes {
			d.resize(homes, "shrink")
		}
	}
	return removed
}

func (d *Deduplicator) resize(homes uint64, reason string) {
	start := time.Now()
	nowSec := uint32(d.clock / int64(time.Second))
	before := d.t.count
	d.t = d.t.rebuild(homes, nowSec)
	if dropped := before - d.t.count; dropped > 0 {
		d.counts.expired += int64(dropped)
	}
	d.cursor = 0
	d.opts.Logger.Debug("dedup: table rebuilt",
		slog.String("reason", reason),
		slog.Int("entries", d.t.count),
		slog.Int("slots", len(d.t.slots)),
		slog.Duration("took", time.Since(start)))
}
