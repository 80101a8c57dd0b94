package window_test

import (
	"context"
	"fmt"
	"time"

	"github.com/exactlyonce/exactlyonce/window"
)

func Example() {
	op, err := window.New(window.Tumbling(time.Minute), window.Avg[float64]{}, window.Options{
		MaxOutOfOrderness: 10 * time.Second,
		AllowedLateness:   time.Minute,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	var out window.Output[float64, float64]
	for _, e := range []struct {
		at time.Duration
		v  float64
	}{
		{10 * time.Second, 100},
		{40 * time.Second, 300},
		{75 * time.Second, 50},  // watermark 65s: [15:00, 15:01) fires
		{30 * time.Second, 200}, // late, within allowed lateness: re-emitted
		{3 * time.Minute, 0},    // watermark 170s: [15:01, 15:02) fires; [15:00, 15:01) closes
		{20 * time.Second, 999}, // too late: handed back, not dropped
	} {
		if err := op.Add(window.Event[float64]{Key: "alice", Time: t0.Add(e.at), Value: e.v}, &out); err != nil {
			fmt.Println(err)
			return
		}
	}
	for _, r := range out.Rows {
		fmt.Printf("%s [%s, %s) version %d avg %v\n", r.Key, r.Start.Format("15:04"), r.End.Format("15:04"), r.Version, r.Result)
	}
	for _, l := range out.Late {
		fmt.Printf("late: %v for [%s, %s)\n", l.Event.Value, l.Start.Format("15:04"), l.End.Format("15:04"))
	}
	// Output:
	// alice [15:00, 15:01) version 2 avg 200
	// alice [15:00, 15:01) version 3 avg 200
	// alice [15:01, 15:02) version 1 avg 50
	// late: 999 for [15:00, 15:01)
}

// An average of no samples is absent, not 0.
func ExampleAvg() {
	var avg window.Avg[float64]
	_, ok := avg.Result(avg.Identity())
	fmt.Println("no samples:", ok)
	v, ok := avg.Result(avg.Add(avg.Add(avg.Identity(), 3), 5))
	fmt.Println("3 and 5:", v, ok)
	// Output:
	// no samples: false
	// 3 and 5: 4 true
}

// A partition chain checkpoints the operator and a replacement restores it.
func ExampleOperator_Snapshot() {
	spec, agg := window.Tumbling(time.Hour), window.Count[string]{}
	op, _ := window.New(spec, agg, window.Options{})
	var out window.Output[string, uint64]
	t0 := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	_ = op.Add(window.Event[string]{Key: "repo-1", Time: t0, Value: "push"}, &out)
	state, _ := op.Snapshot(context.Background(), 1)

	restored, _ := window.New(spec, agg, window.Options{})
	if err := restored.Restore(context.Background(), state); err != nil {
		fmt.Println(err)
	}
	fmt.Println("open windows:", restored.Counters().OpenWindows)
	// Output:
	// open windows: 1
}

// Early firings show an hour's partial result while it fills: every two
// events here (EarlyFiring.Interval does the same on processing time). In a
// ReplacingMergeTree(version) table the final row replaces the partial ones.
func ExampleEarlyFiring() {
	op, _ := window.New(window.Tumbling(time.Hour), window.Count[string]{}, window.Options{
		MaxOutOfOrderness: time.Minute,
		Early:             window.EarlyFiring{Every: 2},
	})
	t0 := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	var out window.Output[string, uint64]
	for _, m := range []time.Duration{5, 10, 20, 30, 50, 62} {
		_ = op.Add(window.Event[string]{Key: "alice", Time: t0.Add(m * time.Minute), Value: "pr.merged"}, &out)
	}
	for _, r := range out.Rows {
		fmt.Printf("%s [%s, %s) version %d count %d early %v\n", r.Key, r.Start.Format("15:04"), r.End.Format("15:04"), r.Version, r.Result, r.Early)
	}
	// Output:
	// alice [15:00, 16:00) version 2 count 2 early true
	// alice [15:00, 16:00) version 4 count 4 early true
	// alice [15:00, 16:00) version 5 count 5 early false
}

// At the end of a bounded input (a backfill), EndInput fires every window
// still open, without waiting for idleness or the wall clock.
func ExampleOperator_EndInput() {
	op, _ := window.New(window.Tumbling(time.Hour), window.Sum[int64]{}, window.Options{})
	t0 := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	var out window.Output[int64, int64]
	for i, m := range []time.Duration{10, 70, 75} {
		_ = op.Add(window.Event[int64]{Key: "repo-1", Time: t0.Add(m * time.Minute), Value: int64(i + 1)}, &out)
	}
	fmt.Println("before:", len(out.Rows), "rows")
	op.EndInput(&out)
	for _, r := range out.Rows {
		fmt.Printf("%s [%s, %s) sum %d\n", r.Key, r.Start.Format("15:04"), r.End.Format("15:04"), r.Result)
	}
	// Output:
	// before: 1 rows
	// repo-1 [15:00, 16:00) sum 1
	// repo-1 [16:00, 17:00) sum 5
}

// Session windows: per key, events less than the gap apart form one
// session. A late event that bridges two sessions merges them: the later
// session's row is retracted (Deleted) and the merged one replaces the
// earlier, so a ReplacingMergeTree(Version, Deleted) read with FINAL holds
// exactly the final sessions.
func ExampleSession() {
	op, err := window.New(window.Session(10*time.Minute), window.Count[string]{}, window.Options{
		MaxOutOfOrderness: time.Minute,
		AllowedLateness:   time.Hour,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t0 := time.Date(2026, 10, 28, 15, 0, 0, 0, time.UTC)
	var out window.Output[string, uint64]
	for _, at := range []time.Duration{
		0, 5 * time.Minute, // one session [15:00, 15:15)
		20 * time.Minute, // another; watermark 15:19: the first fires
		50 * time.Minute, // watermark 15:49: [15:20, 15:30) fires
		12 * time.Minute, // late, within the lateness: bridges the two
	} {
		if err := op.Add(window.Event[string]{Key: "alice", Time: t0.Add(at), Value: "click"}, &out); err != nil {
			fmt.Println(err)
			return
		}
	}
	op.EndInput(&out)
	for _, r := range out.Rows {
		if r.Deleted {
			fmt.Printf("%s [%s, %s) version %d deleted\n", r.Key, r.Start.Format("15:04"), r.End.Format("15:04"), r.Version)
			continue
		}
		fmt.Printf("%s [%s, %s) version %d count %d\n", r.Key, r.Start.Format("15:04"), r.End.Format("15:04"), r.Version, r.Result)
	}
	// Output:
	// alice [15:00, 15:15) version 2 count 2
	// alice [15:20, 15:30) version 1 count 1
	// alice [15:20, 15:30) version 4 deleted
	// alice [15:00, 15:30) version 4 count 4
	// alice [15:50, 16:00) version 1 count 1
}
