package testkit

import (
	"context"
	"fmt"
	"time"
)

// growPoll is how often KillWhileGrowing reads the count.
const growPoll = 20 * time.Millisecond

// KillWhileGrowing kills the process with SIGKILL while its output grows,
// the moment a kill test is worth most: the service has written part of
// what it will write and is writing more. It reads count every 20 ms
// (typically a row count, see QueryCount) and kills the process at the
// second increase it sees after its call: the first says the service
// writes, the second that it has not caught up yet. It returns the last
// count read before the kill, a lower bound of what the service wrote
// before it died.
//
//	rows := func() (uint64, error) { return testkit.QueryCount(ctx, addr, db, "SELECT count() FROM events") }
//	at := svc.KillWhileGrowing(ctx, rows)
//	svc.Start()
//
// Killing after "deliver half, then wait for rows" is weaker than it
// looks: by the time a test sees rows, the service has often caught up,
// and the kill hits an idle process. Keep input arriving while
// KillWhileGrowing waits, or give the service a backlog it needs a while
// to write.
//
// It fails the test when count fails, when the process exits first, or
// when ctx ends first (with the count it saw), so bound ctx.
func (p *Process) KillWhileGrowing(ctx context.Context, count func() (uint64, error)) uint64 {
	p.t.Helper()
	last, err := count()
	if err != nil {
		p.t.Fatalf("testkit: %s: count: %v", p.name, err)
	}
	first := last
	increases := 0
	tick := time.NewTicker(growPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.t.Fatalf("testkit: %s: the count did not grow twice before %v: %d at the start, %d now",
				p.name, context.Cause(ctx), first, last)
		case <-p.Exited():
			p.t.Fatalf("testkit: %s exited on its own (%v) while KillWhileGrowing waited for its output to grow; its output:\n%s",
				p.name, p.Err(), p.Logs())
		case <-tick.C:
		}
		n, err := count()
		if err != nil {
			p.t.Fatalf("testkit: %s: count: %v", p.name, err)
		}
		if n > last {
			increases++
		}
		last = max(last, n)
		if increases == 2 {
			p.Kill()
			return last
		}
	}
}

// QueryCount returns the number a query that selects one number returns,
// such as "SELECT count() FROM events": Count without a test, for
// KillWhileGrowing and for goroutines other than the test's.
func QueryCount(ctx context.Context, addr, database, query string) (uint64, error) {
	rows, err := QueryStrings(ctx, addr, database, "SELECT toUInt64(("+query+")) AS n")
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return 0, fmt.Errorf("testkit: %s: %d rows, want one number", firstLine(query), len(rows))
	}
	var n uint64
	if _, err := fmt.Sscan(rows[0][0], &n); err != nil {
		return 0, fmt.Errorf("testkit: %s: %w", firstLine(query), err)
	}
	return n, nil
}
