package chsink

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestAheadAt pins the arithmetic of the flush ahead of a barrier: the
// cadence and jitter learnt from the barriers, the lead (twice what the
// last flushes ahead took plus twice the jitter, within [cadence/20,
// cadence/2]) and when it is off.
func TestAheadAt(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name     string
		barriers []time.Duration // when Snapshot calls came, after t0
		took     time.Duration   // what the last flushes ahead took
		done     bool            // this interval's flush ahead already ran
		off      bool            // Options.NoFlushAhead
		want     time.Duration   // when to flush ahead, after t0
		wantOK   bool
	}{
		{name: "no barrier yet", wantOK: false},
		{name: "one barrier: no cadence yet", barriers: []time.Duration{0}, wantOK: false},
		{name: "steady 1s, nothing measured: a tenth before", barriers: []time.Duration{0, time.Second},
			want: 1900 * time.Millisecond, wantOK: true},
		{name: "last flushes took 200ms: 400ms before", barriers: []time.Duration{0, time.Second}, took: 200 * time.Millisecond,
			want: 1600 * time.Millisecond, wantOK: true},
		{name: "slow flushes: at most half an interval before", barriers: []time.Duration{0, time.Second}, took: time.Second,
			want: 1500 * time.Millisecond, wantOK: true},
		{name: "fast flushes: at least a twentieth before", barriers: []time.Duration{0, time.Second}, took: time.Millisecond,
			want: 1950 * time.Millisecond, wantOK: true},
		// intervals 1s, then 1.4s: cadence 1s + 0.4s/4 = 1.1s, jitter
		// 0.4s/4 = 100ms; lead 2*55ms + 2*100ms = 310ms.
		{name: "a late barrier moves cadence and jitter by a quarter", barriers: []time.Duration{0, time.Second, 2400 * time.Millisecond},
			want: 3190 * time.Millisecond, wantOK: true},
		{name: "already flushed ahead this interval", barriers: []time.Duration{0, time.Second}, done: true, wantOK: false},
		{name: "NoFlushAhead", barriers: []time.Duration{0, time.Second}, off: true, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Sink[struct{}]{opts: Options{NoFlushAhead: tt.off}}
			for _, b := range tt.barriers {
				s.barrier(at(b))
			}
			s.aheadTook, s.aheadDone = tt.took, tt.done
			got, ok := s.aheadAt()
			assert.Equal(t, tt.wantOK, ok)
			if tt.wantOK {
				assert.Equal(t, at(tt.want), got)
			}
		})
	}
}
