package checkpointtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// BenchmarkStorage measures Put, Create and Get of a small blob (1 KiB, a
// journal intent) and a large one (64 MiB, a big dedup state) on a Storage,
// so backends can be compared side by side; b.SetBytes makes the figures
// throughputs.
func BenchmarkStorage(b *testing.B, newStorage func(b *testing.B) checkpoint.Storage) {
	ctx := context.Background()
	for _, size := range []int{1 << 10, 64 << 20} {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		label := fmt.Sprintf("%dKiB", size>>10)
		b.Run("Put/"+label, func(b *testing.B) {
			s := newStorage(b)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := s.Put(ctx, fmt.Sprintf("bench/put-%d", i%4), data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Create/"+label, func(b *testing.B) {
			s := newStorage(b)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := s.Create(ctx, fmt.Sprintf("bench/create-%d", i), data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Get/"+label, func(b *testing.B) {
			s := newStorage(b)
			if err := s.Put(ctx, "bench/get", data); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Get(ctx, "bench/get"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
