package audit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/sink"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

type rec struct {
	tenant string
	at     time.Time
	dup    bool
}

func count(c *audit.Counter, offset int64, r rec) {
	c.At(offset)
	c.Add(audit.StageRead, r.tenant, r.at, 1)
	if r.dup {
		c.Add(audit.StageDuplicate, r.tenant, r.at, 1)
	} else {
		c.Add(audit.StageFirstSeen, r.tenant, r.at, 1)
	}
}

// TestCounterReplay proves a Counter restored from a snapshot and fed the
// records after it again ends with the counts of one pass: a replay never
// doubles a count. Its rows after the restore name every count again.
func TestCounterReplay(t *testing.T) {
	ctx := context.Background()
	recs := []rec{{"a", t0, false}, {"a", t0.Add(10 * time.Second), false}, {"b", t0.Add(70 * time.Second), false},
		{"a", t0.Add(20 * time.Second), true}, {"b", t0.Add(75 * time.Second), false}}
	once, err := audit.NewCounter("t/0", audit.Options{})
	require.NoError(t, err)
	for i, r := range recs {
		count(once, int64(i), r)
	}

	c, err := audit.NewCounter("t/0", audit.Options{})
	require.NoError(t, err)
	for i, r := range recs[:2] {
		count(c, int64(i), r)
	}
	snap, err := c.Snapshot(ctx, 1)
	require.NoError(t, err)
	for i, r := range recs[2:4] { // processed, then the process dies
		count(c, int64(i+2), r)
	}
	restored, err := audit.NewCounter("t/0", audit.Options{})
	require.NoError(t, err)
	require.NoError(t, restored.Restore(ctx, snap))
	for i, r := range recs[2:] {
		count(restored, int64(i+2), r)
	}
	assert.Equal(t, once.Rows(), restored.Rows())
	assert.Equal(t, uint64(2), restored.Count(audit.StageFirstSeen, "a", t0.Add(59*time.Second)))

	rows, pos := restored.Flush(nil, nil)
	assert.Equal(t, once.Rows(), rows, "nothing had been flushed: Flush writes every count")
	for i := 1; i < len(pos); i++ {
		assert.Equal(t, -1, pos[i-1].Compare(pos[i]))
	}
	rows, _ = restored.Flush(nil, nil)
	assert.Empty(t, rows, "nothing changed since")
	count(restored, 9, rec{"b", t0.Add(61 * time.Second), false})
	rows, _ = restored.Flush(nil, nil)
	assert.Equal(t, []audit.Row{
		{Key: audit.Key{Stage: audit.StageFirstSeen, Tenant: "b", Bucket: t0.Add(time.Minute)}, Counter: "t/0", Count: 3},
		{Key: audit.Key{Stage: audit.StageRead, Tenant: "b", Bucket: t0.Add(time.Minute)}, Counter: "t/0", Count: 3},
	}, rows)
}

// TestCounterRestoreFlushesOnlyUnflushed: a count flushed before the
// checkpoint is not written again after a restore (its first write time
// dates it); one changed since is.
func TestCounterRestoreFlushesOnlyUnflushed(t *testing.T) {
	ctx := context.Background()
	c, _ := audit.NewCounter("x", audit.Options{})
	c.Add("s", "a", t0, 1)
	c.Flush(nil, nil)
	c.Add("s", "b", t0, 1)
	snap, err := c.Snapshot(ctx, 1)
	require.NoError(t, err)
	st, err := audit.DecodeState(snap)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Unflushed)
	r, _ := audit.NewCounter("x", audit.Options{})
	require.NoError(t, r.Restore(ctx, snap))
	rows, _ := r.Flush(nil, nil)
	assert.Equal(t, []audit.Row{{Key: audit.Key{Stage: "s", Tenant: "b", Bucket: t0}, Counter: "x", Count: 1}}, rows)
}

// TestCounterSnapshotDeterministic: equal states encode to equal bytes.
func TestCounterSnapshotDeterministic(t *testing.T) {
	ctx := context.Background()
	a, _ := audit.NewCounter("x", audit.Options{})
	b, _ := audit.NewCounter("x", audit.Options{})
	for i := range 50 {
		a.Add("s", string(rune('a'+i%7)), t0.Add(time.Duration(i)*17*time.Second), 1)
	}
	for i := 49; i >= 0; i-- {
		b.Add("s", string(rune('a'+i%7)), t0.Add(time.Duration(i)*17*time.Second), 1)
	}
	sa, err := a.Snapshot(ctx, 1)
	require.NoError(t, err)
	sb, err := b.Snapshot(ctx, 1)
	require.NoError(t, err)
	assert.Equal(t, sa, sb)
	st, err := audit.DecodeState(sa)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, st.Bucket)
	assert.Equal(t, sink.Position{}, st.Next)
	assert.Len(t, st.Counts, len(a.Rows()))
}

// TestCounterRestoreRefuses: a damaged state, another format and another
// bucket width are refused with their errors, and the counter keeps its
// counts.
func TestCounterRestoreRefuses(t *testing.T) {
	ctx := context.Background()
	c, _ := audit.NewCounter("x", audit.Options{})
	c.Add("s", "a", t0, 3)
	good, err := c.Snapshot(ctx, 1)
	require.NoError(t, err)
	hour, _ := audit.NewCounter("x", audit.Options{Bucket: time.Hour})
	hourState, err := hour.Snapshot(ctx, 1)
	require.NoError(t, err)
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{"empty", nil, audit.ErrCorrupt},
		{"truncated", good[:len(good)-1], audit.ErrCorrupt},
		{"trailing", append(append([]byte{}, good...), 0), audit.ErrCorrupt},
		{"version", append([]byte{9}, good[1:]...), audit.ErrUnsupportedVersion},
		{"bucket width", hourState, audit.ErrBucketChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Restore(ctx, tt.give)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, uint64(3), c.Count("s", "a", t0))
		})
	}
}

func TestNewCounterOptions(t *testing.T) {
	for _, o := range []audit.Options{{Bucket: 1500 * time.Millisecond}, {Bucket: time.Hour, Retention: time.Minute}} {
		_, err := audit.NewCounter("x", o)
		assert.ErrorIs(t, err, audit.ErrInvalidOptions)
	}
	_, err := audit.NewCounter("", audit.Options{})
	assert.ErrorIs(t, err, audit.ErrInvalidOptions)
}

func TestDelta(t *testing.T) {
	d := audit.Delta{Source: "gw/1", Seq: 4, Stage: audit.StageAccepted, Tenant: "org", Bucket: t0, Count: 7}
	got, err := audit.DecodeDelta(d.Encode())
	require.NoError(t, err)
	assert.Equal(t, d, got)
	for _, bad := range []string{"", "{}", `{"source":"x","seq":0,"stage":"s","bucket":"2026-12-01T10:00:00Z"}`, "not json"} {
		_, err := audit.DecodeDelta([]byte(bad))
		assert.ErrorIs(t, err, audit.ErrCorrupt, bad)
	}
}

// TestCompare walks every status: a bucket agreeing, one short and one
// over once settled, one young (pending), one old whose counts still move
// (late), and the gateway check that lets Kafka hold more than accepted.
func TestCompare(t *testing.T) {
	now := t0.Add(time.Hour)
	settle := 5 * time.Minute
	old := now.Add(-time.Hour)
	tot := func(stage, tenant string, b time.Time, n uint64) audit.Total {
		return audit.Total{Key: audit.Key{Stage: stage, Tenant: tenant, Bucket: b}, Count: n, Updated: b.Add(time.Minute)}
	}
	events := audit.TableStage("events")
	totals := []audit.Total{
		tot(audit.StageAccepted, "ok", old, 5), tot(audit.StageRead, "ok", old, 6), tot(audit.StageFirstSeen, "ok", old, 5), tot(events, "ok", old, 5),
		tot(audit.StageAccepted, "short", old, 5), tot(audit.StageRead, "short", old, 4), tot(audit.StageFirstSeen, "short", old, 4), tot(events, "short", old, 4),
		tot(audit.StageFirstSeen, "over", old, 4), tot(events, "over", old, 6),
		tot(audit.StageFirstSeen, "young", now.Add(-2*time.Minute), 4), tot(events, "young", now.Add(-2*time.Minute), 1),
		{Key: audit.Key{Stage: audit.StageFirstSeen, Tenant: "late", Bucket: old}, Count: 4, Updated: now.Add(-time.Minute)},
		tot(events, "late", old, 3),
	}
	rep := audit.Compare(totals, audit.CompareOptions{Now: now, Settle: settle, Checks: audit.DefaultChecks("events")})
	status := map[string]audit.Status{}
	for _, b := range rep.Buckets {
		status[b.Tenant] = b.Status
	}
	assert.Equal(t, map[string]audit.Status{"ok": audit.StatusOK, "short": audit.StatusLost, "over": audit.StatusDuplicated,
		"young": audit.StatusPending, "late": audit.StatusLate}, status)
	assert.True(t, rep.Failed())
	assert.Equal(t, []string{audit.StageAccepted, audit.StageRead, audit.StageFirstSeen, events}, rep.Stages)
	assert.Contains(t, rep.Findings, audit.Finding{Check: "gateway→kafka", Tenant: "short", Bucket: old, Upstream: 5, Downstream: 4, Status: audit.StatusLost})
	assert.Len(t, rep.Findings, 4, "short fails one check: processor.first_seen→events agrees")
	assert.Equal(t, [5]int{1, 1, 1, 1, 1}, [5]int{rep.OKCount, rep.Pending, rep.Late, rep.Lost, rep.Duplicated})

	var out strings.Builder
	require.NoError(t, rep.WriteTable(&out, true))
	assert.NotContains(t, out.String(), "  ok ")
	assert.Contains(t, out.String(), "5 buckets: 1 ok, 1 pending, 1 late, 1 lost, 1 duplicated")

	later := audit.Compare(totals[:8], audit.CompareOptions{Now: now, Settle: settle, Checks: audit.DefaultChecks("events")})
	assert.Equal(t, 1, later.Lost)
}

func TestWriteMetrics(t *testing.T) {
	rep := &audit.Report{OKCount: 3, Lost: 1}
	var b strings.Builder
	require.NoError(t, rep.WriteMetrics(&b, t0))
	assert.Contains(t, b.String(), "exactlyonce_audit_buckets{status=\"lost\"} 1\n")
	assert.Contains(t, b.String(), "exactlyonce_audit_last_run_timestamp_seconds 1796119200\n")
}

// TestCompareByTheHour: a Counter's minutes summed into the hours of a
// rollup's buckets.
func TestCompareByTheHour(t *testing.T) {
	events := audit.TableStage("hourly")
	totals := []audit.Total{
		{Key: audit.Key{Stage: audit.StageFirstSeen, Tenant: "a", Bucket: t0}, Count: 2},
		{Key: audit.Key{Stage: audit.StageFirstSeen, Tenant: "a", Bucket: t0.Add(59 * time.Minute)}, Count: 3},
		{Key: audit.Key{Stage: audit.StageFirstSeen, Tenant: "a", Bucket: t0.Add(time.Hour)}, Count: 1},
		{Key: audit.Key{Stage: events, Tenant: "a", Bucket: t0}, Count: 5},
		{Key: audit.Key{Stage: events, Tenant: "a", Bucket: t0.Add(time.Hour)}, Count: 2},
	}
	rep := audit.Compare(totals, audit.CompareOptions{Now: t0.Add(24 * time.Hour), Bucket: time.Hour, Checks: audit.DefaultChecks("hourly")})
	require.Len(t, rep.Buckets, 2)
	assert.Equal(t, map[string]uint64{audit.StageFirstSeen: 5, events: 5}, rep.Buckets[0].Counts)
	assert.Equal(t, audit.StatusOK, rep.Buckets[0].Status)
	assert.Equal(t, audit.StatusDuplicated, rep.Buckets[1].Status)
}
