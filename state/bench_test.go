package state_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/state"
)

// The benchmarks compare a state.Value with the obvious baseline, a
// map[string]int64, and with dedup (which keeps keys only, as 128-bit
// fingerprints), on the same keys: 53-byte keys shaped like
// orgId:source:eventId with a GUID-like event id. Each fills
// benchKeys() keys (200 000 unless STATE_BENCH_KEYS says otherwise; the
// issue's figure is at 10 000 000, which takes about 2 GB per
// implementation, one after the other), reports the heap bytes per key it
// holds, each key's own string included, and then updates random existing
// keys:
//
//	STATE_BENCH_KEYS=10000000 go test -run '^$' -bench Update -benchtime 1000000x -cpu 1 -count 3 ./state
//	STATE_BENCH_KEYS=10000000 go test -run '^$' -bench 'Snapshot|Restore' -benchtime 3x -cpu 1 -count 3 ./state
//
// (a fixed -benchtime: the default one-second target would snapshot a
// large state many times over)
func benchKeys(b *testing.B) int {
	if s := os.Getenv("STATE_BENCH_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			b.Fatalf("STATE_BENCH_KEYS=%q", s)
		}
		return n
	}
	return 200_000
}

func benchKey(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 7))
	return fmt.Appendf(nil, "org-%04d:github:%08x-%04x-%04x-%04x-%012x", i%1000,
		r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
}

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// benchState fills an implementation through put (from byte slices, so
// that each implementation owns its key strings), reports bytes per key,
// then times update on random existing keys.
func benchState(b *testing.B, n int, fill func(k []byte, i int), update func(k string, at time.Time)) {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = string(benchKey(i))
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	before := heap()
	var kb []byte
	for i := range n {
		kb = append(kb[:0], keys[i]...)
		fill(kb, i)
	}
	perKey := float64(heap()-before) / float64(n)
	start := time.Unix(1_800_000_000, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		update(keys[order[i%n]], start.Add(time.Duration(i)*time.Microsecond))
	}
	b.StopTimer()
	// After the loop: ResetTimer drops metrics reported before it.
	b.ReportMetric(perKey, "B/key")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
}

func BenchmarkUpdate(b *testing.B) {
	n := benchKeys(b)
	at := time.Unix(1_800_000_000, 0)
	b.Run("impl=map", func(b *testing.B) {
		m := make(map[string]int64)
		benchState(b, n, func(k []byte, i int) { m[string(k)] = int64(i) },
			func(k string, t time.Time) { m[k] = t.UnixNano() })
		runtime.KeepAlive(m)
	})
	for _, ttl := range []time.Duration{0, 96 * time.Hour} {
		b.Run(fmt.Sprintf("impl=state.Value/ttl=%v", ttl), func(b *testing.B) {
			v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: ttl})
			if err != nil {
				b.Fatal(err)
			}
			defer v.Close()
			benchState(b, n, func(k []byte, i int) { _ = v.Put(string(k), int64(i), at) },
				func(k string, t time.Time) { _ = v.Put(k, t.UnixNano(), t) })
		})
	}
	b.Run("impl=dedup", func(b *testing.B) {
		d, err := dedup.New(96*time.Hour, dedup.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		var kb []byte
		benchState(b, n, func(k []byte, _ int) { _, _ = d.Observe(k, at) },
			func(k string, t time.Time) { kb = append(kb[:0], k...); _, _ = d.Observe(kb, t) })
	})
}

// BenchmarkSnapshot measures a full snapshot of n keys (encode and sort),
// what each checkpoint of a state.Value costs, beside dedup's full
// snapshot.
func BenchmarkSnapshot(b *testing.B) {
	n := benchKeys(b)
	at := time.Unix(1_800_000_000, 0)
	ctx := context.Background()
	b.Run("impl=state.Value", func(b *testing.B) {
		v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		for i := range n {
			_ = v.Put(string(benchKey(i)), int64(i), at)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var size int
		for range b.N {
			s, err := v.Snapshot(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			size = len(s)
		}
		b.ReportMetric(float64(size)/float64(n), "B/key")
	})
	// The part of an asynchronous snapshot that holds the chain: copying
	// the map.
	b.Run("impl=state.Value/part=barrier", func(b *testing.B) {
		v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		defer v.Close()
		for i := range n {
			_ = v.Put(string(benchKey(i)), int64(i), at)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			pend, err := v.SnapshotAsync(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			_, _ = pend(cancelled) // let the copy go
			b.StartTimer()
		}
	})
	b.Run("impl=dedup", func(b *testing.B) {
		d, err := dedup.New(time.Hour, dedup.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		for i := range n {
			_, _ = d.Observe(benchKey(i), at)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var size int
		for range b.N {
			s, err := d.Snapshot(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			size = len(s)
		}
		b.ReportMetric(float64(size)/float64(n), "B/key")
	})
}

// BenchmarkRestore measures loading a full snapshot of n keys (checksum,
// decode, the codecs' round-trip check, the map), what a chain pays when
// it restarts or its partition moves, beside dedup's restore.
func BenchmarkRestore(b *testing.B) {
	n := benchKeys(b)
	at := time.Unix(1_800_000_000, 0)
	ctx := context.Background()
	b.Run("impl=state.Value", func(b *testing.B) {
		v, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			_ = v.Put(string(benchKey(i)), int64(i), at)
		}
		snap, err := v.Snapshot(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		_ = v.Close()
		b.SetBytes(int64(len(snap)))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r, err := state.NewValue[string, int64](state.String{}, state.Int64{}, state.Options{TTL: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Restore(ctx, snap); err != nil {
				b.Fatal(err)
			}
			_ = r.Close()
		}
	})
	b.Run("impl=dedup", func(b *testing.B) {
		d, err := dedup.New(time.Hour, dedup.Options{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			_, _ = d.Observe(benchKey(i), at)
		}
		snap, err := d.Snapshot(ctx, 1)
		if err != nil {
			b.Fatal(err)
		}
		_ = d.Close()
		b.SetBytes(int64(len(snap)))
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			r, err := dedup.New(time.Hour, dedup.Options{})
			if err != nil {
				b.Fatal(err)
			}
			if err := r.Restore(ctx, snap); err != nil {
				b.Fatal(err)
			}
			_ = r.Close()
		}
	})
}
