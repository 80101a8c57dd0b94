package windowsink_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/testkit"
	"github.com/exactlyonce/exactlyonce/window"
)

// stepsConfig is what TestKillAtEveryStep tells its child.
type stepsConfig struct {
	Addr, Database, Table, Dir string
	Kind                       string // "tumbling", "hopping" or "session"
	KillAt                     int    // the step after which the child waits to be killed
	Landed                     bool   // flush the rows to ClickHouse first, without a checkpoint
	// Ticks says when the child ticks: "script" at the script's 't'
	// steps, "every" after every event instead.
	Ticks string
}

// A step of the script: 'a' adds event i (at offset i), 't' advances the
// clock by the early-firing interval and ticks, 'c' checkpoints before
// event i, 'e' ends the input.
type step struct {
	kind byte
	i    int
}

// stepEvents, in arrival order, with what they do to sessions of gap 10 s
// (MaxOutOfOrderness 5 s, AllowedLateness 30 s, Early.Every 3), and to
// windows of 10 s (tumbling) or 20 s every 10 s (hopping).
var stepEvents = []struct {
	key string
	sec int
}{
	{"k", 0},  // 0: k [0, 10)
	{"k", 20}, // 1: k [20, 30)
	{"j", 5},  // 2: j [5, 15)
	{"k", 25}, // 3: k [20, 35)
	{"k", 10}, // 4: bridges: k [0, 35), 4 events (Every: early row)
	{"k", 50}, // 5: k [50, 60); watermark 45 fires k [0, 35) and j [5, 15)
	{"k", 40}, // 6: k [40, 60): the start of a session shown early moves
	{"k", 34}, // 7: bridges the fired k [0, 35) and k [40, 60): k [0, 60); windows: late but allowed
	{"j", 70}, // 8: j [70, 80); watermark 65 fires k [0, 60), closes j [5, 15)
	{"j", 14}, // 9: late: j [5, 15) is closed
	{"k", 62}, // 10: k [62, 72)
	{"k", 61}, // 11: k [61, 72): the start of a session shown early moves
}

// stepScript: early firings by Tick between the events, checkpoints
// between them, the end of the input and a last checkpoint.
var stepScript = []step{
	{'a', 0}, {'a', 1}, {'t', 0}, {'c', 2}, {'a', 2}, {'a', 3}, {'t', 0}, {'a', 4}, {'a', 5}, {'t', 0}, {'c', 6},
	{'a', 6}, {'t', 0}, {'a', 7}, {'t', 0}, {'a', 8}, {'c', 9}, {'a', 9}, {'a', 10}, {'t', 0}, {'a', 11}, {'t', 0},
	{'e', 0}, {'c', 12},
}

func stepEvent(i int) window.Event[int] {
	e := stepEvents[i]
	return window.Event[int]{Key: e.key, Time: stepTime(e.sec), Value: i}
}

func stepTime(sec int) time.Time { return time.Date(2026, 10, 28, 10, 0, sec, 0, time.UTC) }

const stepInterval = time.Minute

func stepOperator(kind string, now func() time.Time) (*window.Operator[int, uint64, uint64], error) {
	spec := map[string]window.Spec{
		"tumbling": window.Tumbling(10 * time.Second),
		"hopping":  window.Hopping(20*time.Second, 10*time.Second),
		"session":  window.Session(10 * time.Second),
	}[kind]
	return window.New(spec, window.Count[int]{}, window.Options{
		MaxOutOfOrderness: 5 * time.Second,
		AllowedLateness:   30 * time.Second,
		IdleTimeout:       -1,
		Early:             window.EarlyFiring{Every: 3, Interval: stepInterval},
		Now:               now,
	})
}

// runStepsChild runs the script from the start to step KillAt, flushes the
// rows to ClickHouse if Landed (as a checkpoint's barrier would, but saving
// no checkpoint), prints "kill me" and waits for SIGKILL.
func runStepsChild(cfg stepsConfig) error {
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
	clock := time.Date(2026, 10, 28, 11, 0, 0, 0, time.UTC)
	op, err := stepOperator(cfg.Kind, func() time.Time { return clock })
	if err != nil {
		return err
	}
	// MaxDelay is long: rows reach ClickHouse at the checkpoints and where
	// the parent says, never by the timer, so that every run of a case is
	// the same.
	ws, err := windowsink.New(ctx, chsink.Table{Addr: cfg.Addr, Name: cfg.Table}, killSrc, storage, op, sessionColumns,
		windowsink.Options{Sink: chsink.Options{Database: cfg.Database, MaxDelay: time.Hour, KeepCheckpoints: 2}})
	if err != nil {
		return err
	}
	defer ws.Close()
	task, err := coord.Attach(ctx, killSrc, map[string]checkpoint.Participant{"sessions": ws})
	if err != nil {
		return err
	}
	defer task.Detach()
	next := 0
	if cp := task.Restored(); cp != nil {
		next = int(cp.NextOffset)
	}
	killed := errors.New("killed")
	err = playScript(ctx, ws, task, next, func(n int, st step) (bool, error) {
		tick := st.kind == 't' && cfg.Ticks == "script" || st.kind == 'a' && cfg.Ticks == "every"
		if tick {
			clock = clock.Add(stepInterval)
			if err := ws.Tick(ctx); err != nil {
				return false, err
			}
		}
		if n < cfg.KillAt {
			return false, nil
		}
		if cfg.Landed {
			if _, err := ws.Snapshot(ctx, 1<<40); err != nil {
				return false, err
			}
		}
		return true, killed
	})
	if errors.Is(err, killed) {
		fmt.Println("kill me")
		select {}
	}
	return err
}

// playScript plays the script from offset next (the restored
// checkpoint's): the events from there on, the checkpoints after them,
// the end of the input and a last checkpoint. after runs after each step
// played (and its Tick is its to do): an error stops the script.
// Checkpoints declined while a journaled batch is being replayed are
// skipped, as a chain does; the last one waits, if need be, for the
// sink's timer to finish a replay that came up short.
func playScript(ctx context.Context, ws *windowsink.Sink[int, uint64, uint64], task *checkpoint.Task, next int,
	after func(n int, st step) (bool, error)) error {
	played := false
	for n, st := range stepScript {
		var err error
		switch {
		case st.kind == 'a' && st.i >= next:
			err = ws.Add(ctx, int64(st.i), stepEvent(st.i))
			played = true
		case st.kind == 'c' && played && st.i < len(stepEvents):
			if err = task.Checkpoint(ctx, nil, int64(st.i), checkpoint.Meta{}, nil); errors.Is(err, checkpoint.ErrDeclined) {
				err = nil
			}
		case st.kind == 'e':
			err = ws.EndInput(ctx)
		case st.kind == 'c' && st.i == len(stepEvents):
			deadline := time.Now().Add(time.Minute)
			for {
				err = task.Checkpoint(ctx, nil, int64(st.i), checkpoint.Meta{}, nil)
				if !errors.Is(err, checkpoint.ErrDeclined) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		case st.kind == 't' && played:
		default:
			continue // before the restored checkpoint
		}
		if err != nil {
			return fmt.Errorf("step %d %c%d: %w", n, st.kind, st.i, err)
		}
		if stop, err := after(n, st); stop || err != nil {
			return err
		}
	}
	return nil
}

// TestKillAtEveryStep kills (SIGKILL) a chain writing windows after each
// step of a script of early firings by Tick and by count, merges of
// sessions shown early or fired, late events allowed and refused, the end
// of the input and checkpoints: once with the rows of the step still
// buffered, once with them in ClickHouse but no checkpoint saved, and once
// more with a first replay that ticks after every event and is killed
// three steps later. A last process restores the last checkpoint and
// replays the script without its Ticks, as a run at another pace would.
// The table read with FINAL then holds exactly the windows (sessions) of
// the accepted events, for tumbling, hopping and session windows. With
// -short, only the flushed kills after every other step.
func TestKillAtEveryStep(t *testing.T) {
	// A server of its own: it may abort when a client dies, and is then
	// restarted here as a service manager would.
	var srv *testkit.ClickHouseServer
	type server struct{ Addr, Database string }
	sv := testkit.Setup(t, "server", func() server {
		srv = testkit.StartClickHouse(t)
		return server{Addr: srv.Addr(), Database: testkit.NewDatabase(t, srv.Addr())}
	})
	n := 0
	for _, kind := range []string{"tumbling", "hopping", "session"} {
		want := stepModel(t, kind)
		t.Run(kind, func(t *testing.T) {
			for killAt, st := range stepScript {
				for _, landed := range []bool{false, true} {
					if testing.Short() && (killAt%2 != 0 || !landed) {
						continue
					}
					name := fmt.Sprintf("kill after step %d (%c%d)", killAt, st.kind, st.i)
					if landed {
						name += " flushed"
					}
					n++
					table := fmt.Sprintf("w%d", n)
					t.Run(name, func(t *testing.T) {
						killAtSteps(t, srv, stepsConfig{Addr: sv.Addr, Database: sv.Database, Table: table, Kind: kind},
							[]stepsConfig{{KillAt: killAt, Landed: landed, Ticks: "script"}}, want)
					})
				}
				// Twice: the first replay ticks elsewhere and dies three
				// steps later, its rows flushed; the second has no Ticks.
				if testing.Short() || killAt+3 >= len(stepScript) {
					continue
				}
				n++
				table := fmt.Sprintf("w%d", n)
				t.Run(fmt.Sprintf("kill after step %d, then %d, flushed", killAt, killAt+3), func(t *testing.T) {
					killAtSteps(t, srv, stepsConfig{Addr: sv.Addr, Database: sv.Database, Table: table, Kind: kind},
						[]stepsConfig{{KillAt: killAt, Landed: true, Ticks: "script"}, {KillAt: killAt + 3, Landed: true, Ticks: "every"}}, want)
				})
			}
		})
	}
}

// killAtSteps runs one case: a child process per kill, each restoring
// the last checkpoint and killed (SIGKILL) after its step, then the last
// replay in this process, without Ticks. (srv is nil in the child.)
func killAtSteps(t *testing.T, srv *testkit.ClickHouseServer, base stepsConfig, kills []stepsConfig, want [][]string) {
	alive := func() {
		if _, err := testkit.QueryStrings(t.Context(), srv.Addr(), base.Database, "SELECT 1"); err != nil {
			t.Logf("clickhouse is down (%v): restarting it", err)
			srv.Restart()
		}
	}
	// The child's stepsConfig, which the test writes to Control before
	// each start.
	setKill := func(control string, k stepsConfig) {
		cfg := base
		cfg.KillAt, cfg.Landed, cfg.Ticks = k.KillAt, k.Landed, k.Ticks
		b, err := json.Marshal(cfg)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(control, "kill.json"), b, 0o644))
	}
	type dirs struct{ Dir, Control string }
	d := testkit.Setup(t, "dirs", func() dirs {
		alive()
		require.NoError(t, testkit.Exec(t.Context(), srv.Addr(), base.Database, fmt.Sprintf(sessionTable, base.Table)))
		d := dirs{Dir: t.TempDir(), Control: t.TempDir()}
		base.Dir = d.Dir
		setKill(d.Control, kills[0])
		return d
	})
	base.Dir = d.Dir
	child := testkit.Func(t, "chain", func(context.Context) error {
		b, err := os.ReadFile(filepath.Join(d.Control, "kill.json"))
		require.NoError(t, err)
		var cfg stepsConfig
		require.NoError(t, json.Unmarshal(b, &cfg))
		if err := runStepsChild(cfg); err != nil {
			return fmt.Errorf("child: %w", err)
		}
		return nil
	})
	for i, k := range kills {
		// The first child runs since Func: its output from the start, as
		// it may have reached its step already (beside another make test
		// it did, and the case waited 2 minutes for a line it had missed).
		from := 0
		if i > 0 {
			from = len(child.Logs())
			setKill(d.Control, k)
			child.Start()
		}
		// A child stuck before its step is killed too, and the case fails.
		stuck := time.Now().Add(2 * time.Minute)
		asked := false
		for !asked && child.Running() && time.Now().Before(stuck) {
			asked = strings.Contains("\n"+child.Logs()[from:], "\nkill me\n")
			if !asked {
				time.Sleep(time.Millisecond)
			}
		}
		asked = asked || strings.Contains("\n"+child.Logs()[from:], "\nkill me\n")
		child.Kill()
		require.True(t, asked, "the child reached step %d: %s", k.KillAt, child.Logs()[from:])
		alive()
	}
	// The replay: a new process restores the last checkpoint and goes on
	// with the records after it, without Ticks.
	storage, err := checkpoint.NewFSStorage(base.Dir)
	require.NoError(t, err)
	clock := time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC)
	op, err := stepOperator(base.Kind, func() time.Time { return clock })
	require.NoError(t, err)
	r := startRun(t, srv.Addr(), base.Database, base.Table, storage, op)
	defer r.close()
	next := 0
	if cp := r.task.Restored(); cp != nil {
		next = int(cp.NextOffset)
	}
	require.NoError(t, playScript(t.Context(), r.ws, r.task, next, func(int, step) (bool, error) { return false, nil }))
	got := testkit.Rows(t, srv.Addr(), base.Database, "SELECT key, toString(start), toString(end), toString(events), toString(version) FROM "+base.Table+" FINAL ORDER BY key, start")
	require.Equal(t, want, got)
}

// stepModel returns the FINAL rows the script must leave: the windows (or
// sessions) of the accepted events, computed from scratch; which events
// are late is the operator's answer, which depends on the input only.
func stepModel(t *testing.T, kind string) [][]string {
	t.Helper()
	clock := time.Unix(0, 0)
	op, err := stepOperator(kind, func() time.Time { return clock })
	require.NoError(t, err)
	var out window.Output[int, uint64]
	for _, st := range stepScript {
		switch st.kind {
		case 'a':
			require.NoError(t, op.Add(stepEvent(st.i), &out))
		case 't':
			clock = clock.Add(stepInterval)
			op.Tick(&out)
		case 'e':
			op.EndInput(&out)
		}
	}
	require.NotEmpty(t, out.Late, "the script has late events")
	deleted := slices.ContainsFunc(out.Rows, func(r window.Row[uint64]) bool { return r.Deleted })
	require.Equal(t, kind == "session", deleted, "the script merges sessions shown")

	type win struct {
		key   string
		start time.Time
	}
	late := map[win]map[int]bool{} // window -> late events (by value)
	for _, l := range out.Late {
		w := win{l.Event.Key, l.Start}
		if late[w] == nil {
			late[w] = map[int]bool{}
		}
		late[w][l.Event.Value] = true
	}
	format := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000") }
	var rows [][]string
	if kind == "session" {
		var evs []window.Event[int]
		for i := range stepEvents {
			e := stepEvent(i)
			if !late[win{e.Key, e.Time}][i] {
				evs = append(evs, e)
			}
		}
		slices.SortFunc(evs, func(a, b window.Event[int]) int { return cmp.Or(strings.Compare(a.Key, b.Key), a.Time.Compare(b.Time)) })
		const gap = 10 * time.Second
		for i := 0; i < len(evs); {
			j := i + 1
			for j < len(evs) && evs[j].Key == evs[i].Key && evs[j].Time.Sub(evs[j-1].Time) <= gap {
				j++
			}
			n := fmt.Sprint(j - i)
			rows = append(rows, []string{evs[i].Key, format(evs[i].Time), format(evs[j-1].Time.Add(gap)), n, n})
			i = j
		}
		return rows
	}
	size, slide := 10*time.Second, 10*time.Second
	if kind == "hopping" {
		size = 20 * time.Second
	}
	counts := map[win]int{}
	for i := range stepEvents {
		e := stepEvent(i)
		first := e.Time.Truncate(slide) // the epoch is a multiple of the slide
		for s := first; s.After(e.Time.Add(-size)); s = s.Add(-slide) {
			if !late[win{e.Key, s}][i] {
				counts[win{e.Key, s}]++
			}
		}
	}
	for w, n := range counts {
		rows = append(rows, []string{w.key, format(w.start), format(w.start.Add(size)), fmt.Sprint(n), fmt.Sprint(n)})
	}
	slices.SortFunc(rows, func(a, b []string) int { return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1])) })
	return rows
}
