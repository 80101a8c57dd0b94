package window

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

const (
	benchKeys = 100_000
	// benchStep advances event time 60 µs per event: a million events a
	// minute, ten per key and window.
	benchStep = 60 * time.Microsecond
)

func benchKeyNames() []string {
	keys := make([]string, benchKeys)
	for i := range keys {
		keys[i] = "org-1:employee-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkTumblingStats feeds events into 1-minute tumbling windows over
// 100,000 active keys with count, sum and avg (the Stats aggregator). Event
// time advances benchStep per event, so each minute's 100,000 windows close
// in turn after ten events each.
func BenchmarkTumblingStats(b *testing.B) {
	keys := benchKeyNames()
	op, err := New(Tumbling(time.Minute), Stats{}, Options{MaxOutOfOrderness: time.Second, IdleTimeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	var out Output[float64, Summary]
	base := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	// Warm up: every key has an open window.
	for i, k := range keys {
		_ = op.Add(Event[float64]{Key: k, Time: base, Value: float64(i)}, &out)
	}
	out.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e := Event[float64]{Key: keys[i%benchKeys], Time: base.Add(time.Duration(i) * benchStep), Value: float64(i & 1023)}
		if err := op.Add(e, &out); err != nil {
			b.Fatal(err)
		}
		if len(out.Rows) > 0 {
			out.Reset()
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBaselineMap is the floor to compare with: the same events into a
// plain map of (key, minute) to count, sum and avg accumulators, without
// watermarks, emission or state management.
func BenchmarkBaselineMap(b *testing.B) {
	type k struct {
		key   string
		start int64
	}
	keys := benchKeyNames()
	m := make(map[k]*StatsAcc)
	base := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	var s Stats
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t := base.Add(time.Duration(i) * benchStep).UnixNano()
		kk := k{keys[i%benchKeys], t - t%int64(time.Minute)}
		a := m[kk]
		if a == nil {
			a = new(StatsAcc)
			m[kk] = a
		}
		*a = s.Add(*a, float64(i&1023))
		if i%(10*benchKeys) == 10*benchKeys-1 {
			clear(m) // close a minute's windows in bulk, as the operator does
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkOpenWindowHeap reports the heap held per open window: 100,000
// keys with one open 1-minute window each, count, sum and avg. It measures
// once, however large b.N (so -benchtime Nx on the other benchmarks stays
// cheap here); ns/op is meaningless.
func BenchmarkOpenWindowHeap(b *testing.B) {
	keys := benchKeyNames()
	base := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	var perWindow float64
	for i := range b.N {
		if i > 0 {
			continue
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		op, err := New(Tumbling(time.Minute), Stats{}, Options{IdleTimeout: -1})
		if err != nil {
			b.Fatal(err)
		}
		var out Output[float64, Summary]
		for i, k := range keys {
			_ = op.Add(Event[float64]{Key: k, Time: base, Value: float64(i)}, &out)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if n := op.Counters().OpenWindows; n != benchKeys {
			b.Fatalf("%d open windows", n)
		}
		perWindow = float64(after.HeapAlloc-before.HeapAlloc) / benchKeys
		runtime.KeepAlive(op)
	}
	b.ReportMetric(perWindow, "heapB/window")
}

// BenchmarkSessionStats feeds the events of BenchmarkTumblingStats into
// session windows: each key speaks every 6 s, so with a 30 s gap its
// sessions grow, and with a 5 s gap every event closes one session and
// opens the next (the worst case for firing).
func BenchmarkSessionStats(b *testing.B) {
	for _, gap := range []time.Duration{30 * time.Second, 5 * time.Second} {
		b.Run("gap="+gap.String(), func(b *testing.B) {
			keys := benchKeyNames()
			op, err := New(Session(gap), Stats{}, Options{MaxOutOfOrderness: time.Second, IdleTimeout: -1})
			if err != nil {
				b.Fatal(err)
			}
			var out Output[float64, Summary]
			base := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
			for i, k := range keys {
				_ = op.Add(Event[float64]{Key: k, Time: base, Value: float64(i)}, &out)
			}
			out.Reset()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e := Event[float64]{Key: keys[i%benchKeys], Time: base.Add(time.Duration(i) * benchStep), Value: float64(i & 1023)}
				if err := op.Add(e, &out); err != nil {
					b.Fatal(err)
				}
				if len(out.Rows) > 0 {
					out.Reset()
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
