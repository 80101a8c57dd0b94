package chsink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/testkit"
)

// aheadConfig is the processor of TestFlushAheadKilled: records [from
// checkpoint, End) at Rate records/s, a barrier every Interval.
type aheadConfig struct {
	Addr, Database string
	Dir            string // journal (FSStorage) and the checkpoint file
	End            int64
	Rate           int
	Interval       time.Duration
}

// aheadCheckpoint is the processor's checkpoint: the next record and the
// sink's state, written atomically after each Snapshot.
type aheadCheckpoint struct {
	ID     checkpoint.ID `json:"id"`
	Next   int64         `json:"next"`
	State  []byte        `json:"state"`
	Exists bool          `json:"-"`
}

// runAheadChild is the processor process of TestFlushAheadKilled. It
// prints, in order as they happen: "barrier <id> <next>" when a barrier
// reaches the chain, "checkpoint <id> <next>" once that checkpoint is
// durable, "ahead" when the flush timer journals a batch ahead of a barrier,
// "written <rows>" when ClickHouse acknowledged a batch (and the test's
// Func prints "done" at the end).
func runAheadChild(t *testing.T, cfg aheadConfig) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	storage, err := checkpoint.NewFSStorage(filepath.Join(cfg.Dir, "storage"))
	if err != nil {
		return err
	}
	ckptFile := filepath.Join(cfg.Dir, "checkpoint.json")
	var cp aheadCheckpoint
	if b, err := os.ReadFile(ckptFile); err == nil {
		if err := json.Unmarshal(b, &cp); err != nil {
			return err
		}
		cp.Exists = true
	}
	// MaxDelay beyond the run: only the flush ahead and the barrier flush.
	// The parent restarts ClickHouse when it aborts (see
	// TestFlushAheadKilled): connecting and inserting ride that out.
	var s *chsink.Sink[event]
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		s, err = chsink.New(ctx, chsink.Table{Addr: cfg.Addr, Name: "events"}, checkpoint.TopicPartition{Topic: "events"},
			storage, eventSchema, chsink.Options{Database: cfg.Database, MaxDelay: time.Hour, FlushAheadMinRows: 50,
				MaxAttempts: 31, MaxBackoff: time.Second,
				DistinctViewRows: true}) // kind_counts: this sink is its one writer
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	defer s.Close()
	s.SetHooks(func() {
		if inSinkRun() { // a flush of the timer: with MaxDelay an hour, only a flush ahead
			fmt.Println("ahead")
		}
	}, nil)
	s.SetAfterWrite(func(rows int) { fmt.Printf("written %d\n", rows) })
	if cp.Exists {
		if err := s.Restore(ctx, cp.State); err != nil {
			return err
		}
	}
	runDone := make(chan error, 1)
	go func() { runDone <- s.Run(ctx) }()

	barrier := func() error {
		cp.ID++
		fmt.Printf("barrier %d %d\n", cp.ID, cp.Next)
		state, err := s.Snapshot(ctx, cp.ID)
		if errors.Is(err, checkpoint.ErrDeclined) {
			// The barrier fell inside a journaled batch being replayed, as
			// the coordinator would, the chain skips this checkpoint.
			fmt.Printf("declined %d\n", cp.ID)
			return nil
		}
		if err != nil {
			return err
		}
		cp.State = state
		b, err := json.Marshal(cp)
		if err != nil {
			return err
		}
		if err := writeFileSync(ckptFile, b); err != nil {
			return err
		}
		fmt.Printf("checkpoint %d %d\n", cp.ID, cp.Next)
		return s.CheckpointCompleted(ctx, cp.ID)
	}
	fedFile := filepath.Join(cfg.Dir, "fed")
	var fedMax int64
	if b, err := os.ReadFile(fedFile); err == nil {
		if fedMax, err = strconv.ParseInt(string(b), 10, 64); err != nil {
			return err
		}
	}
	start, from := time.Now(), cp.Next
	next := start.Add(cfg.Interval)
	for cp.Next < cfg.End {
		now := time.Now()
		if !now.Before(next) {
			if err := barrier(); err != nil {
				return err
			}
			next = next.Add(cfg.Interval)
			continue
		}
		due := min(cfg.End, from+int64(now.Sub(start).Seconds()*float64(cfg.Rate)))
		if cp.Next >= due {
			time.Sleep(time.Millisecond)
			continue
		}
		// The parent sets the final run's end past every record a killed
		// run fed; the page cache keeps this across a kill -9.
		if due > fedMax { // renamed into place: a kill never leaves it empty
			if err := os.WriteFile(fedFile+".tmp", []byte(strconv.FormatInt(due, 10)), 0o644); err != nil {
				return err
			}
			if err := os.Rename(fedFile+".tmp", fedFile); err != nil {
				return err
			}
			fedMax = due
		}
		if err := feed(ctx, t, s, cp.Next, due); err != nil {
			return err
		}
		cp.Next = due
	}
	if err := barrier(); err != nil {
		return err
	}
	cancel()
	if err := <-runDone; err != nil && err != context.Canceled {
		return err
	}
	return nil
}

// writeFileSync replaces name with data durably: a temporary file, fsync,
// rename, fsync of the directory.
func writeFileSync(name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// aheadProc is the processor process, with how far the test has read its
// output.
type aheadProc struct {
	p   *testkit.Process
	pos int      // bytes of the logs read
	out []string // lines read
}

// until reads lines until one satisfies ok, and returns it.
func (p *aheadProc) until(t *testing.T, ok func(string) bool) string {
	t.Helper()
	timeout := time.Now().Add(60 * time.Second)
	for {
		exited := !p.p.Running()
		logs := p.p.Logs()
		for {
			i := strings.IndexByte(logs[p.pos:], '\n')
			if i < 0 {
				break
			}
			l := logs[p.pos : p.pos+i]
			p.pos += i + 1
			p.out = append(p.out, l)
			if strings.HasPrefix(l, "error") {
				t.Fatalf("processor failed: %s", l)
			}
			if ok(l) {
				return l
			}
		}
		if exited {
			t.Fatalf("processor exited; it printed:\n%s", strings.Join(p.out, "\n"))
		}
		if time.Now().After(timeout) {
			t.Fatalf("processor printed nothing expected in 60s:\n%s", strings.Join(p.out, "\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

// start starts the processor again, reading its output from there.
func (p *aheadProc) start() {
	p.pos, p.out = len(p.p.Logs()), nil
	p.p.Start()
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *aheadProc) kill9() { p.p.Kill() }

// TestFlushAheadKilled kills a processor with SIGKILL at each moment a
// flush ahead of a barrier opens: just as the flush timer journals the
// batch (the intent may or may not be durable, the insert has not
// started), while its insert runs, once ClickHouse acknowledged it but no
// checkpoint covers it yet, and in the middle of the barrier that follows
// (the tail being inserted after it). Each time the processor restarts
// from its last durable checkpoint and replays the records after it; in the
// end the table and its materialized view hold every row exactly once. An
// insert that started before its intent was durable, or a replay that cut
// the records into other batches than the ones flushed ahead (so under
// other tokens), would leave duplicates; a barrier that did not wait for
// the batch flushed ahead would lose rows.
func TestFlushAheadKilled(t *testing.T) {
	// The End of the next run, which the test writes before each start.
	setEnd := func(dir string, end int64) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "end"), []byte(strconv.FormatInt(end, 10)), 0o644))
	}
	var env chEnv
	cfg := testkit.Setup(t, "cfg", func() aheadConfig {
		srv := superviseClickHouse(t)
		db := testkit.NewDatabase(t, srv.Addr())
		env = srv.env(t, db)
		env.exec(t, fmt.Sprintf(eventsDDL, db))
		env.withRollup(t)
		c := aheadConfig{
			Addr: env.addr, Database: env.db, Dir: t.TempDir(),
			End: 1 << 40, Rate: 10_000, Interval: 150 * time.Millisecond, // killed runs never reach End
		}
		setEnd(c.Dir, c.End)
		return c
	})
	proc := &aheadProc{p: testkit.Func(t, "processor", func(context.Context) error {
		b, err := os.ReadFile(filepath.Join(cfg.Dir, "end"))
		require.NoError(t, err)
		c := cfg
		c.End, err = strconv.ParseInt(string(b), 10, 64)
		require.NoError(t, err)
		if err := runAheadChild(t, c); err != nil {
			fmt.Printf("error %v\n", err)
			return err
		}
		fmt.Println("done")
		return nil
	})}
	db := cfg.Database
	count := func(q string) uint64 { t.Helper(); return env.count(t, q) }
	isAhead := func(l string) bool { return l == "ahead" }
	kills := []struct {
		name  string
		after func(t *testing.T, p *aheadProc)
	}{
		{"as the batch is journaled", func(t *testing.T, p *aheadProc) { p.until(t, isAhead) }},
		{"while it is inserted", func(t *testing.T, p *aheadProc) {
			p.until(t, isAhead)
			time.Sleep(2 * time.Millisecond)
		}},
		{"after ClickHouse acknowledged it, before a checkpoint covers it", func(t *testing.T, p *aheadProc) {
			p.until(t, isAhead)
			p.until(t, func(l string) bool { return strings.HasPrefix(l, "written") })
		}},
		{"during the barrier after it", func(t *testing.T, p *aheadProc) {
			p.until(t, isAhead)
			p.until(t, func(l string) bool { return strings.HasPrefix(l, "barrier") })
		}},
	}
	var beyond []uint64 // rows in ClickHouse past the last checkpoint when killed
	for round, k := range kills {
		p := proc
		if round > 0 {
			p.start()
		}
		// Let the sink learn the cadence and flush ahead once or twice
		// before the moment of the kill.
		for range round%2 + 1 {
			p.until(t, isAhead)
		}
		k.after(t, p)
		p.kill9()
		t.Logf("round %d: killed %s", round, k.name)
		var cp aheadCheckpoint
		if b, err := os.ReadFile(filepath.Join(cfg.Dir, "checkpoint.json")); err == nil {
			require.NoError(t, json.Unmarshal(b, &cp))
		}
		if got, want := count("SELECT count() FROM "+db+".events"), uint64(expectedRows(0, cp.Next)); got > want {
			beyond = append(beyond, got-want)
		}
	}
	// Rows written ahead of a checkpoint were in ClickHouse when a process
	// died: the replay had to deduplicate them, not only fill a gap.
	require.NotEmpty(t, beyond, "no kill left rows past the checkpoint in ClickHouse")
	t.Logf("rows in ClickHouse past the last checkpoint at the kills: %v", beyond)

	// The last run goes a second past every record fed before.
	raw, err := os.ReadFile(filepath.Join(cfg.Dir, "fed"))
	require.NoError(t, err)
	fed, err := strconv.ParseInt(string(raw), 10, 64)
	require.NoError(t, err)
	cfg.End = fed + int64(cfg.Rate)
	setEnd(cfg.Dir, cfg.End)
	proc.start()
	proc.until(t, func(l string) bool { return l == "done" })
	assert.NoError(t, proc.p.Wait(time.Minute), "the last run exits 0")
	want := uint64(expectedRows(0, cfg.End))
	assert.Equal(t, want, count("SELECT count() FROM "+db+".events"), "rows")
	assert.Equal(t, want, count("SELECT uniqExact(id) FROM "+db+".events"), "distinct rows")
	assert.Equal(t, want, count("SELECT sum(n) FROM "+db+".kind_counts"), "rollup total")
}
