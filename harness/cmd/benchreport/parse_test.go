package main

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchOutput is go test -bench output of two packages, three runs each
// (-count 3), with the lines go test and the benchmarks print besides.
const benchOutput = `# commit abc1234, 2026-12-01T06:00:00Z
# load before: 06:00:00 up 5:45, load average: 2.50, 2.10, 1.90
goos: linux
goarch: amd64
pkg: github.com/exactlyonce/exactlyonce/examples/processor
cpu: Intel(R) Xeon(R) Processor
BenchmarkEndToEnd-2   	       1	9000000000 ns/op	   400000 raw-ev/s	  150000 chain-ev/s	  37.5 chain-%raw
--- BENCH: BenchmarkEndToEnd-2
    e2e_bench_test.go:400: raw 400000 ev/s
BenchmarkEndToEnd-2   	       1	9100000000 ns/op	   500000 raw-ev/s	  200000 chain-ev/s	  40 chain-%raw
BenchmarkEndToEnd-2   	       1	9200000000 ns/op	   600000 raw-ev/s	  330000 chain-ev/s	  55 chain-%raw
BenchmarkDecodeEvent/eventDecoder-2         	10000000	       107.0 ns/op	      16 B/op	       1 allocs/op
PASS
ok  	github.com/exactlyonce/exactlyonce/examples/processor	30.1s
pkg: github.com/exactlyonce/exactlyonce/checkpoint/kafkasource
BenchmarkRecovery/keys=1000000/storage=fs/full-2         	       1	3629924784 ns/op	   40 recovery-ms	 20000000 ckpt-B
BenchmarkRecovery/keys=1000000/storage=fs/incremental-2  	       1	4328639946 ns/op	   60 recovery-ms	   200000 ckpt-B
BenchmarkRecovery/keys=1000000/storage=s3/full-2         	       1	3762432909 ns/op	   80 recovery-ms	 20000000 ckpt-B
BenchmarkRecovery/keys=1000000/storage=fs/full-2         	       1	3629924784 ns/op	   50 recovery-ms	 20000000 ckpt-B
BenchmarkRecovery/keys=1000000/storage=fs/incremental-2  	       1	4328639946 ns/op	   70 recovery-ms	   220000 ckpt-B
BenchmarkRecovery/keys=1000000/storage=s3/full-2         	       1	3762432909 ns/op	  120 recovery-ms	 20000000 ckpt-B
# load after: 06:10:00 up 5:55, load average: 3.00, 2.50, 2.00
pkg: github.com/exactlyonce/exactlyonce/bench
BenchmarkSinkVsClickHouseGo/raw-ch-go 	      20	  29000000 ns/op	   1720000 rows/s
BenchmarkSinkVsClickHouseGo/chsink-fsjournal 	      20	  39000000 ns/op	   1260000 rows/s
BenchmarkSinkVsClickHouseGo/clickhouse-go-append 	      20	  86000000 ns/op	    580000 rows/s
`

func parsed(t *testing.T) *Results {
	t.Helper()
	r, err := Parse(strings.NewReader(benchOutput))
	require.NoError(t, err)
	return r
}

func TestParse(t *testing.T) {
	r := parsed(t)
	assert.Equal(t, []float64{400000, 500000, 600000}, r.Samples[Key{"examples/processor", "BenchmarkEndToEnd", "raw-ev/s"}])
	assert.Equal(t, []float64{37.5, 40, 55}, r.Samples[Key{"examples/processor", "BenchmarkEndToEnd", "chain-%raw"}])
	assert.Equal(t, []float64{107}, r.Samples[Key{"examples/processor", "BenchmarkDecodeEvent/eventDecoder", "ns/op"}])
	assert.Equal(t, []float64{1}, r.Samples[Key{"examples/processor", "BenchmarkDecodeEvent/eventDecoder", "allocs/op"}])
	// The -GOMAXPROCS suffix is gone, "keys=1000000" is not cut.
	assert.Equal(t, []float64{40, 50}, r.Samples[Key{"checkpoint/kafkasource", "BenchmarkRecovery/keys=1000000/storage=fs/full", "recovery-ms"}])
	// The nested module's package, and names without a suffix (-cpu 1).
	assert.Equal(t, []float64{1720000}, r.Samples[Key{"bench", "BenchmarkSinkVsClickHouseGo/raw-ch-go", "rows/s"}])
	assert.Equal(t, []string{
		"commit abc1234, 2026-12-01T06:00:00Z",
		"load before: 06:00:00 up 5:45, load average: 2.50, 2.10, 1.90",
		"load after: 06:10:00 up 5:55, load average: 3.00, 2.50, 2.00",
	}, r.Notes)
	assert.Equal(t, []string{"Intel(R) Xeon(R) Processor"}, r.CPUs)
	assert.Equal(t, Key{"examples/processor", "BenchmarkEndToEnd", "ns/op"}, r.Order[0], "first appearance first")
	assert.Len(t, r.Order, 4+3+3*3+3*2)
}

// A benchmark that prints to stdout splits go test's result line: the name,
// its output, then the figures on a line of their own.
func TestParseInterleaved(t *testing.T) {
	r, err := Parse(strings.NewReader(`pkg: github.com/exactlyonce/exactlyonce/examples/processor
BenchmarkEndToEnd-2                         	
end-to-end: 400000 events, 4 partitions, 1 round(s); medians [min-max]
variant                                                events/s   of (a)
raw kafka-go (a)                        209069 [209069-209069]   100.0%
       1	19441988880 ns/op	        41.53 chain-%raw	     86822 chain-ev/s
BenchmarkEndToEnd-2                         	       1	15986736291 ns/op	        72.06 chain-%raw	    106385 chain-ev/s
BenchmarkEndToEnd-2                         	
 12 34 56
       1	17000000000 ns/op	        50 chain-%raw	     90000 chain-ev/s
`))
	require.NoError(t, err)
	assert.Equal(t, []float64{41.53, 72.06, 50}, r.Samples[Key{"examples/processor", "BenchmarkEndToEnd", "chain-%raw"}])
	assert.Equal(t, []float64{86822, 106385, 90000}, r.Samples[Key{"examples/processor", "BenchmarkEndToEnd", "chain-ev/s"}])
	assert.Len(t, r.Order, 3)
}

func TestParseMalformed(t *testing.T) {
	for _, give := range []string{
		"pkg: x\nBenchmarkA-2 \t 10\t 5 ns/op\t 7\n",       // a value without a unit
		"pkg: x\nBenchmarkA-2 \t 10\t five ns/op\n",        // a value that is no number
		"pkg: x\nBenchmarkA-2 \t 10\t 5 ns/op\t 1e ev/s\n", // a broken exponent
	} {
		_, err := Parse(strings.NewReader(give))
		assert.Error(t, err, "%q", give)
	}
	// A benchmark's log line that starts with its name is not a result.
	r, err := Parse(strings.NewReader("pkg: x\nBenchmarkA/sub some words\nBenchmarkA-2 1 5 ns/op\n"))
	require.NoError(t, err)
	assert.Equal(t, []Key{{"x", "BenchmarkA", "ns/op"}}, r.Order)
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		give []float64
		want Stat
	}{
		{"none", nil, Stat{}},
		{"one", []float64{7}, Stat{N: 1, Median: 7, Min: 7, Max: 7}},
		{"odd, unsorted", []float64{9, 1, 5}, Stat{N: 3, Median: 5, Min: 1, Max: 9}},
		{"even: the mean of the middle two", []float64{4, 1, 10, 2}, Stat{N: 4, Median: 3, Min: 1, Max: 10}},
		{"an outlier moves the spread, not the median", []float64{100, 101, 99, 5000, 102}, Stat{N: 5, Median: 101, Min: 99, Max: 5000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			give := append([]float64(nil), tt.give...)
			assert.Equal(t, tt.want, Summarize(give))
			assert.Equal(t, tt.give, give, "the samples are not reordered")
		})
	}
}

func TestRatioAndVerdict(t *testing.T) {
	r := parsed(t)
	chain := r.Stat(Key{"examples/processor", "BenchmarkEndToEnd", "chain-ev/s"})
	raw := r.Stat(Key{"examples/processor", "BenchmarkEndToEnd", "raw-ev/s"})
	assert.InDelta(t, 0.4, Ratio(chain, raw), 1e-12, "200 k over 500 k")
	assert.True(t, math.IsNaN(Ratio(chain, Stat{})))
	f := Figure{MinRatio: 0.5, Target: "≥ 0.5"}
	assert.Equal(t, "≥ 0.5: **not met**", verdict(f, chain, 0.4))
	assert.Equal(t, "≥ 0.5: met", verdict(f, chain, 0.5))
	f = Figure{AtLeast: 50, Target: "≥ 50 %"}
	assert.Equal(t, "≥ 50 %: **not met**", verdict(f, r.Stat(Key{"examples/processor", "BenchmarkEndToEnd", "chain-%raw"}), math.NaN()))
}

func TestFormat(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{185000, "ev/s", "185 k ev/s"},
		{1_250_000, "rows/s", "1.25 M rows/s"},
		{51_000_000, "ns/op", "51.0 ms"},
		{1_020_000_000, "ns/op", "1.02 s"},
		{36.87, "recovery-ms", "36.9 ms"},
		{2500, "restore-ms", "2.50 s"},
		{37.5, "chain-%raw", "37.5 %"},
		{200_000_032, "ckpt-B", "200 MB"},
		{26_100_000, "written-B/op", "26.1 MB/op"},
		{36.8, "heap-B/key", "36.8 B/key"},
		{0.007, "allocs/row", "0.00700 allocs/row"},
		{4080, "chain-cpu-ns/ev", "4080 ns/ev"},
		{16, "B/op", "16.0 B/op"},
		{1200, "B/op", "1200 B/op"},
		{2_060_000, "B/op", "2.06 MB/op"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, fmtValue(tt.v, tt.unit), "%v %s", tt.v, tt.unit)
	}
	assert.Equal(t, "20.7 MB", fmtStat(Stat{N: 3, Median: 20_700_378, Min: 20_699_378, Max: 20_708_378}, "ckpt-B"), "bounds equal to the median as shown")
	assert.Equal(t, "1.14 s [725 ms–5.96]", fmtStat(Stat{N: 3, Median: 1135, Min: 725, Max: 5958}, "recovery-ms"), "a bound in another unit keeps it")
	assert.Equal(t, "0.40×", fmtRatio(0.4))
	assert.Equal(t, "37×", fmtRatio(37.2))
	assert.Equal(t, "1 M", humanCount(1e6))
	assert.Equal(t, "10 M", humanCount(1e7))
	assert.Equal(t, "100 k", humanCount(1e5))
	assert.Equal(t, "1.5 M", humanCount(1.5e6))
}

func TestReport(t *testing.T) {
	r := parsed(t)
	cs := charts(r)
	var b strings.Builder
	require.NoError(t, WriteReport(&b, r, "docs/bench/bench.txt", cs))
	rep := b.String()
	// Medians, spreads, ratios of medians and the target's verdict.
	assert.Contains(t, rep, "| chain, 1 s checkpoints | 200 k ev/s [150 k–330 k] | 3 | raw kafka-go | 500 k ev/s [400 k–600 k] | 0.40× |  |")
	assert.Contains(t, rep, "| chain, 1 s checkpoints, share of raw | 40.0 % [37.5–55.0] | 3 |  |  | – | ≥ 50 % of raw in the same run (issue 13): **not met** |")
	assert.Contains(t, rep, "| 1 M keys, FSStorage, incremental: kill -9 to first record | 65.0 ms [60.0–70.0] | 2 | FSStorage, full | 45.0 ms [40.0–50.0] | 1.44× |")
	assert.Contains(t, rep, "| 1 M keys, S3, full: kill -9 to first record | 100 ms [80.0–120] | 2 | FSStorage, full | 45.0 ms [40.0–50.0] | 2.22× |")
	assert.Contains(t, rep, "| 1 M keys, FSStorage, incremental: bytes written per checkpoint | 210 kB [200–220] | 2 | full snapshots | 20.0 MB | 0.011× |")
	assert.Contains(t, rep, "| chsink, journal on FSStorage | 1.26 M rows/s | 1 | raw ch-go | 1.72 M rows/s | 0.73× |")
	assert.Contains(t, rep, "| chsink (FSStorage) beside clickhouse-go's row API | 1.26 M rows/s | 1 | clickhouse-go Append | 580 k rows/s | 2.17× |")
	assert.Contains(t, rep, "- load after: 06:10:00 up 5:55, load average: 3.00, 2.50, 2.00")
	assert.Contains(t, rep, "![End to end")
	assert.Contains(t, rep, "(recovery.svg)")
	assert.Contains(t, rep, "Not in this run: chain, checkpoints off (b)")
	assert.Contains(t, rep, "| checkpoint/kafkasource | BenchmarkRecovery/keys=1000000/storage=s3/full | recovery-ms | 100 ms [80.0–120] | 2 |")
}

func TestSVG(t *testing.T) {
	c := Chart{Title: "a < b", Unit: "ms", Mark: 50, MarkLabel: "target", Bars: []Bar{
		{Label: "one", Stat: Stat{N: 3, Median: 40, Min: 30, Max: 45}},
		{Label: "two & three", Stat: Stat{N: 1, Median: 80, Min: 80, Max: 80}, Series: 1},
	}}
	svg := c.SVG()
	assert.True(t, strings.HasPrefix(svg, `<svg xmlns="http://www.w3.org/2000/svg"`))
	assert.True(t, strings.HasSuffix(svg, "</svg>\n"))
	assert.Contains(t, svg, "a &lt; b")
	assert.Contains(t, svg, "two &amp; three")
	assert.Equal(t, 1, strings.Count(svg, `fill="`+palette[1]+`"`))
	// The axis ends at 100 ms (niceCeil of 80): a bar of 40 is 40 % of the
	// plot's width, 80 is 80 %.
	assert.Equal(t, 100.0, niceCeil(80))
	assert.Contains(t, svg, `<rect x="250.0" y="46.0" width="176.0" height="16.0"`) // 440 * 40 %
	assert.Contains(t, svg, `<rect x="250.0" y="72.0" width="352.0" height="16.0"`) // 440 * 80 %
	assert.Contains(t, svg, ">40.0 ms<")
	assert.Contains(t, svg, "target")
}

func TestNiceCeil(t *testing.T) {
	for give, want := range map[float64]float64{0: 1, 0.7: 1, 1: 1, 1.2: 2, 2.2: 2.5, 3: 5, 7: 10, 120: 200, 1.26e6: 2e6} {
		assert.Equal(t, want, niceCeil(give), "%v", give)
	}
}
