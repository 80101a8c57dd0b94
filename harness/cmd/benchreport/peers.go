package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// peersBench is the benchmark name prefix of make bench-peers' results
// (bench/peers TestPeers writes them): BenchmarkPeers/SYSTEM/MODE.
const (
	peersPkg   = "bench/peers"
	peersBench = "BenchmarkPeers/"
	sdkSystem  = "sdk"
)

// Peers is make bench-peers' results: the SDK, Flink and Kafka Streams on
// the same job, each system in each mode (ckpt: checkpoints every second,
// nockpt: none, recovery: kill -9 at half the output and restart).
type Peers struct {
	Res     *Results
	Systems []PeerSystem // in the order of the "# system" notes
	Notes   []string     // the other notes
}

// PeerSystem is one compared system, from a "# system NAME: description"
// note.
type PeerSystem struct{ Name, Desc string }

// ParsePeers reads make bench-peers' results file.
func ParsePeers(r io.Reader) (*Peers, error) {
	res, err := Parse(r)
	if err != nil {
		return nil, err
	}
	p := &Peers{Res: res}
	for _, n := range res.Notes {
		if rest, ok := strings.CutPrefix(n, "system "); ok {
			name, desc, _ := strings.Cut(rest, ": ")
			p.Systems = append(p.Systems, PeerSystem{Name: name, Desc: desc})
			continue
		}
		p.Notes = append(p.Notes, n)
	}
	if len(p.Systems) == 0 {
		return nil, fmt.Errorf("no \"# system NAME: description\" line: not make bench-peers' results")
	}
	return p, nil
}

// Stat summarizes one figure of a system in a mode.
func (p *Peers) Stat(system, mode, unit string) Stat {
	return p.Res.Stat(key(peersPkg, peersBench+system+"/"+mode, unit))
}

// peerFigure is a row of a system's table.
type peerFigure struct {
	label, mode, unit string
	count             string // a count of these, shown as a whole number; "": a figure in unit
}

func (f peerFigure) format(st Stat) string {
	if f.count == "" || st.N == 0 {
		return fmtStat(st, f.unit)
	}
	s := humanCount(st.Median) + " " + f.count
	if st.N > 1 && st.Min != st.Max {
		s += fmt.Sprintf(" [%s–%s]", humanCount(st.Min), humanCount(st.Max))
	}
	return s
}

var peerFigures = []peerFigure{
	{"events/s, 1 s checkpoints, start to end", "ckpt", "ev/s", ""},
	{"events/s, 1 s checkpoints, steady", "ckpt", "steady-ev/s", ""},
	{"events/s, checkpoints off, start to end", "nockpt", "ev/s", ""},
	{"events/s, checkpoints off, steady", "nockpt", "steady-ev/s", ""},
	{"job CPU per million events, 1 s checkpoints", "ckpt", "cpu-s/Mev", ""},
	{"job CPU per million events, 1 s checkpoints, steady", "ckpt", "steady-cpu-s/Mev", ""},
	{"job CPU per million events, checkpoints off", "nockpt", "cpu-s/Mev", ""},
	{"peak RSS, 1 s checkpoints", "ckpt", "peak-B", ""},
	{"start to the first output row, 1 s checkpoints", "ckpt", "first-ms", ""},
	{"recovery: kill -9 to the output complete again", "recovery", "recovery-ms", ""},
	{"recovery: output written at the kill", "recovery", "%killed", ""},
	{"recovery: duplicate rows of events", "recovery", "dup-rows", "rows"},
	{"recovery: windows over-counted", "recovery", "over-windows", "windows"},
}

// overhead is a system's events/s with 1 s checkpoints over its events/s
// without (medians of start to end): the checkpoints' cost, 1× for none.
func (p *Peers) overhead(system string) float64 {
	return Ratio(p.Stat(system, "ckpt", "ev/s"), p.Stat(system, "nockpt", "ev/s"))
}

// WritePeers writes the side-by-side section: the run's notes, the charts,
// and a table per system of its medians [min–max] beside the SDK's, with
// the ratio to the SDK's median.
func WritePeers(w io.Writer, p *Peers, source string, cs []Chart) error {
	var b strings.Builder
	b.WriteString("\n## Side by side: the SDK, Flink and Kafka Streams (`make bench-peers`)\n\n")
	fmt.Fprintf(&b, "From `%s`, written by bench/peers TestPeers: one generated input, the same job on each system "+
		"(dedup by event id, one-minute counts per tenant, both into ClickHouse), every output checked against the input's ground truth; "+
		"a wrong output is a failure, not a figure. bench/peers/doc.go says what each mode measures and what was tuned. "+
		"A ratio is the system's median over the SDK's: below 1× for events/s, above 1× for CPU, memory and recovery time, the SDK leads. "+
		"The peers' ClickHouse outputs are at-least-once (neither ships an exactly-once ClickHouse sink): after a kill their duplicates are counted; the SDK's must be exact.\n\n", source)
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\n")
	for _, c := range cs {
		if len(c.Bars) > 0 {
			fmt.Fprintf(&b, "![%s](%s)\n\n", c.Title, c.File)
		}
	}
	for _, s := range p.Systems {
		fmt.Fprintf(&b, "### %s (%s)\n\n", s.Desc, s.Name)
		base := s.Name != sdkSystem
		if base {
			b.WriteString("| figure | median [min–max] | runs | the SDK | ratio to the SDK |\n|---|---|---|---|---|\n")
		} else {
			b.WriteString("| figure | median [min–max] | runs |\n|---|---|---|\n")
		}
		rows := 0
		for _, f := range peerFigures {
			st := p.Stat(s.Name, f.mode, f.unit)
			if st.N == 0 {
				continue
			}
			rows++
			fmt.Fprintf(&b, "| %s | %s | %d |", f.label, f.format(st), st.N)
			if base {
				sdk := p.Stat(sdkSystem, f.mode, f.unit)
				fmt.Fprintf(&b, " %s | %s |", f.format(sdk), fmtRatio(Ratio(st, sdk)))
			}
			b.WriteString("\n")
		}
		if o := p.overhead(s.Name); !math.IsNaN(o) {
			rows++
			fmt.Fprintf(&b, "| checkpoint overhead: events/s with 1 s checkpoints over without | %s | |", fmtRatio(o))
			if base {
				fmt.Fprintf(&b, " %s | |", fmtRatio(p.overhead(sdkSystem)))
			}
			b.WriteString("\n")
		}
		if rows == 0 {
			b.WriteString("\nNo run of this system completed: it failed (the log of make bench-peers says why).\n")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// peerCharts draws events/s and CPU per event per system, with and
// without checkpoints, and the recovery time per system; without results
// (p nil) the charts have no bars, so an earlier run's files are removed.
func peerCharts(p *Peers) []Chart {
	legend := []string{"1 s checkpoints", "checkpoints off"}
	eps := Chart{File: "peers-events.svg", Title: "Side by side: events/s, start to end (median, whiskers min–max)", Unit: "ev/s", Legend: legend}
	cpu := Chart{File: "peers-cpu.svg", Title: "Side by side: job CPU-seconds per million events (median, whiskers min–max)", Unit: "cpu-s/Mev", Legend: legend}
	rec := Chart{File: "peers-recovery.svg", Title: "Side by side: kill -9 at half the output to complete again (median, whiskers min–max)", Unit: "ms"}
	if p == nil {
		return []Chart{eps, cpu, rec}
	}
	for _, s := range p.Systems {
		for i, mode := range []string{"ckpt", "nockpt"} {
			if st := p.Stat(s.Name, mode, "ev/s"); st.N > 0 {
				eps.Bars = append(eps.Bars, Bar{Label: s.Name, Stat: st, Series: i})
			}
			if st := p.Stat(s.Name, mode, "cpu-s/Mev"); st.N > 0 {
				cpu.Bars = append(cpu.Bars, Bar{Label: s.Name, Stat: st, Series: i})
			}
		}
		if st := p.Stat(s.Name, "recovery", "recovery-ms"); st.N > 0 {
			rec.Bars = append(rec.Bars, Bar{Label: s.Name, Stat: st, Series: 1})
		}
	}
	return []Chart{eps, cpu, rec}
}
