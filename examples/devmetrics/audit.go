package devmetrics

import (
	"context"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/audit/chaudit"
	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/idempotency"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// StageRollup counts the first sights of the events the hourly rollup
// counts (merged pull requests, review comments, deployments, opened
// incidents): the audit compares employee_metrics_hourly with it.
const StageRollup = "processor.rollup"

// rollupTypes are the event types the hourly rollup sums.
var rollupTypes = map[string]bool{TypePRMerged: true, TypeReviewComment: true, TypeDeployment: true, TypeIncidentOpened: true}

// AuditSources are the tables of DDL the audit verifier counts per
// organisation and bucket, each against the processor's stage it must
// equal: every event once in normalized_events, every event once in the
// final windows' versions (a window's Version is its number of events), the
// rollup's sums once per counted event. A bucket must be a whole number of
// hours, as the windows and the rollup are hourly.
func AuditSources() []chaudit.Source {
	return []chaudit.Source{
		{Table: "normalized_events", Tenant: "org_id", Time: "event_time"},
		{Table: "employee_metrics_window", Tenant: "org_id", Time: "window_start", Count: "sum(version)", Final: true},
		{Table: "employee_metrics_hourly", Tenant: "org_id", Time: "hour", Vs: StageRollup,
			Count: "sumMerge(prs_merged) + sumMerge(review_comments) + sumMerge(deployments) + sumMerge(incidents)"},
	}
}

// Classify gives a delivery's organisation and event time, for the
// gateway's audit counts (kafkaaudit.Publisher.Wrap): the processor counts
// the event in the same bucket.
func Classify(d idempotency.Delivery) (string, time.Time, bool) {
	ev, err := Normalize(d.Source, d.Event, d.Key, d.Body)
	if err != nil {
		return "", time.Time{}, false
	}
	return ev.OrgID, ev.Time, true
}

// chainAudit is a chain's audit counts (Config.Audit) and their sink.
type chainAudit struct {
	counter *audit.Counter
	sink    *chsink.Sink[audit.Row]
	rows    []audit.Row
	pos     []sink.Position
}

func newChainAudit(ctx context.Context, cfg Config, parts *checkpoint.Chain) (*chainAudit, error) {
	c, err := audit.NewCounter(parts.Partition().String(), audit.Options{})
	if err != nil {
		return nil, err
	}
	if err := parts.Add("audit", c); err != nil {
		return nil, err
	}
	opts := cfg.Sink
	opts.ParticipantName = "" // the table's name, audit_counts
	s, err := chaudit.OpenSink(ctx, parts, cfg.ClickHouse, chaudit.DefaultTable, opts)
	if err != nil {
		return nil, err
	}
	return &chainAudit{counter: c, sink: s}, nil
}

// count counts a decoded record: read, and first seen (with the rollup's
// types) or duplicate. A nil *chainAudit counts nothing.
func (a *chainAudit) count(offset int64, ev Event, first bool) {
	if a == nil {
		return
	}
	a.counter.At(offset)
	a.counter.Add(audit.StageRead, ev.OrgID, ev.Time, 1)
	if !first {
		a.counter.Add(audit.StageDuplicate, ev.OrgID, ev.Time, 1)
		return
	}
	a.counter.Add(audit.StageFirstSeen, ev.OrgID, ev.Time, 1)
	if rollupTypes[ev.Type] {
		a.counter.Add(StageRollup, ev.OrgID, ev.Time, 1)
	}
}

// sunk counts a row the sink of table took (audit.SinkStage): the sink
// acknowledges it by the checkpoint that carries the count.
func (a *chainAudit) sunk(table string, ev Event) {
	if a == nil {
		return
	}
	a.counter.Add(audit.SinkStage(table), ev.OrgID, ev.Time, 1)
}

func (a *chainAudit) flush(ctx context.Context) error {
	if a == nil {
		return nil
	}
	return chaudit.Flush(ctx, a.counter, a.sink, &a.rows, &a.pos)
}
