package audit

import (
	"fmt"
	"io"
	"time"
)

// The metrics WriteMetrics writes, in the Prometheus text format, for a
// node_exporter textfile collector (or a push gateway) to pick up after
// each run of the verifier: the alert rules under deploy/ read them.
const (
	// MetricBuckets is a gauge of the buckets of the last run by status
	// (label status: ok, pending, late, lost, duplicated).
	MetricBuckets = "exactlyonce_audit_buckets"
	// MetricLastRun is the Unix time of the last run.
	MetricLastRun = "exactlyonce_audit_last_run_timestamp_seconds"
)

// WriteMetrics writes the report's figures as MetricBuckets and
// MetricLastRun at now.
func (r *Report) WriteMetrics(w io.Writer, now time.Time) error {
	_, err := fmt.Fprintf(w, `# HELP %[1]s Buckets of the last audit run by status: lost or duplicated are differences between stages in settled buckets.
# TYPE %[1]s gauge
%[1]s{status="ok"} %[2]d
%[1]s{status="pending"} %[3]d
%[1]s{status="late"} %[4]d
%[1]s{status="lost"} %[5]d
%[1]s{status="duplicated"} %[6]d
# HELP %[7]s Unix time of the last audit run.
# TYPE %[7]s gauge
%[7]s %[8]d
`, MetricBuckets, r.OKCount, r.Pending, r.Late, r.Lost, r.Duplicated, MetricLastRun, now.Unix())
	return err
}
