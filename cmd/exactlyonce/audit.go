package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// auditOutput is the JSON of exactlyonce audit -json.
type auditOutput struct {
	From     time.Time       `json:"from"`
	To       time.Time       `json:"to"`
	Bucket   string          `json:"bucket"`
	Settle   string          `json:"settle"`
	Failed   bool            `json:"failed"`
	Summary  auditSummary    `json:"summary"`
	Stages   []string        `json:"stages"`
	Buckets  []audit.Bucket  `json:"buckets"`
	Findings []audit.Finding `json:"findings"`
	Scan     *scanReport     `json:"scan,omitempty"` // -scan-topic
	// ClickHouse is the server's version and deduplication settings
	// (chsink.ReadServerSettings): the defaults this connection's user gets, and what
	// every sink insert sends instead.
	ClickHouse *auditServer `json:"clickhouse,omitempty"`
}

type auditServer struct {
	Version              string            `json:"version"`
	DeduplicationVersion string            `json:"insert_deduplication_version,omitempty"`
	Defaults             map[string]string `json:"defaults"`
	Sent                 map[string]string `json:"sent_by_sinks"`
}

type auditSummary struct {
	OK         int `json:"ok"`
	Pending    int `json:"pending"`
	Late       int `json:"late"`
	Lost       int `json:"lost"`
	Duplicated int `json:"duplicated"`
}

func runAudit(ctx context.Context, args []string, env func(string) string, stdout io.Writer) error {
	fs := newFlags("audit")
	chAddr := fs.String("clickhouse", envOr(env, "CLICKHOUSE_ADDR", "localhost:9000"), "ClickHouse native protocol address (CLICKHOUSE_ADDR)")
	database := fs.String("database", envOr(env, "CLICKHOUSE_DATABASE", "webhooks"), "database of the audit table and the tables (CLICKHOUSE_DATABASE)")
	user := fs.String("clickhouse-user", env("CLICKHOUSE_USER"), "ClickHouse user (CLICKHOUSE_USER)")
	auditTable := fs.String("audit-table", chaudit.DefaultTable, "the audit table")
	since := fs.Duration("since", 2*time.Hour, "audit the buckets of this much event time before -until")
	until := fs.String("until", "", "end of the audited event time, RFC 3339 (default: now)")
	bucket := fs.Duration("bucket", audit.DefaultBucket, "the buckets' width: the processor's and the gateway's")
	settle := fs.Duration("settle", 5*time.Minute, "a bucket is judged this long after its end and its counts' last change: the allowed lateness plus the checkpoint interval plus the sinks' longest delay")
	var tables listFlag
	fs.Var(&tables, "table", "a table to count per bucket and compare with the first sights (or vs=stage): name[,tenant=col][,time=col][,count=expr][,final][,vs=stage] (repeatable)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	differences := fs.Bool("differences", false, "print only the buckets that are not ok")
	var sc scanFlags
	sc.register(fs, env)
	metricsFile := fs.String("metrics-file", "", "also write the figures in the Prometheus text format to this file (for a node_exporter textfile collector), atomically")
	if err := fs.Parse(args); err != nil {
		return err
	}
	now := time.Now().UTC()
	to := now
	if *until != "" {
		var err error
		if to, err = time.Parse(time.RFC3339, *until); err != nil {
			return fmt.Errorf("-until: %w", err)
		}
	}
	from := audit.BucketOf(to.Add(-*since), *bucket)
	var sources []chaudit.Source
	checks := []audit.Check{audit.GatewayCheck()}
	for _, t := range tables {
		src, err := chaudit.ParseSource(t)
		if err != nil {
			return fmt.Errorf("-table: %w", err)
		}
		sources, checks = append(sources, src), append(checks, src.Check())
	}
	// ch-go's own dial timeout is 1 s, short for a server across a WAN or
	// a busy one (a loaded test machine met it): a command run by hand
	// can wait longer to connect.
	opts := ch.Options{Address: *chAddr, Database: *database, User: *user, Password: env("CLICKHOUSE_PASSWORD"),
		DialTimeout: 10 * time.Second}
	totals, err := chaudit.Totals(ctx, opts, *database, *auditTable, from, to)
	if err != nil {
		return err
	}
	for _, src := range sources {
		rows, err := chaudit.TableCounts(ctx, opts, *database, src, *bucket, from, to)
		if err != nil {
			return err
		}
		totals = append(totals, rows...)
	}
	// A table whose sink counted its acknowledged rows is compared with
	// them too.
	for _, src := range sources {
		c, ok := src.SinkCheck()
		if ok && slices.ContainsFunc(totals, func(t audit.Total) bool { return t.Stage == c.Upstream }) {
			checks = append(checks, c)
		}
	}
	srv, err := chsink.ReadServerSettings(ctx, opts)
	if err != nil {
		return err
	}
	server := &auditServer{Version: srv.Version, DeduplicationVersion: srv.DeduplicationVersion, Defaults: srv.Defaults, Sent: srv.Sent}
	rep := audit.Compare(totals, audit.CompareOptions{Now: now, Bucket: *bucket, Settle: *settle, Checks: checks})
	var scan *scanReport
	if sc.topic != "" {
		if scan, err = sc.scan(ctx, opts, *database, now, *settle); err != nil {
			return err
		}
	}
	if *metricsFile != "" {
		if err := writeAtomically(*metricsFile, func(w io.Writer) error { return rep.WriteMetrics(w, now) }); err != nil {
			return fmt.Errorf("-metrics-file: %w", err)
		}
	}
	if *asJSON {
		out := auditOutput{From: from, To: to, Bucket: bucket.String(), Settle: settle.String(), Failed: rep.Failed(),
			Summary: auditSummary{rep.OKCount, rep.Pending, rep.Late, rep.Lost, rep.Duplicated},
			Stages:  rep.Stages, Buckets: rep.Buckets, Findings: rep.Findings, Scan: scan, ClickHouse: server}
		if out.Buckets == nil {
			out.Buckets = []audit.Bucket{}
		}
		if out.Findings == nil {
			out.Findings = []audit.Finding{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "audit of %s.%s, event time %s to %s, buckets of %v, settled %v after their end\n",
			*database, *auditTable, from.Format(time.RFC3339), to.Format(time.RFC3339), *bucket, *settle)
		writeServer(stdout, server)
		if err := rep.WriteTable(stdout, *differences); err != nil {
			return err
		}
		for _, f := range rep.Findings {
			if f.Status.Failed() {
				fmt.Fprintf(stdout, "%s: %s %s %s: %d upstream, %d downstream\n", strings.ToUpper(string(f.Status)), f.Check, f.Tenant,
					f.Bucket.Format("2006-01-02 15:04"), f.Upstream, f.Downstream)
			}
		}
	}
	if len(rep.Buckets) == 0 && !*asJSON {
		fmt.Fprintln(stdout, "no counts in this range: is the pipeline writing audit counts (and -database right)?")
	}
	if scan != nil && !*asJSON {
		writeScan(stdout, scan)
	}
	if rep.Failed() || scan != nil && scan.failed() {
		return errFound
	}
	return nil
}

// writeServer prints the server's version and deduplication settings on
// one line each.
func writeServer(w io.Writer, srv *auditServer) {
	kv := func(m map[string]string) string {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s=%q", k, m[k])
		}
		return b.String()
	}
	fmt.Fprintf(w, "clickhouse %s, insert_deduplication_version %q\n", srv.Version, srv.DeduplicationVersion)
	fmt.Fprintf(w, "  this user's defaults: %s\n  every sink insert sends: %s\n", kv(srv.Defaults), kv(srv.Sent))
}

// writeAtomically writes a file through a temporary one in its directory
// and a rename, so a collector never reads half of it.
func writeAtomically(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := errors.Join(write(f), f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
