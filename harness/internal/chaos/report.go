package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/harness/internal/chaos/history"
	"github.com/exactlyonce/exactlyonce/harness/internal/demo"
)

// FaultCount is what the faults of one kind did.
type FaultCount struct {
	// Injected is how many faults of the kind were injected.
	Injected int `json:"injected"`
	// Hit is, for the kills and the other faults, how many landed on the
	// moment they aim at (a checkpoint write under way, claims not
	// completed, an insert running, a rebalance under way, a successor
	// still restoring, Redis refusing deliveries, a frozen processor's
	// member dropped by the group, a transaction's commit refused after
	// its timeout, a transactional id expired, requests through the
	// slowed link, processor rows inserted beside another writer's, a
	// running processor's clock moved); for the broker's wire faults, how
	// many requests (connections, answers) they hit.
	Hit int `json:"hit"`
}

// MetricCheck compares one metric's total with the ground truth.
type MetricCheck struct {
	Metric string  `json:"metric"`
	Want   float64 `json:"want"`
	Window float64 `json:"window_final"`
	Hourly float64 `json:"hourly_mv"` // NaN (null in JSON) where the table does not hold it
}

// Result is the outcome of a chaos run; Run prints it as a table
// and writes it as JSON.
type Result struct {
	Seed      uint64                 `json:"seed"`
	Events    int                    `json:"events"`
	Instances int                    `json:"processor_instances"`
	Kinds     []string               `json:"kinds"`
	Faults    map[string]*FaultCount `json:"faults"`
	Kills     map[string]int         `json:"kills"` // SIGKILLs by service
	// GatewayExits and ProcessorExits count the processes that exited on
	// their own (restarted by the harness, as a service manager would).
	GatewayExits   int   `json:"gateway_exits"`
	ProcessorExits int64 `json:"processor_exits"`

	Sent       int64 `json:"events_sent"`
	Counted    int   `json:"events_counted"` // events the metrics count (the rest: pings, ignored and rejected payloads)
	Accepted   int64 `json:"events_accepted"`
	Requests   int64 `json:"requests"`
	Duplicates int64 `json:"duplicate_deliveries"`
	Retries    int64 `json:"retries"`
	Replayed   int64 `json:"answered_from_store"`
	Ignored    int64 `json:"answered_200_unpublished"`
	Rejected   int64 `json:"answered_4xx"`

	Tables     map[string]uint64 `json:"rows"`
	Lost       int64             `json:"lost"`
	Duplicated int64             `json:"duplicated"`
	Metrics    []MetricCheck     `json:"metrics"`
	// Latency from the first send of a webhook to its row in
	// normalized_events.
	LatencyP50 time.Duration `json:"latency_p50_ns"`
	LatencyP99 time.Duration `json:"latency_p99_ns"`

	// History is the file holding the run's history (Config.History, or
	// a failing run's), HistoryOps its length, HistoryFindings what the
	// checkers of package history found in it, Transactions the
	// transactional writer's transactions by outcome (ok: committed,
	// fail: aborted, info: unknown).
	History         string            `json:"history,omitempty"`
	HistoryOps      int               `json:"history_operations"`
	HistoryFindings []history.Finding `json:"history_findings"`
	Transactions    map[string]int    `json:"transactions"`

	// Verified says ClickHouse was compared with the ground truth: a run
	// that stopped before (an error) reports no loss it did not look for.
	Verified bool `json:"verified"`
	// Audit is what the audit (package audit, `exactlyonce audit`) saw:
	// every stage's counts per organisation and hour, from the pipeline's
	// own counts; auditTruth the ground truth of its stages.
	Audit      *audit.Report `json:"audit,omitempty"`
	auditTruth map[string]float64

	Differences []string      `json:"differences,omitempty"`
	Pass        bool          `json:"pass"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	Error       string        `json:"error,omitempty"`
}

func (r *Result) totalFaults() int {
	n := 0
	for _, f := range r.Faults {
		n += f.Injected
	}
	return n
}

// collectFaults copies the fault counts into the result.
func (c *chaos) collectFaults() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res.Faults = map[string]*FaultCount{}
	for k, v := range c.log {
		f := *v
		c.res.Faults[k] = &f
	}
}

// printTable writes the result as the closing table.
func (r *Result) printTable(out io.Writer) {
	// One write: a test's writer logs each write as one entry.
	w := &bytes.Buffer{}
	defer func() { _, _ = out.Write(w.Bytes()) }()
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault kind\tinjected\thit\t")
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", k, r.Faults[k].Injected, r.Faults[k].Hit)
	}
	fmt.Fprintf(tw, "total\t%d\t\t\n", r.totalFaults())
	_ = tw.Flush()
	var kills []string
	total := 0
	for _, s := range []string{"processor", "gateway", "redis", "kafka", "clickhouse", "s3"} {
		if n := r.Kills[s]; n > 0 {
			kills = append(kills, fmt.Sprintf("%s %d", s, n))
			total += n
		}
	}
	fmt.Fprintf(w, "(hit: faults that landed on the moment they aim at; for kafka-* wire faults, the requests they failed, delayed or cut)\n")
	fmt.Fprintf(w, "SIGKILLs: %d (%s); exits on their own, restarted: gateway %d, processor %d\n",
		total, strings.Join(kills, ", "), r.GatewayExits, r.ProcessorExits)
	fmt.Fprintf(w, "events: %d sent (%d counted by the metrics, %d answered 200 unpublished, %d answered 4xx), %d accepted; %d requests (%d duplicate deliveries, %d retries, %d answered from the idempotency store)\n",
		r.Sent, r.Counted, r.Ignored, r.Rejected, r.Accepted, r.Requests, r.Duplicates, r.Retries, r.Replayed)
	tables := make([]string, 0, len(r.Tables))
	for t := range r.Tables {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	var rows []string
	for _, t := range tables {
		rows = append(rows, fmt.Sprintf("%s %d", t, r.Tables[t]))
	}
	if !r.Verified {
		fmt.Fprintf(w, "NOT VERIFIED: the run stopped before ClickHouse was compared with what was sent\n")
		fmt.Fprintf(w, "elapsed %v, seed %d\n", r.Elapsed.Round(time.Second), r.Seed)
		return
	}
	fmt.Fprintf(w, "ClickHouse rows: %s\n", strings.Join(rows, ", "))
	fmt.Fprintf(w, "lost: %d, duplicated: %d\n", r.Lost, r.Duplicated)
	tw = tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\tground truth\twindow FINAL\thourly MV\t")
	num := func(f float64) string {
		switch {
		case math.IsNaN(f):
			return "-"
		case f == math.Trunc(f) && math.Abs(f) < 1e15:
			return fmt.Sprintf("%.0f", f)
		}
		return fmt.Sprintf("%.3f", f)
	}
	for _, m := range r.Metrics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", m.Metric, num(m.Want), num(m.Window), num(m.Hourly))
	}
	_ = tw.Flush()
	if r.HistoryOps > 0 {
		fmt.Fprintf(w, "history: %d operations (transactions: %d committed, %d aborted, %d unknown)%s; checkers (lost, duplicate, aborted-read, unexpected-read, non-monotonic/skipped/inconsistent poll, non-monotonic commit): %s\n",
			r.HistoryOps, r.Transactions["ok"], r.Transactions["fail"], r.Transactions["info"], inFile(r.History), findings(r.HistoryFindings))
	} else {
		fmt.Fprintln(w, "history: not checked")
	}
	fmt.Fprintf(w, "webhook to row: p50 %v, p99 %v\n", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond))
	if r.Audit != nil {
		fmt.Fprintln(w, "audit (what `exactlyonce audit` sees: the stages' own counts per organisation and hour), beside the ground truth:")
		demo.WriteAuditTotals(w, r.Audit, r.auditTruth)
	} else {
		fmt.Fprintln(w, "audit: not read")
	}
	if len(r.Differences) > 0 {
		fmt.Fprintf(w, "DIFFERENCES:\n  %s\n", demo.Summarize(r.Differences))
	}
	fmt.Fprintf(w, "elapsed %v, seed %d\n", r.Elapsed.Round(time.Second), r.Seed)
}

// MarshalJSON writes NaN metrics as null.
func (m MetricCheck) MarshalJSON() ([]byte, error) {
	f := func(v float64) any {
		if math.IsNaN(v) {
			return nil
		}
		return v
	}
	return json.Marshal(map[string]any{"metric": m.Metric, "want": f(m.Want), "window_final": f(m.Window), "hourly_mv": f(m.Hourly)})
}

func (r *Result) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func inFile(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

// findings counts the history's findings by checker.
func findings(fs []history.Finding) string {
	if len(fs) == 0 {
		return "no finding"
	}
	n := map[string]int{}
	var names []string
	for _, f := range fs {
		if n[f.Checker] == 0 {
			names = append(names, f.Checker)
		}
		n[f.Checker]++
	}
	out := make([]string, len(names))
	for i, c := range names {
		out[i] = fmt.Sprintf("%s %d", c, n[c])
	}
	return "FOUND " + strings.Join(out, ", ")
}
