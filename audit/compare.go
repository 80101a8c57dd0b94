package audit

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Total is one stage's count of a tenant's bucket, summed over the
// pipeline's counters.
type Total struct {
	Key
	Count uint64
	// Updated is when the count last changed (the newest of its rows'
	// write times); zero when unknown (rows counted in a table).
	Updated time.Time
}

// Check compares two stages bucket by bucket.
type Check struct {
	Name                 string
	Upstream, Downstream string
	// MayExceed: the downstream stage may count more than the upstream
	// (Kafka holds a delivery twice after a lost acknowledgement, dedup
	// drops it later), only fewer is a difference (a loss).
	MayExceed bool
}

// DefaultChecks are the comparisons of the SDK's pipeline: every delivery
// the gateway accepted was read from Kafka (gateway→kafka), and each table
// holds one row per first sight (processor.first_seen→<table>).
func DefaultChecks(tables ...string) []Check {
	checks := []Check{GatewayCheck()}
	for _, t := range tables {
		checks = append(checks, Check{Name: StageFirstSeen + "→" + t, Upstream: StageFirstSeen, Downstream: TableStage(t)})
	}
	return checks
}

// GatewayCheck is DefaultChecks' first: Kafka holds at least every delivery
// the gateway accepted (more after a lost acknowledgement).
func GatewayCheck() Check {
	return Check{Name: "gateway→kafka", Upstream: StageAccepted, Downstream: StageRead, MayExceed: true}
}

// SinkCheck compares the rows a sink of table acknowledged (SinkStage)
// with the rows the table holds (TableStage): fewer in the table is a loss
// after the acknowledgement (a part ClickHouse lost), more is a row
// written twice or by another writer. With the first sights' check beside
// it, a difference says on which side of the sink it happened.
func SinkCheck(table string) Check {
	return Check{Name: SinkStage(table) + "→" + table, Upstream: SinkStage(table), Downstream: TableStage(table)}
}

// Status is a bucket's verdict under one check.
type Status string

// The statuses, from good to bad.
const (
	StatusOK Status = "ok"
	// StatusPending: the stages differ in a bucket younger than Settle: its
	// events may still be on their way.
	StatusPending Status = "pending"
	// StatusLate: the stages differ in a bucket older than Settle whose
	// counts changed less than Settle ago: late events (retries,
	// redeliveries) are still arriving. Not a failure yet.
	StatusLate Status = "late"
	// StatusLost: the downstream stage counts fewer than the upstream in a
	// settled bucket.
	StatusLost Status = "lost"
	// StatusDuplicated: the downstream stage counts more than the upstream
	// in a settled bucket.
	StatusDuplicated Status = "duplicated"
)

func (s Status) rank() int {
	return slices.Index([]Status{StatusOK, StatusPending, StatusLate, StatusLost, StatusDuplicated}, s)
}

// Failed reports whether s is a difference (lost or duplicated).
func (s Status) Failed() bool { return s == StatusLost || s == StatusDuplicated }

// CompareOptions configure Compare.
type CompareOptions struct {
	// Now is the time the buckets' age is measured at. Required.
	Now time.Time
	// Bucket is the buckets' width. Default DefaultBucket.
	Bucket time.Duration
	// Settle is how long after its end (and after its counts last changed)
	// a bucket must agree: the allowed lateness of events plus the
	// checkpoint interval plus the sinks' longest delay. Default zero:
	// every difference counts at once.
	Settle time.Duration
	// Checks are the comparisons. Default DefaultChecks().
	Checks []Check
}

// Finding is the verdict of one check on one bucket.
type Finding struct {
	Check      string    `json:"check"`
	Tenant     string    `json:"tenant"`
	Bucket     time.Time `json:"bucket"`
	Upstream   uint64    `json:"upstream"`
	Downstream uint64    `json:"downstream"`
	Status     Status    `json:"status"`
}

// Bucket is one tenant's bucket: every stage's count and the worst status
// of its checks.
type Bucket struct {
	Tenant string            `json:"tenant"`
	Start  time.Time         `json:"bucket"`
	Counts map[string]uint64 `json:"counts"`
	Status Status            `json:"status"`
}

// Report is what Compare found.
type Report struct {
	Stages   []string  `json:"stages"`
	Buckets  []Bucket  `json:"buckets"`
	Findings []Finding `json:"findings"` // every check that is not ok
	// Buckets by their worst status.
	OKCount, Pending, Late, Lost, Duplicated int
}

// Failed reports whether a settled bucket differs.
func (r *Report) Failed() bool { return r.Lost+r.Duplicated > 0 }

// Compare pivots totals into buckets of CompareOptions.Bucket (totals of
// finer buckets, a Counter's minutes, are summed into it: an hourly
// rollup is compared by the hour) and runs the checks on each. A stage
// with no count in a bucket counts zero there.
func Compare(totals []Total, opts CompareOptions) *Report {
	if opts.Bucket == 0 {
		opts.Bucket = DefaultBucket
	}
	if opts.Checks == nil {
		opts.Checks = DefaultChecks()
	}
	type bk struct {
		tenant string
		start  int64
	}
	buckets := map[bk]*Bucket{}
	updated := map[bk]time.Time{}
	var stages []string
	for _, t := range totals {
		start := BucketOf(t.Bucket, opts.Bucket)
		k := bk{t.Tenant, start.Unix()}
		b := buckets[k]
		if b == nil {
			b = &Bucket{Tenant: t.Tenant, Start: start, Counts: map[string]uint64{}, Status: StatusOK}
			buckets[k] = b
		}
		b.Counts[t.Stage] += t.Count
		if t.Updated.After(updated[k]) {
			updated[k] = t.Updated
		}
		if !slices.Contains(stages, t.Stage) {
			stages = append(stages, t.Stage)
		}
	}
	rep := &Report{Stages: orderStages(stages, opts.Checks)}
	keys := make([]bk, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b bk) int { return cmp.Or(strings.Compare(a.tenant, b.tenant), cmp.Compare(a.start, b.start)) })
	for _, k := range keys {
		b := buckets[k]
		end := b.Start.Add(opts.Bucket)
		for _, c := range opts.Checks {
			up, down := b.Counts[c.Upstream], b.Counts[c.Downstream]
			st := StatusOK
			switch {
			case up == down, c.MayExceed && down > up:
			case opts.Now.Sub(end) < opts.Settle:
				st = StatusPending
			case opts.Now.Sub(updated[k]) < opts.Settle:
				st = StatusLate
			case down < up:
				st = StatusLost
			default:
				st = StatusDuplicated
			}
			if st == StatusOK {
				continue
			}
			rep.Findings = append(rep.Findings, Finding{Check: c.Name, Tenant: b.Tenant, Bucket: b.Start, Upstream: up, Downstream: down, Status: st})
			if st.rank() > b.Status.rank() {
				b.Status = st
			}
		}
		switch b.Status {
		case StatusOK:
			rep.OKCount++
		case StatusPending:
			rep.Pending++
		case StatusLate:
			rep.Late++
		case StatusLost:
			rep.Lost++
		case StatusDuplicated:
			rep.Duplicated++
		}
		rep.Buckets = append(rep.Buckets, *b)
	}
	return rep
}

// orderStages puts the stages the checks name first, in pipeline order,
// then the others by name.
func orderStages(stages []string, checks []Check) []string {
	var out []string
	for _, c := range checks {
		for _, s := range []string{c.Upstream, c.Downstream} {
			if !slices.Contains(out, s) && slices.Contains(stages, s) {
				out = append(out, s)
			}
		}
	}
	var rest []string
	for _, s := range stages {
		if !slices.Contains(out, s) {
			rest = append(rest, s)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// WriteTable prints the report as a table: one line per tenant and bucket
// (only the buckets that are not ok when onlyDifferences), every stage's
// count, the status, and a summary line.
func (r *Report) WriteTable(w io.Writer, onlyDifferences bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "tenant\tbucket\t")
	for _, s := range r.Stages {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprintln(tw, "status\t")
	for _, b := range r.Buckets {
		if onlyDifferences && b.Status == StatusOK {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t", b.Tenant, b.Start.Format("2006-01-02 15:04"))
		for _, s := range r.Stages {
			fmt.Fprintf(tw, "%d\t", b.Counts[s])
		}
		fmt.Fprintf(tw, "%s\t\n", b.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d buckets: %d ok, %d pending, %d late, %d lost, %d duplicated\n",
		len(r.Buckets), r.OKCount, r.Pending, r.Late, r.Lost, r.Duplicated)
	return err
}
