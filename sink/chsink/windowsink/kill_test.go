package windowsink_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// killConfig is what the parent tells a child process.
type killConfig struct {
	Addr, Database, Dir string
	End                 int64 // records in all; a child with Finish stops there
	Finish              bool
}

// finishFile, in a kill test's control directory, makes the next child
// run with Finish.
const finishFile = "finish"

const (
	killGap    = 500 * time.Millisecond
	killEvery  = 150 // records between two checkpoints
	killTable  = "sessions"
	killTicker = 5 // records between two Ticks
)

var killSrc = checkpoint.TopicPartition{Topic: "kill", Partition: 0}

// killRecord is record i of the input: three keys, 100 ms of event time a
// record, jittered by up to ±2 s, with a pause of 2 s every 50 records (so
// sessions fire) and every 97th record 8 s back in time (so late events
// bridge fired sessions, which merges retract).
func killRecord(i int64) window.Event[int] {
	j := time.Duration((i*7919)%41-20) * 100 * time.Millisecond
	at := time.Duration(i)*100*time.Millisecond + time.Duration(i/50)*2*time.Second + j
	if i%97 == 0 {
		at -= 8 * time.Second
	}
	return window.Event[int]{Key: fmt.Sprintf("k%d", i%3), Time: time.Date(2026, 10, 28, 10, 0, 0, 0, time.UTC).Add(at), Value: int(i)}
}

func killOperator() (*window.Operator[int, uint64, uint64], error) {
	return window.New(window.Session(killGap), window.Count[int]{}, window.Options{
		MaxOutOfOrderness: 3 * time.Second,
		AllowedLateness:   10 * time.Second, // every record is within out-of-orderness plus lateness
		IdleTimeout:       -1,
		// Early rows by count are replayed identically; those by interval
		// are not, so replays meet batches of other rows.
		Early: window.EarlyFiring{Every: 2, Interval: time.Millisecond},
	})
}

type sessionRow = window.Row[uint64]

func sessionColumns() []chsink.Column[sessionRow] {
	return []chsink.Column[sessionRow]{
		chsink.String("key", func(r *sessionRow) string { return r.Key }),
		chsink.DateTime64("start", proto.PrecisionMilli, func(r *sessionRow) time.Time { return r.Start }),
		chsink.DateTime64("end", proto.PrecisionMilli, func(r *sessionRow) time.Time { return r.End }),
		chsink.UInt64("events", func(r *sessionRow) uint64 { return r.Result }),
	}
}

// runKillChild runs the chain: restore, then records from the checkpoint's
// offset on, a Tick every few records, a checkpoint every killEvery. It
// prints "running", then "checkpoint N" after each.
func runKillChild(cfg killConfig) error {
	ctx := context.Background()
	storage, err := checkpoint.NewFSStorage(cfg.Dir)
	if err != nil {
		return err
	}
	store, err := checkpoint.NewStore(storage, checkpoint.StoreOptions{Keep: 2})
	if err != nil {
		return err
	}
	coord, err := checkpoint.NewCoordinator(store, checkpoint.Options{Interval: -1})
	if err != nil {
		return err
	}
	defer coord.Close()
	op, err := killOperator()
	if err != nil {
		return err
	}
	ws, err := windowsink.New(ctx, chsink.Table{Addr: cfg.Addr, Name: killTable}, killSrc, storage, op, sessionColumns,
		windowsink.Options{Sink: chsink.Options{Database: cfg.Database, MaxDelay: 10 * time.Millisecond, KeepCheckpoints: 2}})
	if err != nil {
		return err
	}
	defer ws.Close()
	task, err := coord.Attach(ctx, killSrc, map[string]checkpoint.Participant{"sessions": ws})
	if err != nil {
		return err
	}
	defer task.Detach()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = ws.Run(runCtx) }()
	next := int64(0)
	if cp := task.Restored(); cp != nil {
		next = cp.NextOffset
	}
	fmt.Println("running")
	for i := next; !cfg.Finish || i < cfg.End; i++ {
		if err := ws.Add(ctx, i, killRecord(i)); err != nil {
			return err
		}
		if len(ws.Late()) > 0 {
			return fmt.Errorf("record %d is late", i)
		}
		if i%killTicker == 0 {
			time.Sleep(200 * time.Microsecond) // let Early.Interval elapse now and then
			if err := ws.Tick(ctx); err != nil {
				return err
			}
		}
		if (i+1)%killEvery == 0 {
			// A barrier inside a journaled batch being replayed is declined
			// (sink.ErrReplayInProgress): skipped, as a chain skips it.
			err := task.Checkpoint(ctx, nil, i+1, checkpoint.Meta{}, nil)
			if err != nil && !errors.Is(err, checkpoint.ErrDeclined) {
				return err
			}
			if err == nil {
				fmt.Println("checkpoint", i+1)
			}
		}
	}
	if err := ws.EndInput(ctx); err != nil {
		return err
	}
	return lastCheckpoint(ctx, task, cfg.End)
}

// lastCheckpoint takes the checkpoint at the end of the input, trying
// again for a minute while a participant declines it (a replayed batch
// still in flight).
func lastCheckpoint(ctx context.Context, task *checkpoint.Task, at int64) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := task.Checkpoint(ctx, nil, at, checkpoint.Meta{}, nil)
		if !errors.Is(err, checkpoint.ErrDeclined) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKillDuringEarlyFiringsAndMerges kills (SIGKILL) a chain writing
// session rows, with early firings by count and by interval and merges of
// sessions already written, at random moments, several times, then lets a
// last run finish the input: the table read with FINAL holds exactly the
// sessions of the input, each with its count, with the sink's defaults.
func TestKillDuringEarlyFiringsAndMerges(t *testing.T) {
	// A server of its own: it may abort when a client dies mid-insert, and
	// is then restarted here as a service manager would.
	var srv *testkit.ClickHouseServer
	type config struct {
		Kill    killConfig
		Control string // a directory: finishFile there makes a child finish
	}
	cfg := testkit.Setup(t, "cfg", func() config {
		srv = testkit.StartClickHouse(t)
		db := testkit.NewDatabase(t, srv.Addr())
		require.NoError(t, testkit.Exec(t.Context(), srv.Addr(), db, `CREATE TABLE sessions (key String, start DateTime64(3, 'UTC'),
		end DateTime64(3, 'UTC'), events UInt64, version UInt64, deleted UInt8)
		ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (key, start)
		SETTINGS non_replicated_deduplication_window = 10000`))
		return config{Kill: killConfig{Addr: srv.Addr(), Database: db, Dir: t.TempDir(), End: 3000}, Control: t.TempDir()}
	})
	child := testkit.Func(t, "chain", func(context.Context) error {
		c := cfg.Kill
		_, err := os.Stat(filepath.Join(cfg.Control, finishFile))
		c.Finish = err == nil
		if err := runKillChild(c); err != nil {
			return fmt.Errorf("child: %w", err)
		}
		return nil
	})
	db := cfg.Kill.Database
	alive := func() {
		if _, err := testkit.QueryStrings(t.Context(), srv.Addr(), db, "SELECT 1"); err != nil {
			t.Logf("clickhouse is down (%v): restarting it", err)
			srv.Restart()
		}
	}
	r := rand.New(rand.NewPCG(7, 7))
	killed := 0
	for round := range 5 {
		from := 0 // the first child runs since Func: all its output
		if round > 0 {
			from = len(child.Logs())
			alive()
			child.Start()
		}
		// Kill at a random moment after the first checkpoint of the run.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && child.Running() { // it may exit on its own: the server went away
			if strings.Contains("\n"+child.Logs()[from:], "\ncheckpoint") {
				time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		child.Kill()
		killed++
		t.Logf("round %d: killed", round)
	}
	require.Equal(t, 5, killed)
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Control, finishFile), nil, 0o644))
	var err error
	for attempt := range 3 {
		alive()
		child.Start()
		if err = child.Wait(5 * time.Minute); err == nil {
			break
		}
		t.Logf("finishing run %d: %v", attempt, err)
	}
	require.NoError(t, err, "the last run finishes the input")
	alive()

	got := testkit.Rows(t, srv.Addr(), db, "SELECT key, toString(start), toString(end), toString(events), toString(version) FROM sessions FINAL ORDER BY key, start")
	require.Equal(t, killModel(cfg.Kill.End), got)
	deleted := testkit.Count(t, srv.Addr(), db, "SELECT count() FROM sessions WHERE deleted = 1")
	require.NotZero(t, deleted, "merges retracted sessions already written")
}

// killModel returns the sessions of records [0, end) as FINAL rows.
func killModel(end int64) [][]string {
	evs := make([]window.Event[int], end)
	for i := range evs {
		evs[i] = killRecord(int64(i))
	}
	slices.SortFunc(evs, func(a, b window.Event[int]) int { return cmp.Or(strings.Compare(a.Key, b.Key), a.Time.Compare(b.Time)) })
	var rows [][]string
	format := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") }
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].Key == evs[i].Key && evs[j].Time.Sub(evs[j-1].Time) <= killGap {
			j++
		}
		n := fmt.Sprint(j - i)
		rows = append(rows, []string{evs[i].Key, format(evs[i].Time), format(evs[j-1].Time.Add(killGap)), n, n})
		i = j
	}
	return rows
}
