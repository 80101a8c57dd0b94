package chsink_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// Environment of BenchmarkFlushPolicy.
const (
	envPolicySeconds = "CHSINK_POLICY_SECONDS" // length of a run of one policy; default 8
	envPolicyRate    = "CHSINK_POLICY_RATE"    // event rows/s per partition; default 40000
)

// BenchmarkFlushPolicy runs the shape the issue measured against a
// dedicated embedded ClickHouse: 4 partition chains, each with an events
// sink (one row per record, at a steady rate) and a window sink (a row per
// 20 records), a checkpoint barrier every second on each chain (Snapshot of
// both sinks, then CheckpointCompleted), and each sink's flush timer (Run)
// running. Each flush policy gets a table pair of its own, dropped after
// it. Reported: rows/s reached, inserts per second and their size (p10,
// p50, p90 rows), ClickHouse's CPU (from /proc/<pid>/stat: inserts and the
// merges they cause) per row and in cores, and how long each barrier held
// its chain (both Snapshots, p50 and p99). Run it with -benchtime 1x.
func BenchmarkFlushPolicy(b *testing.B) {
	seconds := envInt(b, envPolicySeconds, 8)
	rate := envInt(b, envPolicyRate, 40_000)
	srv := testkit.StartClickHouse(b)
	db := testkit.NewDatabase(b, srv.Addr())
	env := chEnv{addr: srv.Addr(), db: db, conn: testkit.DialClickHouse(b, srv.Addr(), db)}
	policies := []struct {
		name string
		opts chsink.Options
	}{
		// What the issue measured: the example's MaxDelay.
		{"delay200ms", chsink.Options{MaxDelay: 200 * time.Millisecond, NoFlushAhead: true}},
		// The defaults before flushing ahead: with 1 s checkpoints the
		// barrier inserts almost everything, as with the 2 s.
		{"before", chsink.Options{NoFlushAhead: true}},
		// The defaults now.
		{"default", chsink.Options{}},
		// Flushing ahead from 10,000 rows.
		{"ahead10k", chsink.Options{FlushAheadMinRows: 10_000}},
	}
	for i, p := range policies {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				runPolicy(b, env, srv.PID(), fmt.Sprintf("p%d", i), p.opts, rate, time.Duration(seconds)*time.Second)
			}
		})
	}
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, name)
	return n
}

// runPolicy runs the 4 chains for d and reports what it measured.
func runPolicy(b *testing.B, env chEnv, pid int, prefix string, opts chsink.Options, rate int, d time.Duration) {
	const (
		partitions   = 4
		windowEvery  = 20
		ckptInterval = time.Second
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tables := []string{prefix + "_events", prefix + "_windows"}
	for _, t := range tables {
		env.exec(b, strings.Replace(fmt.Sprintf(eventsDDL, env.db), ".events (", "."+t+" (", 1))
	}
	defer func() {
		for _, t := range tables {
			env.exec(b, "DROP TABLE "+env.db+"."+t+" SYNC")
		}
	}()
	opts.Database = env.db

	var (
		mu     sync.Mutex
		sizes  [2][]int // rows of each insert, events and windows
		waits  []time.Duration
		evWait []time.Duration // the events sink's Snapshot alone
		chErrs []error
	)
	// chain is one partition's pair of sinks. For the events sink it
	// counts the rows the barrier inserted itself: the batches journaled
	// while a Snapshot ran (inSnap), which Snapshot waits for.
	type chain struct {
		events, windows *chsink.Sink[event]
		inSnap          atomic.Bool
		kinds           []bool // per batch journaled, in order: inside a Snapshot
		written         int    // batches written so far
		barrierRows     atomic.Int64
	}
	chains := make([]*chain, partitions)
	var evAtBarrier []int
	var runs sync.WaitGroup
	for p := range chains {
		chains[p] = &chain{}
		c := chains[p]
		for i, t := range tables {
			s, err := chsink.New(ctx, chsink.Table{Addr: env.addr, Name: t}, checkpoint.TopicPartition{Topic: t, Partition: p},
				checkpoint.NewMemoryStorage(), eventSchema, opts)
			require.NoError(b, err)
			defer s.Close()
			s.SetAfterWrite(func(n int) {
				mu.Lock()
				sizes[i] = append(sizes[i], n)
				mu.Unlock()
				if i == 0 { // under the sink's lock, like the hook below
					if c.kinds[c.written] {
						c.barrierRows.Add(int64(n))
					}
					c.written++
				}
			})
			if i == 0 {
				s.SetHooks(func() { c.kinds = append(c.kinds, c.inSnap.Load()) }, nil)
			}
			runs.Go(func() { _ = s.Run(ctx) })
			if i == 0 {
				c.events = s
			} else {
				c.windows = s
			}
		}
	}
	pattern := benchRows()
	cpu0 := chProcCPU(pid)
	start := time.Now()
	var wg sync.WaitGroup
	for p, c := range chains {
		wg.Go(func() {
			err := func() error {
				var off int64
				var id checkpoint.ID
				var win sink.Cursor
				nextBarrier := start.Add(ckptInterval * time.Duration(p+1) / partitions) // chains out of phase, as in kafkasource
				for {
					now := time.Now()
					if now.Sub(start) >= d {
						return nil
					}
					if !now.Before(nextBarrier) {
						id++
						t0 := time.Now()
						c.inSnap.Store(true)
						c.barrierRows.Store(0)
						_, err := c.events.Snapshot(ctx, id)
						c.inSnap.Store(false)
						if err != nil {
							return err
						}
						we := time.Since(t0)
						if _, err := c.windows.Snapshot(ctx, id); err != nil {
							return err
						}
						w := time.Since(t0)
						if err := c.events.CheckpointCompleted(ctx, id); err != nil {
							return err
						}
						if err := c.windows.CheckpointCompleted(ctx, id); err != nil {
							return err
						}
						mu.Lock()
						waits = append(waits, w)
						evWait = append(evWait, we)
						evAtBarrier = append(evAtBarrier, int(c.barrierRows.Load()))
						mu.Unlock()
						nextBarrier = nextBarrier.Add(ckptInterval)
						continue
					}
					// The records due by now, at the steady rate.
					due := int64(now.Sub(start).Seconds() * float64(rate))
					if off >= due {
						time.Sleep(time.Millisecond)
						continue
					}
					for ; off < due; off++ {
						r := pattern[off%int64(len(pattern))]
						r.ID = uint64(off)
						if err := c.events.Add(ctx, sink.Position{Offset: off}, r); err != nil {
							return err
						}
						if off%windowEvery == 0 {
							win.At(off)
							if err := c.windows.Add(ctx, win.Next(), r); err != nil {
								return err
							}
						}
					}
				}
			}()
			if err != nil {
				mu.Lock()
				chErrs = append(chErrs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Every row produced in ClickHouse before the clocks stop.
	for _, c := range chains {
		for _, s := range []*chsink.Sink[event]{c.events, c.windows} {
			_, err := s.Snapshot(ctx, 1<<40)
			require.NoError(b, err)
		}
	}
	elapsed := time.Since(start)
	cpu := chProcCPU(pid) - cpu0
	cancel()
	runs.Wait()
	require.Empty(b, chErrs)

	mu.Lock()
	defer mu.Unlock()
	written := 0
	for _, sz := range sizes {
		for _, n := range sz {
			written += n
		}
		slices.Sort(sz)
	}
	slices.Sort(waits)
	slices.Sort(evWait)
	slices.Sort(evAtBarrier)
	b.ReportMetric(float64(written)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(len(sizes[0])+len(sizes[1]))/elapsed.Seconds(), "inserts/s")
	b.ReportMetric(float64(pct(sizes[0], 0.10)), "ev-p10-rows/insert")
	b.ReportMetric(float64(pct(sizes[0], 0.50)), "ev-p50-rows/insert")
	b.ReportMetric(float64(pct(sizes[0], 0.90)), "ev-p90-rows/insert")
	b.ReportMetric(float64(pct(sizes[1], 0.50)), "win-p50-rows/insert")
	if pid > 0 && cpu > 0 {
		b.ReportMetric(cpu.Seconds()/elapsed.Seconds(), "ch-cores")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(written), "ch-cpu-ns/row")
	}
	b.ReportMetric(float64(pct(waits, 0.50).Microseconds())/1000, "p50-barrier-ms")
	b.ReportMetric(float64(pct(waits, 0.99).Microseconds())/1000, "p99-barrier-ms")
	b.ReportMetric(float64(pct(evAtBarrier, 0.50)), "ev-p50-barrier-rows")
	b.ReportMetric(float64(pct(evAtBarrier, 0.99)), "ev-p99-barrier-rows")
	b.ReportMetric(float64(pct(evWait, 0.50).Microseconds())/1000, "ev-p50-barrier-ms")
	b.ReportMetric(float64(pct(evWait, 0.99).Microseconds())/1000, "ev-p99-barrier-ms")
	var held time.Duration
	for _, w := range waits {
		held += w
	}
	b.ReportMetric(100*held.Seconds()/(elapsed.Seconds()*float64(len(chains))), "%-chain-held")
}

func pct[E any](sorted []E, q float64) E {
	var zero E
	if len(sorted) == 0 {
		return zero
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// chProcCPU returns the user and system time of process pid from
// /proc/<pid>/stat (fields 14 and 15, in ticks of 1/100 s, Linux's USER_HZ
// on x86-64), or 0 when it cannot be read.
func chProcCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
