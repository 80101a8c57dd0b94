package windowsink

import (
	"log/slog"
	"time"

	"github.com/exactlyonce/exactlyonce/window"
)

// lateWarnEvery bounds how often a Sink warns of late events: one line per
// sink and interval, with the count since the last line.
const lateWarnEvery = 10 * time.Second

// lateLog warns, at most once per lateWarnEvery, that late events were
// not written: they are written nowhere unless the caller handles Late, so
// without a line a test that waits for their windows waits in silence.
type lateLog[In any] struct {
	log    *slog.Logger
	now    func() time.Time
	table  string
	last   time.Time // of the last line
	unsaid uint64    // late events since the last line
	total  uint64
}

// note counts late events and warns if the last warning is old enough.
func (l *lateLog[In]) note(late []window.LateEvent[In]) {
	if len(late) == 0 {
		return
	}
	l.unsaid += uint64(len(late))
	l.total += uint64(len(late))
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < lateWarnEvery {
		return
	}
	l.log.Warn("windowsink: late events not written: their windows had closed (Sink.Late returns them after each Add; the last windows of an input close on a later event)",
		"table", l.table, "late", l.unsaid, "late_total", l.total,
		"event_time", late[0].Event.Time, "window_end", late[0].End, "watermark", late[0].Watermark)
	l.last, l.unsaid = now, 0
}
