package kafkasource

import (
	"sync"

	"github.com/segmentio/kafka-go"
)

// mailbox passes fetched records from a chain's fetch goroutine to the
// chain goroutine in batches. It replaces a channel of single records: a
// channel send and receive per record (and a goroutine wake-up whenever the
// chain waited) cost more than processing a record in a light chain, while
// here the fetcher appends under an uncontended mutex and the chain takes
// everything fetched so far in one swap of two slices, which are reused, so
// the hand-off allocates nothing. The batches are as large as the chain is
// slow: an idle chain takes each fetch as it comes, a busy one finds
// several waiting.
type mailbox struct {
	mu   sync.Mutex
	msgs []kafka.Message
	err  error // the fetcher's last error, handed over after msgs
	// end is the fetcher's position after the fetches put so far: past
	// every record in msgs, and past any control or aborted records the
	// last fetch ended with. hwm is that fetch's high watermark.
	end, hwm int64
	max      int
	ready    chan struct{} // a token when msgs or err became non-empty
	space    chan struct{} // a token when the chain took msgs
}

func newMailbox(max int, start int64) *mailbox {
	return &mailbox{
		end:   start,
		msgs:  make([]kafka.Message, 0, max),
		max:   max,
		ready: make(chan struct{}, 1),
		space: make(chan struct{}, 1),
	}
}

// putAll appends all of ms at once, once fewer than max records wait, with
// the fetcher's position after them (end) and the fetch's high watermark,
// then records err if not nil. A fetch of no records that moved the
// position (it held only a transaction marker, or aborted records) wakes
// the chain all the same, so that it moves past them. It returns false when done ended first. The
// messages are copied: ms may be reused once it returns. Adding a whole
// fetch at once lets the fetcher send its next request while the chain
// works through this one: a fetch holds many more records than max, and
// with room for max only, the chain would wait out each fetch's round trip
// (it did, 25 % of its time, in a trace of BenchmarkEndToEnd).
func (mb *mailbox) putAll(ms []kafka.Message, end, hwm int64, err error, done <-chan struct{}) bool {
	if len(ms) == 0 && end > 0 {
		mb.mu.Lock()
		wake := end > mb.end && len(mb.msgs) == 0
		mb.end, mb.hwm = max(mb.end, end), max(mb.hwm, hwm)
		mb.mu.Unlock()
		if wake {
			select {
			case mb.ready <- struct{}{}:
			default: // a token is already waiting
			}
		}
	}
	if len(ms) > 0 {
		mb.mu.Lock()
		for len(mb.msgs) >= mb.max {
			mb.mu.Unlock()
			select {
			case <-mb.space:
			case <-done:
				return false
			}
			mb.mu.Lock()
		}
		wake := len(mb.msgs) == 0
		mb.msgs = append(mb.msgs, ms...)
		mb.end, mb.hwm = max(mb.end, end), max(mb.hwm, hwm)
		mb.mu.Unlock()
		if wake {
			select {
			case mb.ready <- struct{}{}:
			default: // a token is already waiting
			}
		}
	}
	if err != nil {
		// Recorded without waiting for room: take hands it over once the
		// records before it are taken.
		mb.mu.Lock()
		mb.err = err
		mb.mu.Unlock()
		select {
		case mb.ready <- struct{}{}:
		default: // a token is already waiting
		}
	}
	return true
}

// take returns the waiting records, swapped for spare (whose contents the
// fetcher overwrites), the fetcher's position after them and the high
// watermark it saw last (see putAll), and the fetcher's error once no
// record waits before it.
func (mb *mailbox) take(spare []kafka.Message) (got []kafka.Message, end, hwm int64, err error) {
	mb.mu.Lock()
	got, end, hwm = mb.msgs, mb.end, mb.hwm
	mb.msgs = spare[:0]
	if len(got) == 0 {
		err = mb.err
	}
	rearm := len(got) > 0 && mb.err != nil // the error's token was spent on these records
	mb.mu.Unlock()
	select {
	case mb.space <- struct{}{}:
	default:
	}
	if rearm {
		select {
		case mb.ready <- struct{}{}:
		default:
		}
	}
	return got, end, hwm, err
}
