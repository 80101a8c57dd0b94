// Command benchreport turns the output of go test -bench into the
// project's benchmark report: a Markdown table of every headline figure
// beside its baseline or limit as a ratio, the median of several runs
// (-count) with their spread, and SVG charts where a picture reads faster.
// make bench runs it:
//
//	go run ./harness/cmd/benchreport -o docs/bench docs/bench/bench.txt
//
// Lines of the input that start with "# " are notes of the run (the
// commit, the sizes, the machine's load) and go to the report as they are.
//
// With -peers, the results make bench-peers wrote (bench/peers TestPeers,
// the same line format) add the side-by-side section, and its charts; a
// -peers file that does not exist is no error (make bench before any
// make bench-peers), and make bench-peers, which passes the last
// bench.txt too, leaves the rest of the report as it was:
//
//	go run ./harness/cmd/benchreport -o docs/bench -peers docs/bench/peers.txt docs/bench/bench.txt
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	out := fs.String("o", "docs/bench", "directory for REPORT.md and the charts")
	peersFile := fs.String("peers", "", "make bench-peers' results, for the side-by-side section (skipped when the file does not exist)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	peers, err := readPeers(*peersFile)
	if err != nil {
		return err
	}
	if fs.NArg() == 0 && peers == nil {
		return errors.New("usage: benchreport [-o dir] [-peers peers.txt] bench.txt [bench.txt ...]")
	}
	var res *Results
	var cs []Chart
	if fs.NArg() > 0 {
		var readers []io.Reader
		for _, name := range fs.Args() {
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			readers = append(readers, f)
		}
		if res, err = Parse(io.MultiReader(readers...)); err != nil {
			return err
		}
		if len(res.Order) == 0 {
			return errors.New("no benchmark results in the input")
		}
		cs = charts(res)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	pcs := peerCharts(peers)
	for _, c := range append(slices.Clone(cs), pcs...) {
		path := filepath.Join(*out, c.File)
		if len(c.Bars) == 0 {
			// A chart of an earlier run must not stay beside a report
			// that does not show it.
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		if err := os.WriteFile(path, []byte(c.SVG()), 0o644); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(*out, "REPORT.md"))
	if err != nil {
		return err
	}
	if res != nil {
		err = WriteReport(f, res, strings.Join(fs.Args(), "`, `"), cs)
	} else {
		_, err = io.WriteString(f, "# Benchmark report\n\nNo `make bench` results beside these: only `make bench-peers` ran.\n")
	}
	if err == nil && peers != nil {
		err = WritePeers(f, peers, *peersFile, pcs)
	}
	if err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readPeers parses make bench-peers' results; nil for no file.
func readPeers(name string) (*Peers, error) {
	if name == "" {
		return nil, nil
	}
	f, err := os.Open(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := ParsePeers(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}
