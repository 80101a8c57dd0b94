package dedup_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/dedup"
)

// The benchmarks compare the Deduplicator with the obvious baseline, a
// map[string]int64 from key to first-sight time, on the same keys: 53-byte
// keys built like orgId:source:eventId with a GUID event id. They hold
// benchKeys() live keys (10 million unless DEDUP_BENCH_KEYS says otherwise),
// which takes up to 1.2 GB at a time (the map, and ExactKeys), one
// implementation after the other. Run them on one core:
//
//	go test -run '^$' -bench . -cpu 1 -benchtime 3s ./dedup
func benchKeys(b *testing.B) int {
	if s := os.Getenv("DEDUP_BENCH_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("DEDUP_BENCH_KEYS=%q", s)
		}
		return n
	}
	return 10_000_000
}

// appendBenchKey appends the i-th benchmark key: org, source, and a
// GUID-shaped event id derived from i. BenchmarkBenchKey measures its cost,
// which every Observe benchmark pays per decision.
func appendBenchKey(dst []byte, i uint64) []byte {
	var raw [16]byte
	binary.LittleEndian.PutUint64(raw[:8], mix(i))
	binary.LittleEndian.PutUint64(raw[8:], mix(i+0x9e3779b97f4a7c15))
	var h [32]byte
	hex.Encode(h[:], raw[:])

	dst = append(dst, 0)
	at := len(dst)
	dst = strconv.AppendUint(append(dst, "org-"...), i%1000, 10)
	dst[at-1] = byte(len(dst) - at)
	dst = append(dst, 6)
	dst = append(dst, "github"...)
	dst = append(dst, 36)
	dst = append(dst, h[0:8]...)
	dst = append(dst, '-')
	dst = append(dst, h[8:12]...)
	dst = append(dst, '-')
	dst = append(dst, h[12:16]...)
	dst = append(dst, '-')
	dst = append(dst, h[16:20]...)
	dst = append(dst, '-')
	return append(dst, h[20:32]...)
}

func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// cpuTime returns the CPU time this process has used, in user and system
// mode. On a shared machine, decisions per CPU second vary less than
// decisions per wall-clock second; with -cpu 1 they count the garbage
// collector's work too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// decider is what the benchmark needs from each implementation: decide the
// sightings in order and append the answers (true: first sight).
type decider interface {
	decide(s []dedup.Sighting, first []bool) []bool
}

// observeDecider calls Observe once per sighting.
type observeDecider struct{ d *dedup.Deduplicator }

func (d observeDecider) decide(s []dedup.Sighting, first []bool) []bool {
	for _, x := range s {
		f, err := d.d.Observe(x.Key, x.Time)
		if err != nil {
			panic(err)
		}
		first = append(first, f)
	}
	return first
}

// batchDecider calls ObserveBatch once per chunk of sightings.
type batchDecider struct{ d *dedup.Deduplicator }

func (d batchDecider) decide(s []dedup.Sighting, first []bool) []bool {
	first, err := d.d.ObserveBatch(s, first)
	if err != nil {
		panic(err)
	}
	return first
}

type mapDecider map[string]int64

func (m mapDecider) decide(s []dedup.Sighting, first []bool) []bool {
	for _, x := range s {
		_, seen := m[string(x.Key)]
		if !seen {
			m[string(x.Key)] = x.Time.UnixNano()
		}
		first = append(first, !seen)
	}
	return first
}

// benchChunk is how many sightings the benchmark builds before it times
// their decisions: building keys is the benchmark's work, not the
// deduplicator's (BenchmarkBenchKey measures it).
const benchChunk = 256

// chunk holds benchChunk sightings whose keys live in one reused buffer.
type chunk struct {
	buf []byte
	s   []dedup.Sighting
}

func newChunk() *chunk {
	return &chunk{buf: make([]byte, 0, benchChunk*64), s: make([]dedup.Sighting, benchChunk)}
}

// fill builds the sightings of keys next(0..len-1) at time at.
func (c *chunk) fill(at time.Time, next func() uint64) {
	c.buf = c.buf[:0]
	for i := range c.s {
		from := len(c.buf)
		c.buf = appendBenchKey(c.buf, next())
		c.s[i] = dedup.Sighting{Key: c.buf[from:len(c.buf):len(c.buf)], Time: at}
	}
}

// BenchmarkObserve fills each implementation with n first sights (reported
// as fill-decisions/s, including table growth), then measures duplicate
// decisions at n live keys in pseudo-random order, and reports live heap
// per key after GC. Keys are built in chunks of benchChunk and only the
// decisions are timed: ns/decision and dup-decisions/s exclude building
// the keys, ns/op is per chunk and includes it.
func BenchmarkObserve(b *testing.B) {
	impls := []struct {
		name string
		make func(n int) decider
	}{
		{name: "map", make: func(int) decider { return mapDecider{} }},
		{name: "dedup", make: func(int) decider { return observeDecider{newBench(b, dedup.Options{})} }},
		{name: "dedup-batch", make: func(int) decider { return batchDecider{newBench(b, dedup.Options{})} }},
		{name: "dedup-presized", make: func(n int) decider { return observeDecider{newBench(b, dedup.Options{ExpectedKeys: n})} }},
		{name: "dedup-exact", make: func(int) decider { return observeDecider{newBench(b, dedup.Options{ExactKeys: true})} }},
	}
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			n := benchKeys(b) / benchChunk * benchChunk
			at := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
			base := heapAlloc()
			d := impl.make(n)
			c := newChunk()
			answers := make([]bool, 0, benchChunk)
			var fill, fillCPU time.Duration
			seq := uint64(0)
			for range n / benchChunk {
				c.fill(at, func() uint64 { seq++; return seq - 1 })
				startCPU := cpuTime()
				start := time.Now()
				answers = d.decide(c.s, answers[:0])
				fill += time.Since(start)
				fillCPU += cpuTime() - startCPU
				for i, first := range answers {
					if !first {
						b.Fatalf("key %d of a chunk reported as duplicate", i)
					}
				}
			}
			heap := heapAlloc() - base

			b.ReportAllocs()
			b.ResetTimer()
			i := uint64(0)
			var loop time.Duration
			decisions := 0
			for b.Loop() {
				// A full-period walk over [0, n) in scattered order.
				c.fill(at, func() uint64 { i = (i + 7_919_993) % uint64(n); return i })
				start := time.Now()
				answers = d.decide(c.s, answers[:0])
				loop += time.Since(start)
				decisions += len(answers)
				for _, first := range answers {
					if first {
						b.Fatal("a stored key reported as first")
					}
				}
			}
			b.ReportMetric(float64(loop.Nanoseconds())/float64(decisions), "ns/decision")
			b.ReportMetric(float64(decisions)/loop.Seconds(), "dup-decisions/s")
			b.ReportMetric(float64(n)/fill.Seconds(), "fill-decisions/s")
			b.ReportMetric(float64(n)/fillCPU.Seconds(), "fill-decisions/cpu-s")
			b.ReportMetric(float64(heap)/float64(n), "heap-B/key")
			runtime.KeepAlive(d)
		})
		runtime.GC()
	}
}

func newBench(b *testing.B, opts dedup.Options) *dedup.Deduplicator {
	d, err := dedup.New(time.Hour, opts)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkSnapshot measures Snapshot and Restore of n live keys and reports
// the snapshot size.
func BenchmarkSnapshot(b *testing.B) {
	n := benchKeys(b)
	ctx := context.Background()
	at := time.Date(2026, 10, 28, 0, 0, 0, 0, time.UTC)
	d, err := dedup.New(time.Hour, dedup.Options{ExpectedKeys: n})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	buf := make([]byte, 0, 64)
	for i := range uint64(n) {
		buf = appendBenchKey(buf[:0], i)
		if _, err := d.Observe(buf, at); err != nil {
			b.Fatal(err)
		}
	}
	state, err := d.Snapshot(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("snapshot", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			state, err = d.Snapshot(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(int64(len(state)))
		b.ReportMetric(float64(len(state)), "snapshot-B")
		b.ReportMetric(float64(len(state))/float64(n), "snapshot-B/key")
	})
	b.Run("restore", func(b *testing.B) {
		r, err := dedup.New(time.Hour, dedup.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		b.ReportAllocs()
		b.SetBytes(int64(len(state)))
		for b.Loop() {
			if err := r.Restore(ctx, state); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBenchKey measures the benchmarks' key generator, to subtract from
// their per-decision figures.
func BenchmarkBenchKey(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i++
		buf = appendBenchKey(buf[:0], i)
	}
}

// BenchmarkKey measures building a key from its parts.
func BenchmarkKey(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = dedup.AppendKey(buf[:0], "org-42", "github", "0b1a2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d")
	}
}
