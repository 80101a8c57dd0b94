package sim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
)

// The reference model: what each output must hold once the run settled,
// computed from the input alone, without the SDK's code.

// distinct returns the input's records without the duplicates, in offset
// order: what dedup must pass on.
func (w *world) distinct() []record {
	seen := map[string]bool{}
	var out []record
	for _, r := range w.input {
		if !seen[r.ID] {
			seen[r.ID] = true
			out = append(out, r)
		}
	}
	return out
}

// referenceSessions computes the session windows of the distinct records:
// per key, events at most sessionGap apart form one session [first, last +
// gap) holding their count. No event is late (see generate), so the
// operator must end with exactly these.
func referenceSessions(recs []record) []sessionRow {
	byKey := map[string][]time.Time{}
	for _, r := range recs {
		byKey[r.Key] = append(byKey[r.Key], r.Time)
	}
	var out []sessionRow
	for k, ts := range byKey {
		slices.SortFunc(ts, time.Time.Compare)
		cur := sessionRow{Key: k, Start: ts[0], End: ts[0].Add(sessionGap), Count: 1}
		for _, t := range ts[1:] {
			if !t.After(cur.End) {
				if e := t.Add(sessionGap); e.After(cur.End) {
					cur.End = e
				}
				cur.Count++
				continue
			}
			out = append(out, cur)
			cur = sessionRow{Key: k, Start: t, End: t.Add(sessionGap), Count: 1}
		}
		out = append(out, cur)
	}
	for i := range out {
		out[i].Version = out[i].Count
	}
	slices.SortFunc(out, compareSessions)
	return out
}

// exactlyOnce reports every want ID missing from got or in it more than
// once.
func (w *world) exactlyOnce(sink string, want []record, got []string) {
	n := map[string]int{}
	for _, id := range got {
		n[id]++
	}
	var lost, dup []string
	for _, r := range want {
		switch c := n[r.ID]; {
		case c == 0:
			lost = append(lost, r.ID)
		case c > 1:
			dup = append(dup, fmt.Sprintf("%s x%d", r.ID, c))
		}
	}
	if len(lost) > 0 {
		w.violate(KindLoss, sink, "%d of %d records missing: %s", len(lost), len(want), short(lost))
	}
	if len(dup) > 0 {
		w.violate(KindDuplicate, sink, "%d records more than once: %s", len(dup), short(dup))
	}
}

func short(s []string) string {
	if len(s) > 8 {
		return strings.Join(s[:8], ", ") + ", ..."
	}
	return strings.Join(s, ", ")
}

// check compares every output with the reference model.
func (w *world) check() {
	want := w.distinct()
	w.exactlyOnce("kafka", want, w.broker.ReadCommitted())

	var ids []string
	perHour := map[int64]int64{}
	for _, r := range w.ch.events.rows() {
		perHour[r.Hour]++
		if !strings.HasPrefix(r.ID, "w2-") {
			ids = append(ids, r.ID)
		}
	}
	w.exactlyOnce("events", want, ids)
	viewHour := map[int64]int64{}
	for _, r := range w.ch.hourly.rows() {
		viewHour[r.Hour] += r.Count
	}
	for _, h := range slices.Sorted(maps.Keys(perHour)) {
		n := perHour[h]
		if v := viewHour[h]; v < n {
			w.violate(KindLoss, "hourly", "hour %d: the view counts %d rows, the table holds %d", h, v, n)
		} else if v > n {
			w.violate(KindDuplicate, "hourly", "hour %d: the view counts %d rows, the table holds %d", h, v, n)
		}
	}

	ref := referenceSessions(want)
	w.compareWindows("sessions", ref)
	w.compareWindows("hopping", referenceHopping(want))

	if w.lastAudit != nil {
		c := w.lastAudit
		counts := map[audit.Key]uint64{}
		for _, r := range want {
			counts[audit.Key{Stage: auditStage, Tenant: r.Key, Bucket: audit.BucketOf(r.Time, auditBucket)}]++
		}
		for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b audit.Key) int {
			return cmp.Or(strings.Compare(a.Tenant, b.Tenant), a.Bucket.Compare(b.Bucket))
		}) {
			n := counts[k]
			if got := c.Count(k.Stage, k.Tenant, k.Bucket); got != n {
				kind := KindLoss
				if got > n {
					kind = KindDuplicate
				}
				w.violate(kind, "audit", "%s %s %v: counted %d, want %d", k.Stage, k.Tenant, k.Bucket.Format(time.TimeOnly), got, n)
			}
		}
	}
	if w.committed != int64(len(w.input)) {
		w.violate(KindStuck, "checkpoint", "the group's offset is %d, the input has %d records", w.committed, len(w.input))
	}
}

// compareWindows compares the window table's FINAL with the reference.
func (w *world) compareWindows(table string, ref []sessionRow) {
	got := w.ch.Final(table)
	if !slices.EqualFunc(ref, got, func(a, b sessionRow) bool { return compareSessions(a, b) == 0 }) {
		extra, missing := diffSessions(got, ref), diffSessions(ref, got)
		w.violate(KindWrongResult, table, "FINAL holds %d windows, the reference %d: not in the reference %v; missing %v",
			len(got), len(ref), extra, missing)
	}
}

// referenceHopping computes the hopping windows of the distinct records:
// per key and window [start, start+hopSize), starting every hopSlide, the
// count of records in it.
func referenceHopping(recs []record) []sessionRow {
	type key struct {
		k string
		s int64
	}
	counts := map[key]uint64{}
	for _, r := range recs {
		t := r.Time.UnixNano()
		last := t - t%int64(hopSlide)
		for s := last; s > t-int64(hopSize); s -= int64(hopSlide) {
			counts[key{r.Key, s}]++
		}
	}
	out := make([]sessionRow, 0, len(counts))
	for k, n := range counts {
		start := time.Unix(0, k.s).UTC()
		out = append(out, sessionRow{Key: k.k, Start: start, End: start.Add(hopSize), Version: n, Count: n})
	}
	slices.SortFunc(out, compareSessions)
	return out
}

func diffSessions(a, b []sessionRow) []string {
	var out []string
	for _, r := range a {
		if !slices.ContainsFunc(b, func(s sessionRow) bool { return compareSessions(r, s) == 0 }) {
			out = append(out, fmt.Sprintf("%s[%s,%s)x%d", r.Key, r.Start.Format(time.TimeOnly), r.End.Format(time.TimeOnly), r.Count))
		}
	}
	return out
}
