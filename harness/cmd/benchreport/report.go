package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// sig formats v with three significant digits, without an exponent.
func sig(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	d := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	if d < 0 {
		d = 0
	}
	return strconv.FormatFloat(v, 'f', d, 64)
}

// si formats v with three significant digits and a k, M or G prefix.
func si(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return sig(v/1e9) + " G"
	case a >= 1e6:
		return sig(v/1e6) + " M"
	case a >= 1e4:
		return sig(v/1e3) + " k"
	}
	return sig(v)
}

// humanCount is si without trailing zeros: "1 M", "100 k".
func humanCount(v float64) string {
	s := si(v)
	num, prefix, _ := strings.Cut(s, " ")
	if strings.Contains(num, ".") {
		num = strings.TrimRight(strings.TrimRight(num, "0"), ".")
	}
	if prefix == "" {
		return num
	}
	return num + " " + prefix
}

// duration formats nanoseconds.
func duration(ns float64) string {
	a := math.Abs(ns)
	switch {
	case a >= 1e9:
		return sig(ns/1e9) + " s"
	case a >= 1e6:
		return sig(ns/1e6) + " ms"
	case a >= 1e3:
		return sig(ns/1e3) + " µs"
	}
	return sig(ns) + " ns"
}

// fmtValue formats a figure in its unit: times as durations, shares in %,
// bytes with B, the rest with a k/M/G prefix and the unit without its
// variant's prefix ("raw-ev/s" as ev/s).
func fmtValue(v float64, unit string) string {
	switch {
	case unit == "ns/op":
		return duration(v)
	case unit == "ms" || strings.HasSuffix(unit, "-ms"):
		return duration(v * 1e6)
	case unit == "%" || strings.HasSuffix(unit, "%raw") || strings.HasPrefix(unit, "%"):
		return sig(v) + " %"
	case unit == "B" || strings.HasSuffix(unit, "-B"):
		return bytesIn(v, "B")
	}
	if per, rest, ok := strings.Cut(unit, "/"); ok {
		if i := strings.LastIndexByte(per, '-'); i >= 0 {
			per = per[i+1:]
		}
		if per == "B" {
			return bytesIn(v, "B/"+rest)
		}
		unit = per + "/" + rest
	}
	return si(v) + " " + unit
}

// bytesIn formats bytes: "36.8 B/key", "20.0 MB".
func bytesIn(v float64, unit string) string {
	s := si(v)
	if strings.Contains(s, " ") {
		return s + unit // "20.0 M" + "B"
	}
	return s + " " + unit
}

// fmtNum is fmtValue without a plain unit, for axis ticks.
func fmtNum(v float64, unit string) string {
	s := fmtValue(v, unit)
	if i := strings.LastIndexByte(s, ' '); i >= 0 && strings.ContainsRune(s[i+1:], '/') {
		return s[:i]
	}
	return s
}

// fmtStat is "median [min–max]" in the figure's unit; the bounds leave out
// the unit when it is the median's.
func fmtStat(st Stat, unit string) string {
	if st.N == 0 {
		return "not run"
	}
	med := fmtValue(st.Median, unit)
	if st.N == 1 || st.Min == st.Max {
		return med
	}
	_, medUnit := splitUnit(med)
	bound := func(v float64) string {
		s := fmtValue(v, unit)
		if num, u := splitUnit(s); u == medUnit {
			return num
		}
		return s
	}
	lo, hi := bound(st.Min), bound(st.Max)
	if num, _ := splitUnit(med); lo == hi && lo == num {
		return med // the samples differ below the digits shown
	}
	return fmt.Sprintf("%s [%s–%s]", med, lo, hi)
}

// splitUnit splits a formatted value at its last space: the number (with
// its k/M/G prefix) and the unit.
func splitUnit(s string) (num, unit string) {
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// fmtRatio formats a ratio of two medians.
func fmtRatio(r float64) string {
	switch {
	case math.IsNaN(r) || math.IsInf(r, 0):
		return "–"
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 0, 64) + "×"
	case r >= 0.1:
		return strconv.FormatFloat(r, 'f', 2, 64) + "×"
	}
	return strconv.FormatFloat(r, 'f', 3, 64) + "×"
}

// Ratio is the figure's median over its baseline's (NaN without one).
func Ratio(fig, base Stat) float64 {
	if fig.N == 0 || base.N == 0 || base.Median == 0 {
		return math.NaN()
	}
	return fig.Median / base.Median
}

// verdict says whether a figure meets its target ("" without one).
func verdict(f Figure, st Stat, ratio float64) string {
	if st.N == 0 {
		return f.Target
	}
	ok, has := true, false
	if f.MinRatio > 0 {
		has, ok = true, ok && ratio >= f.MinRatio
	}
	if f.MaxRatio > 0 {
		has, ok = true, ok && ratio <= f.MaxRatio
	}
	if f.AtLeast > 0 {
		has, ok = true, ok && st.Median >= f.AtLeast
	}
	if !has {
		return f.Target
	}
	if ok {
		return f.Target + ": met"
	}
	return f.Target + ": **not met**"
}

// WriteReport writes the Markdown report: the run's notes, the charts that
// have bars, every section's headline figures beside their baselines, and
// every figure of the run.
func WriteReport(w io.Writer, r *Results, source string, chartFiles []Chart) error {
	var b strings.Builder
	b.WriteString("# Benchmark report\n\n")
	fmt.Fprintf(&b, "Written by `make bench` (`harness/cmd/benchreport`) from `%s`, the `go test -bench` output of the run; "+
		"[BENCHMARKS.md](../../BENCHMARKS.md) has the current figures and how to rerun them, [history.md](history.md) how each benchmark was taken. "+
		"Every figure is the **median** of its runs (`-count`), with the spread **[min–max]**; a ratio is the figure's median over its "+
		"baseline's median, both measured by the same `go test` invocation on the same machine.\n\n", source)
	b.WriteString("## The run\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	for _, c := range r.CPUs {
		fmt.Fprintf(&b, "- CPU: %s\n", c)
	}
	b.WriteString("\n## Charts\n\n")
	for _, c := range chartFiles {
		if len(c.Bars) == 0 {
			fmt.Fprintf(&b, "- %s: not in this run.\n", c.Title)
			continue
		}
		fmt.Fprintf(&b, "![%s](%s)\n\n", c.Title, c.File)
	}
	b.WriteString("\n## Headline figures\n\n")
	for _, s := range sections(r) {
		fmt.Fprintf(&b, "### %s\n\n%s\n\n", s.Title, s.How)
		var missing []string
		rows := 0
		for _, f := range s.Figures {
			st := r.Stat(f.Key)
			if st.N == 0 {
				missing = append(missing, f.Label)
				continue
			}
			if rows == 0 {
				b.WriteString("| figure | median [min–max] | runs | baseline | baseline median [min–max] | ratio | target |\n")
				b.WriteString("|---|---|---|---|---|---|---|\n")
			}
			rows++
			base, baseStat, ratio := "", "", math.NaN()
			if f.Base != nil {
				bs := r.Stat(*f.Base)
				base, baseStat = f.BaseLabel, fmtStat(bs, f.Base.Unit)
				ratio = Ratio(st, bs)
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s |\n", f.Label, fmtStat(st, f.Key.Unit), st.N, base, baseStat, fmtRatio(ratio), verdict(f, st, ratio))
		}
		if rows == 0 {
			b.WriteString("Not in this run.\n\n")
			continue
		}
		if len(missing) > 0 {
			fmt.Fprintf(&b, "\nNot in this run: %s.\n", strings.Join(missing, "; "))
		}
		b.WriteString("\n")
	}
	b.WriteString("## Every figure of the run\n\n| package | benchmark | unit | median [min–max] | runs |\n|---|---|---|---|---|\n")
	for _, k := range r.Order {
		st := r.Stat(k)
		pkg := k.Pkg
		if pkg == "" {
			pkg = "(root)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", pkg, k.Bench, k.Unit, fmtStat(st, k.Unit), st.N)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
