package peers

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// runRecovery runs s with checkpoints every second, kills its process with
// SIGKILL once the events table holds half the unique events, starts it
// again the same way (same state directory, group, checkpoints and
// output, so it resumes from what it had made durable) and measures the
// time from the kill until the output is complete again. An exact system
// must then hold the ground truth exactly; a peer's duplicates are
// counted, and only a missing event or an under-counted window fails it.
func runRecovery(t *testing.T, e *env, s system) (result, bool) {
	t.Helper()
	var r result
	db := newOutput(t, e)
	j := s.start(t, e, db, true)
	defer j.stop()
	fail := func(what string, err error) (result, bool) {
		t.Errorf("%s recovery: %s: %v\n%s", s.name, what, err, j.logs())
		return r, false
	}
	// The events rows, not the distinct ids: cheaper to poll, and before
	// the kill a peer's output has no duplicates either.
	if err := j.poll(t, e, db, false, func(p progress) bool {
		r.killedAt = p.rows
		return p.rows >= e.in.unique/2
	}); err != nil {
		return fail("before the kill", err)
	}
	killed := time.Now()
	j.kill()
	if r.killedAt >= e.in.unique {
		t.Logf("%s recovery: the output was complete before the kill (the input is too small for this system): no figure", s.name)
		return r, false
	}
	if err := j.restart(); err != nil {
		return fail("restart", err)
	}
	// An over-counted window can bring the counts' sum to the truth's
	// while another window is still short: a complete-looking output is
	// audited, and polled on for up to 30 s while the audit finds it short.
	var auditErr error
	var looked time.Time
	if err := j.poll(t, e, db, true, func(p progress) bool {
		if !p.complete(e.in) {
			return false
		}
		if looked.IsZero() {
			looked = time.Now()
		}
		r.recovery = time.Since(killed)
		r.dupes, auditErr = audit(t, e, db)
		return auditErr == nil || time.Since(looked) > 30*time.Second
	}); err != nil {
		if _, aerr := audit(t, e, db); aerr != nil {
			err = fmt.Errorf("%w; %v", err, aerr)
		}
		return fail("after the restart", err)
	}
	// What the restarted job said of its restore (the Flink sinks' writers
	// name the checkpoint they resumed from).
	_, after, _ := strings.Cut(j.logs(), "--- restarted")
	for _, line := range strings.Split(after, "\n") {
		if strings.HasPrefix(line, "peers: ") {
			t.Logf("%s after the restart: %s", s.name, line)
		}
	}
	if auditErr != nil {
		t.Errorf("%s recovery: wrong output, no figure: %v", s.name, auditErr)
		return r, false
	}
	if s.exact && r.dupes != (dupes{}) {
		t.Errorf("%s recovery: the output is not exact after a kill -9: %v", s.name, r.dupes)
		return r, false
	}
	return r, true
}
