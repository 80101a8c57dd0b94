package peers

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// report logs the systems' medians, with their ranges, as Markdown tables:
// one for the throughput modes, one for recovery.
func report(t *testing.T, e *env, systems []system, runModes []mode, results map[string][]result) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d records (%d unique, %d windows) on %d partitions; medians [min–max]\n\n",
		e.in.events, e.in.unique, len(e.in.windows), partitions)
	b.WriteString("| system | mode | runs | events/s, start to end | steady events/s | job CPU-s per M events | steady CPU-s per M | peak RSS | first output after |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range systems {
		for _, m := range runModes {
			if m == recovery {
				continue
			}
			rs := results[s.name+"/"+string(m)]
			if len(rs) == 0 {
				fmt.Fprintf(&b, "| %s | %s | 0 | failed | | | | | |\n", s.desc, m)
				continue
			}
			eps := stat(rs, func(r result) float64 { return float64(e.in.events) / r.wall.Seconds() })
			cpu := stat(rs, func(r result) float64 { return r.cpu.Seconds() * 1e6 / float64(e.in.events) })
			rss := stat(rs, func(r result) float64 { return float64(r.hwm >> 20) })
			first := stat(rs, func(r result) float64 { return r.firstOut.Seconds() })
			// A run whose first poll found the whole output has no steady
			// part: the input was too small for it.
			steady := slices.DeleteFunc(slices.Clone(rs), func(r result) bool { v, _ := r.steady(e.in); return v == 0 })
			seps, scpu := "n/a (too small an input)", "n/a"
			if len(steady) > 0 {
				v := stat(steady, func(r result) float64 { v, _ := r.steady(e.in); return v })
				c := stat(steady, func(r result) float64 { _, c := r.steady(e.in); return c })
				seps = fmt.Sprintf("%.0f [%.0f–%.0f] (%d runs)", v[0], v[1], v[2], len(steady))
				scpu = fmt.Sprintf("%.1f [%.1f–%.1f]", c[0], c[1], c[2])
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %.0f [%.0f–%.0f] | %s | %.1f [%.1f–%.1f] | %s | %.0f MB [%.0f–%.0f] | %.1f s [%.1f–%.1f] |\n",
				s.desc, m, len(rs), eps[0], eps[1], eps[2], seps, cpu[0], cpu[1], cpu[2], scpu,
				rss[0], rss[1], rss[2], first[0], first[1], first[2])
		}
	}
	if slices.Contains(runModes, recovery) {
		b.WriteString("\n| system | runs | kill -9 to complete again | duplicate events rows | windows over-counted |\n|---|---|---|---|---|\n")
		for _, s := range systems {
			rs := results[s.name+"/"+string(recovery)]
			if len(rs) == 0 {
				fmt.Fprintf(&b, "| %s | 0 | failed | | |\n", s.desc)
				continue
			}
			rec := stat(rs, func(r result) float64 { return r.recovery.Seconds() })
			dup := stat(rs, func(r result) float64 { return float64(r.dupes.rows) })
			over := stat(rs, func(r result) float64 { return float64(r.dupes.windows) })
			fmt.Fprintf(&b, "| %s | %d | %.1f s [%.1f–%.1f] | %.0f [%.0f–%.0f] | %.0f [%.0f–%.0f] |\n",
				s.desc, len(rs), rec[0], rec[1], rec[2], dup[0], dup[1], dup[2], over[0], over[1], over[2])
		}
	}
	fmt.Print(b.String())
	t.Log(b.String())
}

// stat returns the median, min and max of f over rs.
func stat(rs []result, f func(result) float64) [3]float64 {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if len(vs)%2 == 0 {
		med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	return [3]float64{med, vs[0], vs[len(vs)-1]}
}

// writeResults writes every run to path as go test -bench lines, which
// harness/cmd/benchreport reads for REPORT.md's peers section: notes
// ("# "), a "# system NAME: description" per system, then per run
// BenchmarkPeers/SYSTEM/MODE with
//
//	ckpt, nockpt  ev/s (start to end), steady-ev/s, cpu-s/Mev (job CPU-s
//	              per million input events), steady-cpu-s/Mev, peak-B (VmHWM),
//	              first-ms (start to the first output row); the steady
//	              figures only when the run had a steady part
//	recovery      recovery-ms (kill -9 to complete again), %killed (the
//	              unique events written at the kill), dup-rows,
//	              over-windows, over-events (beyond the ground truth)
func writeResults(t *testing.T, path string, e *env, systems []system, runModes []mode, results map[string][]result) {
	t.Helper()
	var b strings.Builder
	commit, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	names := make([]string, len(runModes))
	for i, m := range runModes {
		names[i] = string(m)
	}
	fmt.Fprintf(&b, "# make bench-peers (bench/peers TestPeers), %s, commit %s\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(commit)))
	fmt.Fprintf(&b, "# input: %d records (%d unique events, %d windows) on %d partitions, %d minutes of event time; modes %s\n",
		e.in.events, e.in.unique, len(e.in.windows), partitions, e.minutes, strings.Join(names, ","))
	fmt.Fprintf(&b, "# machine: %d cores; load average at the end %s\n", runtime.NumCPU(), loadavg())
	for _, s := range systems {
		fmt.Fprintf(&b, "# system %s: %s\n", s.name, s.desc)
	}
	b.WriteString("pkg: github.com/exactlyonce/exactlyonce/bench/peers\n")
	for _, m := range runModes {
		for _, s := range systems {
			for _, r := range results[s.name+"/"+string(m)] {
				fmt.Fprintf(&b, "BenchmarkPeers/%s/%s 1 %s\n", s.name, m, r.fields(e.in, m))
			}
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing the results: %v", err)
	}
}

// fields is a run's figures as value-unit pairs, ns/op first.
func (r result) fields(in input, m mode) string {
	if m == recovery {
		return fmt.Sprintf("%d ns/op %.0f recovery-ms %.1f %%killed %d dup-rows %d over-windows %d over-events",
			r.recovery.Nanoseconds(), float64(r.recovery.Milliseconds()), 100*float64(r.killedAt)/float64(in.unique),
			r.dupes.rows, r.dupes.windows, r.dupes.overCounts)
	}
	s := fmt.Sprintf("%d ns/op %.0f ev/s %.3f cpu-s/Mev %d peak-B %.0f first-ms",
		r.wall.Nanoseconds(), float64(in.events)/r.wall.Seconds(), r.cpu.Seconds()*1e6/float64(in.events), r.hwm,
		float64(r.firstOut.Milliseconds()))
	if eps, cpu := r.steady(in); eps > 0 {
		s += fmt.Sprintf(" %.0f steady-ev/s %.3f steady-cpu-s/Mev", eps, cpu)
	}
	return s
}
