package main

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notYetRun are the benchmarks (package and name, as in the report's keys)
// added to the tree after the make bench run that docs/bench/bench.txt
// holds, each with why it is allowed to be missing. The next make bench
// (about 35 minutes on 2 cores, too long for a test) covers them all, and
// TestReportCurrent then fails until its entries are deleted: the list can
// only shrink to empty, it cannot hide a new benchmark silently.
var notYetRun = map[string]string{
	"idempotency BenchmarkGitHubPartition":                  "added after the 2026-12-01 run (one-pass partition read)",
	"idempotency/kafkapub BenchmarkGateway/idempotent-28KB": "added after the 2026-12-01 run (28 KB GitHub payload)",
	"idempotency/kafkapub BenchmarkGateway/bare-28KB":       "added after the 2026-12-01 run (28 KB GitHub payload)",
	"idempotency/kafkapub BenchmarkCompression":             "added after the 2026-12-01 run",
	"idempotency/redisstore BenchmarkClaimComplete":         "added after the 2026-12-01 run",
	"sink/kafkasink BenchmarkCheckpointInterval":            "added after the 2026-12-01 run (asynchronous checkpoints)",
	"state BenchmarkUpdate":                                 "added after the 2026-12-01 run (package state)",
	"state BenchmarkRestore":                                "added after the 2026-12-01 run (package state)",
	"state BenchmarkSnapshot":                               "added after the 2026-12-01 run (package state)",
	"dedup BenchmarkSortLog":                                "added after the 2026-12-01 run",
	"kafkatxn BenchmarkTxnVersion":                          "added after the 2026-12-01 run (transactions v2; BENCHMARKS.md has a focused run)",
}

// benchFunc matches a benchmark function of a _test.go file.
var benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w*)\(\w+ \*testing\.B\)`)

// TestReportCurrent fails when docs/bench/REPORT.md is older than what it
// reports: when it (or a chart) differs from what benchreport writes from
// the checked-in docs/bench/bench.txt and docs/bench/peers.txt, if there
// is one (the generator or its list of headline figures changed, or a
// results file was replaced, without regenerating: go run
// ./harness/cmd/benchreport -o docs/bench -peers docs/bench/peers.txt
// docs/bench/bench.txt), when a headline figure or its baseline has no
// result in bench.txt, or when a benchmark function of the tree has none
// (the run predates it: run make bench), except for the notYetRun list.
func TestReportCurrent(t *testing.T) {
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	t.Chdir(root)
	out := t.TempDir()
	require.NoError(t, run([]string{"-o", out, "-peers", "docs/bench/peers.txt", "docs/bench/bench.txt"}))

	written, err := os.ReadDir(out)
	require.NoError(t, err)
	for _, e := range written {
		want, err := os.ReadFile(filepath.Join(out, e.Name()))
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join("docs/bench", e.Name()))
		if assert.NoError(t, err, "docs/bench/%s is missing: regenerate the report", e.Name()) {
			assert.True(t, bytes.Equal(want, got), "docs/bench/%s is not what benchreport writes from docs/bench/bench.txt: regenerate the report", e.Name())
		}
	}
	svgs, err := filepath.Glob("docs/bench/*.svg")
	require.NoError(t, err)
	for _, p := range svgs {
		_, err := os.Stat(filepath.Join(out, filepath.Base(p)))
		assert.NoError(t, err, "%s is a chart the report no longer draws", p)
	}

	f, err := os.Open("docs/bench/bench.txt")
	require.NoError(t, err)
	defer f.Close()
	res, err := Parse(f)
	require.NoError(t, err)

	missing := map[string]bool{}
	has := func(pkg, bench string, exact bool) bool {
		for k := range res.Samples {
			if k.Pkg == pkg && (k.Bench == bench || !exact && strings.HasPrefix(k.Bench, bench+"/")) {
				return true
			}
		}
		return false
	}
	for _, s := range sections(res) {
		for _, fig := range s.Figures {
			for _, k := range []*Key{&fig.Key, fig.Base} {
				if k != nil && !has(k.Pkg, k.Bench, true) {
					missing[k.Pkg+" "+k.Bench] = true
				}
			}
		}
	}
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(path))
		if pkg == "." {
			pkg = ""
		}
		for _, m := range benchFunc.FindAllSubmatch(src, -1) {
			if !has(pkg, string(m[1]), false) {
				missing[pkg+" "+string(m[1])] = true
			}
		}
		return nil
	})
	require.NoError(t, err)

	var unlisted []string
	for name := range missing {
		if _, ok := notYetRun[name]; !ok {
			unlisted = append(unlisted, name)
		}
	}
	sort.Strings(unlisted)
	assert.Empty(t, unlisted, "benchmarks with no result in docs/bench/bench.txt, the report older than them: run make bench")
	for name := range notYetRun {
		assert.True(t, missing[name], "%q has results in docs/bench/bench.txt now: delete it from notYetRun", name)
	}
}
