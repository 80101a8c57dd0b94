package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// modulePath is trimmed from package paths: "checkpoint/kafkasource", and
// "bench" for the nested module.
const modulePath = "github.com/exactlyonce/exactlyonce"

// Key names one figure: a benchmark of a package and one of its units.
type Key struct {
	Pkg   string // the package path without modulePath, "" at the module's root
	Bench string // the benchmark's full name without the -GOMAXPROCS suffix: "BenchmarkObserve/dedup-batch"
	Unit  string // "ns/op", "rows/s", ...
}

func (k Key) String() string { return k.Pkg + " " + k.Bench + " " + k.Unit }

// Results is what a go test -bench output holds: every figure's samples (one
// per -count run, in the order they came), the notes ("# " lines the
// Makefile writes: load, commit, sizes) and the CPU the runs named.
type Results struct {
	Samples map[Key][]float64
	Order   []Key // first appearance
	Notes   []string
	CPUs    []string
}

// procsSuffix is the -GOMAXPROCS suffix go test appends to a name when
// GOMAXPROCS is not 1.
var procsSuffix = regexp.MustCompile(`-[0-9]+$`)

// Parse reads go test -bench output in the standard benchmark format
// (https://go.dev/design/14313-benchmark-format): "pkg:" lines set the
// package of the lines after them; a result line is the name, the
// iterations and value-unit pairs; when the benchmark printed to stdout,
// go test's line holds the name only and the figures come on a line of
// their own after that output. Other lines (logs, PASS, ok) are
// skipped; a line that starts like a result but does not parse is an error,
// so a broken figure is never silently left out.
func Parse(r io.Reader) (*Results, error) {
	res := &Results{Samples: map[Key][]float64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	pkg, pending := "", ""
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.HasPrefix(text, "pkg: "):
			pkg = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(text[5:]), modulePath), "/")
			continue
		case strings.HasPrefix(text, "cpu: "):
			if cpu := strings.TrimSpace(text[5:]); !slices.Contains(res.CPUs, cpu) {
				res.CPUs = append(res.CPUs, cpu)
			}
			continue
		case strings.HasPrefix(text, "# "):
			res.Notes = append(res.Notes, strings.TrimSpace(text[2:]))
			continue
		}
		f := strings.Fields(text)
		if len(f) == 1 && strings.HasPrefix(f[0], "Benchmark") {
			// go test printed the name, and what the benchmark printed
			// to stdout follows it before its figures: a line of its own
			// that starts with the iteration count.
			pending = f[0]
			continue
		}
		if pending != "" && len(f) >= 3 && f[2] == "ns/op" {
			if _, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				f = append([]string{pending}, f...)
			}
		}
		if len(f) < 2 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // "BenchmarkX/y  some log": a name followed by no iteration count
		}
		pending = ""
		if len(f)%2 != 0 {
			return nil, fmt.Errorf("line %d: %q: values and units do not pair", line, text)
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: %q: value %q: %w", line, text, f[i], err)
			}
			k := Key{Pkg: pkg, Bench: name, Unit: f[i+1]}
			if _, ok := res.Samples[k]; !ok {
				res.Order = append(res.Order, k)
			}
			res.Samples[k] = append(res.Samples[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return res, nil
}

// Stat summarizes the samples of one figure.
type Stat struct {
	N                int
	Median, Min, Max float64
}

// Summarize returns the median (the mean of the two middle samples for an
// even count), the smallest and the largest sample; N is 0 for none.
func Summarize(samples []float64) Stat {
	if len(samples) == 0 {
		return Stat{}
	}
	s := slices.Clone(samples)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Stat{N: n, Median: med, Min: s[0], Max: s[n-1]}
}

// Stat returns the summary of one figure.
func (r *Results) Stat(k Key) Stat { return Summarize(r.Samples[k]) }
