package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peersOutput is what bench/peers TestPeers writes: two rounds of two
// systems in the three modes (the second round's Flink recovery failed).
const peersOutput = `# make bench-peers (bench/peers TestPeers), 2026-12-06 23:50 UTC, commit abc1234
# input: 20004 records (18961 unique events, 5768 windows) on 4 partitions, 30 minutes of event time; modes ckpt,nockpt,recovery
# machine: 2 cores; load average at the end 2.10 1.90 1.50
# system sdk: the SDK (kafkasource, dedup, window, chsink)
# system flink: Flink 2.2.1 local, parallelism 2, HashMap state
pkg: github.com/exactlyonce/exactlyonce/bench/peers
BenchmarkPeers/sdk/ckpt 1 2000000000 ns/op 300000 ev/s 3.000 cpu-s/Mev 800000000 peak-B 900 first-ms 400000 steady-ev/s 2.500 steady-cpu-s/Mev
BenchmarkPeers/sdk/ckpt 1 2000000000 ns/op 320000 ev/s 3.200 cpu-s/Mev 820000000 peak-B 1100 first-ms
BenchmarkPeers/flink/ckpt 1 9000000000 ns/op 60000 ev/s 20.000 cpu-s/Mev 1500000000 peak-B 6000 first-ms
BenchmarkPeers/flink/ckpt 1 9000000000 ns/op 80000 ev/s 22.000 cpu-s/Mev 1700000000 peak-B 7000 first-ms
BenchmarkPeers/sdk/nockpt 1 1000000000 ns/op 400000 ev/s 2.800 cpu-s/Mev 700000000 peak-B 800 first-ms
BenchmarkPeers/flink/nockpt 1 1000000000 ns/op 100000 ev/s 18.000 cpu-s/Mev 1400000000 peak-B 5000 first-ms
BenchmarkPeers/sdk/recovery 1 3000000000 ns/op 3000 recovery-ms 51.0 %killed 0 dup-rows 0 over-windows 0 over-events
BenchmarkPeers/sdk/recovery 1 5000000000 ns/op 5000 recovery-ms 49.0 %killed 0 dup-rows 0 over-windows 0 over-events
BenchmarkPeers/flink/recovery 1 12000000000 ns/op 12000 recovery-ms 50.0 %killed 1200 dup-rows 3 over-windows 7 over-events
`

func TestPeersReport(t *testing.T) {
	p, err := ParsePeers(strings.NewReader(peersOutput))
	require.NoError(t, err)
	assert.Equal(t, []PeerSystem{{"sdk", "the SDK (kafkasource, dedup, window, chsink)"}, {"flink", "Flink 2.2.1 local, parallelism 2, HashMap state"}}, p.Systems)
	assert.Len(t, p.Notes, 3, "the system lines are not notes")
	assert.Equal(t, Stat{N: 2, Median: 310000, Min: 300000, Max: 320000}, p.Stat("sdk", "ckpt", "ev/s"))
	assert.InDelta(t, 310000.0/400000, p.overhead("sdk"), 1e-9)

	cs := peerCharts(p)
	var b strings.Builder
	require.NoError(t, WritePeers(&b, p, "docs/bench/peers.txt", cs))
	rep := b.String()
	assert.Contains(t, rep, "- input: 20004 records")
	assert.Contains(t, rep, "### the SDK (kafkasource, dedup, window, chsink) (sdk)\n\n| figure | median [min–max] | runs |\n")
	assert.Contains(t, rep, "| events/s, 1 s checkpoints, start to end | 310 k ev/s [300 k–320 k] | 2 |\n")
	// A figure only one run had, and the other system's ratio to the SDK.
	assert.Contains(t, rep, "| events/s, 1 s checkpoints, steady | 400 k ev/s | 1 |\n")
	assert.Contains(t, rep, "| events/s, 1 s checkpoints, start to end | 70.0 k ev/s [60.0 k–80.0 k] | 2 | 310 k ev/s [300 k–320 k] | 0.23× |\n")
	assert.Contains(t, rep, "| job CPU per million events, 1 s checkpoints | 21.0 s/Mev [20.0–22.0] | 2 | 3.10 s/Mev [3.00–3.20] | 6.77× |\n")
	assert.Contains(t, rep, "| peak RSS, 1 s checkpoints | 1.60 GB [1.50–1.70] | 2 | 810 MB [800–820] | 1.98× |\n")
	assert.Contains(t, rep, "| recovery: kill -9 to the output complete again | 12.0 s | 1 | 4.00 s [3.00–5.00] | 3.00× |\n")
	assert.Contains(t, rep, "| recovery: duplicate rows of events | 1200 rows | 1 | 0 rows | – |\n")
	assert.Contains(t, rep, "| recovery: windows over-counted | 3 windows | 1 | 0 windows | – |\n")
	assert.Contains(t, rep, "| checkpoint overhead: events/s with 1 s checkpoints over without | 0.70× | | 0.78× | |\n")
	assert.Contains(t, rep, "![Side by side: events/s")

	require.Len(t, cs, 3)
	assert.Equal(t, []Bar{
		{Label: "sdk", Stat: p.Stat("sdk", "ckpt", "ev/s")}, {Label: "sdk", Stat: p.Stat("sdk", "nockpt", "ev/s"), Series: 1},
		{Label: "flink", Stat: p.Stat("flink", "ckpt", "ev/s")}, {Label: "flink", Stat: p.Stat("flink", "nockpt", "ev/s"), Series: 1},
	}, cs[0].Bars)
	assert.Len(t, cs[1].Bars, 4)
	assert.Len(t, cs[2].Bars, 2)
	svg := cs[2].SVG()
	assert.Contains(t, svg, ">4.00 s<")
	assert.Contains(t, svg, ">12.0 s<")
}

// TestRunPeersOnly: make bench-peers on a machine that never ran make
// bench writes a report of the peers alone; a -peers file that does not
// exist leaves the report as bench.txt alone makes it, its charts gone.
func TestRunPeersOnly(t *testing.T) {
	dir := t.TempDir()
	peers := filepath.Join(dir, "peers.txt")
	require.NoError(t, os.WriteFile(peers, []byte(peersOutput), 0o644))
	out := filepath.Join(dir, "out")
	require.NoError(t, run([]string{"-o", out, "-peers", peers}))
	rep, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	require.NoError(t, err)
	assert.Contains(t, string(rep), "## Side by side")
	for _, f := range []string{"peers-events.svg", "peers-cpu.svg", "peers-recovery.svg"} {
		assert.FileExists(t, filepath.Join(out, f))
	}

	bench := filepath.Join(dir, "bench.txt")
	require.NoError(t, os.WriteFile(bench, []byte(benchOutput), 0o644))
	require.NoError(t, run([]string{"-o", out, "-peers", filepath.Join(dir, "none.txt"), bench}))
	rep, err = os.ReadFile(filepath.Join(out, "REPORT.md"))
	require.NoError(t, err)
	assert.NotContains(t, string(rep), "## Side by side")
	assert.NoFileExists(t, filepath.Join(out, "peers-events.svg"))

	require.NoError(t, os.WriteFile(peers, []byte("# no system line\n"), 0o644))
	assert.ErrorContains(t, run([]string{"-o", out, "-peers", peers, bench}), "no \"# system")
}
