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
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("usage: benchreport [-o dir] bench.txt [bench.txt ...]")
	}
	var readers []io.Reader
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		readers = append(readers, f)
	}
	res, err := Parse(io.MultiReader(readers...))
	if err != nil {
		return err
	}
	if len(res.Order) == 0 {
		return errors.New("no benchmark results in the input")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	cs := charts(res)
	for _, c := range cs {
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
	if err := WriteReport(f, res, strings.Join(fs.Args(), "`, `"), cs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
