package sim

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pendingFix is the ONE place that says which breaches of issue 41 are
// not fixed on this branch, and the branch whose fix closes each. While a
// breach is listed, its check in TestSimulation is skipped (it fails on
// today's code) and TestFindsBreaches proves the simulation finds it;
// remove the entry once the fix is merged (and the stand-in that mirrors
// the fixed code is updated, see doc.go), and the check runs.
// SIM_BREACHES=1 runs every check regardless.
func pendingFix(breach string) (branch string, pending bool) {
	switch breach {
	case "breach3_lost_part_identity":
		// The fix refuses this shape (a plain MergeTree view target
		// without Options.DistinctViewRows) at New: after the merge the
		// scenario shows a configuration chsink no longer accepts; keep
		// it skipped. lost_part_distinct_rows checks the shape it
		// accepts.
		return "lostpart (which refuses this table shape at start-up)", true
	}
	return "", false
}

// scenarios are the checks: each runs seeds of its Config and fails on the
// first violation. baseline holds the faults every guarantee covers; each
// breach adds the faults that expose it.
var scenarios = []struct {
	name string
	cfg  Config
}{
	{"no_faults", Config{}},
	{"baseline", Config{Faults: true}},
	{"breach1_txn_expiry", Config{Faults: true, TxnExpiry: true}},
	{"breach2_session_retraction", Config{Faults: true, EarlyTicks: true}},
	{"breach3_lost_part_identity", Config{Faults: true, SecondWriter: true}},
	{"lost_part_distinct_rows", Config{Faults: true, SecondWriter: true, DistinctViewRows: true}},
	{"zombie_owner", Config{Faults: true, Zombies: true}},
	{"all", Config{Faults: true, TxnExpiry: true, EarlyTicks: true, SecondWriter: true, DistinctViewRows: true, Zombies: true}},
}

func skipPending(t *testing.T, name string) {
	t.Helper()
	if os.Getenv("SIM_BREACHES") != "" {
		return
	}
	if name == "all" {
		for _, b := range []string{"breach1_txn_expiry", "breach2_session_retraction", "zombie_owner"} {
			if _, p := pendingFix(b); p {
				t.Skipf("all faults together: waits for the fix of %s", b)
			}
		}
	}
	if b, p := pendingFix(name); p {
		t.Skipf("%s: waits for the fix on branch %s", name, b)
	}
}

// seeds returns how many seeds a check runs: SIM_SEEDS (the long mode,
// make sim), else 500, 300 under -short (about 10 s of CPU for every
// scenario), or 100 under the race detector (make test).
func seeds(t *testing.T) int {
	t.Helper()
	if s := os.Getenv("SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("SIM_SEEDS=%q: want a positive number", s)
		}
		return n
	}
	switch {
	case raceEnabled:
		return 100
	case testing.Short():
		return 300
	}
	return 500
}

// TestSimulation runs every scenario over many seeds and reports the first
// seed that violates the reference model, with its trace and the command
// that replays it. SIM_SEED=n runs seed n alone and logs its trace.
func TestSimulation(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			skipPending(t, sc.name)
			if s := os.Getenv("SIM_SEED"); s != "" {
				seed, err := strconv.ParseUint(s, 10, 64)
				if err != nil {
					t.Fatalf("SIM_SEED=%q: %v", s, err)
				}
				cfg := sc.cfg
				if s := os.Getenv("SIM_RECORDS"); s != "" {
					if cfg.Records, err = strconv.Atoi(s); err != nil {
						t.Fatalf("SIM_RECORDS=%q: %v", s, err)
					}
				}
				r := Run(seed, cfg)
				t.Log(r.Report())
				if r.Failed() {
					t.Fatalf("seed %d violates the reference model", seed)
				}
				return
			}
			n := seeds(t)
			start := time.Now()
			for seed := uint64(1); seed <= uint64(n); seed++ {
				if r := Run(seed, sc.cfg); r.Failed() {
					t.Errorf("seed %d: %v\nreplay: SIM_SEED=%d go test -run 'TestSimulation/%s$' ./harness/internal/sim/", seed, r.Violations, seed, sc.name)
					if m := Shrink(r, 300); m != r {
						t.Errorf("a shorter run with the same violation: seed %d, %d records (SIM_SEED=%d SIM_RECORDS=%d):\n%s",
							m.Seed, m.Config.Records, m.Seed, m.Config.Records, m.Report())
						return
					}
					t.Fatal(r.Report())
				}
			}
			d := time.Since(start)
			t.Logf("%d seeds in %v: %.0f seeds/s", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
		})
	}
}

// TestFindsBreaches proves that the simulation finds each breach not yet
// fixed, at a recorded seed, as the violation that breach causes. A seed
// whose breach is fixed is a regression test instead: it has a witness,
// lines of its trace (in order) that show it still reaches the situation
// the breach needed, and must now end without any violation.
func TestFindsBreaches(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		seed    uint64
		kind    Kind
		sink    string
		witness []string
	}{
		// The partition's first saved checkpoint (ID 2, an earlier
		// barrier declined) loses its transaction during the save: it
		// descends from a fresh start, so the restore starts fresh. Before
		// the fix: stuck (no older checkpoint), records lost in Kafka.
		{"breach1_txn_expiry", Config{Records: 8, Faults: true, TxnExpiry: true}, 51, KindStuck, "checkpoint",
			[]string{"NOTE checkpoint 2 (proc 1 gen 1, offset 8) saved with transaction 1 aborted", "proc 2 gen 1: fresh start"}},
		// Retries of one checkpoint under many generations, each saved and
		// then lost, outnumber Keep: retention keeps the checkpoint they
		// descend from. Before the fix it was pruned: stuck.
		{"breach1_txn_expiry", Config{Faults: true, TxnExpiry: true}, 47, KindStuck, "checkpoint",
			[]string{"NOTE checkpoint 4 (proc 24 gen 16, offset 21) saved with transaction 12 aborted", "proc 25 gen 16: restored checkpoint 1 at offset 0"}},
		// A session shown early by an early firing, crash, the replay
		// does not show it, a later event merges it: no retraction.
		// Since its fix the session shown early is retracted.
		{"breach2_session_retraction", Config{Faults: true, EarlyTicks: true}, 23, KindWrongResult, "sessions",
			[]string{"sessions: insert k2[00:00:06.238,00:00:22.916)v3", "proc 3 gen 2: restored checkpoint 2 at offset 5", "deleted k2[00:00:06.238,00:00:22.916)v3"}},
		// A crash loses the view's part of a batch, another writer's
		// equal block takes its name, the re-insert's check passes.
		{"breach3_lost_part_identity", Config{Faults: true, SecondWriter: true}, 9, KindLoss, "hourly", nil},
		// A revoked owner keeps a pre-committed transaction while the new
		// owner starts fresh; its producer used to start at its first
		// write, so the revoked owner's commit went through and the
		// replay wrote its records again. Now Start fences it at Attach.
		{"zombie_owner", Config{Faults: true, Zombies: true}, 228, KindDuplicate, "kafka",
			[]string{"proc 5: revoked; it goes on until it learns", "kafka: InitProducerID of sim-in-0: pid 1001 epoch 5", "proc 6 gen 5: fresh start"}},
		// A revoked owner takes a barrier and saves it (no records, so no
		// transaction to lose) after the new owner's checkpoint 2, under
		// a higher ID (its declined barriers used IDs): restores started
		// from it, behind the new owner's committed output. Now the save
		// is refused (checkpoint.ErrSuperseded).
		{"zombie_owner", Config{Faults: true, Zombies: true}, 670, KindDuplicate, "kafka",
			[]string{"proc 9: revoked; it goes on until it learns", "proc 10: saved checkpoint 2 at offset 11",
				"proc 9: checkpoint failed: checkpoint 3 of in/0: save: checkpoint: a later owner of the partition saved a checkpoint"}},
		// A revoked owner's save passes its check, then waits at the
		// storage while the new owner saves its first checkpoint, and
		// lands after it under a higher ID (3 after 1). Restores started
		// from it; now they skip it.
		{"zombie_owner", Config{Faults: true, Zombies: true}, 6038, KindDuplicate, "kafka",
			[]string{"proc 4: revoked; it goes on until it learns", "proc 5: saved checkpoint 1 at offset 2",
				"proc 4: saved checkpoint 3 at offset 0", "proc 6 gen 6: restored checkpoint 1 at offset 2"}},
		// Not the SDK's breach but the stand-in's: a revoked owner's
		// window sink wrote a session into the table after the new
		// owner's sink had claimed the table's journal, which the real
		// windowsink refuses (sink.ErrFenced); the new owner merged the
		// session away without a retraction. winSink now claims and
		// fences as windowsink's journal does.
		{"all", Config{Faults: true, TxnExpiry: true, EarlyTicks: true, SecondWriter: true, DistinctViewRows: true, Zombies: true},
			4, KindWrongResult, "sessions",
			[]string{"proc 4: revoked; it goes on until it learns", "proc 4: chain failed: sessions: windowsink model: journal claimed by a later owner"}},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+strconv.FormatUint(tt.seed, 10), func(t *testing.T) {
			r := Run(tt.seed, tt.cfg)
			if tt.witness == nil {
				if _, p := pendingFix(tt.name); !p {
					t.Fatalf("%s is fixed: give seed %d the trace lines that show it still reaches the breach's situation", tt.name, tt.seed)
				}
				if !r.Has(tt.kind, tt.sink) {
					t.Fatalf("seed %d no longer finds %s in %s:\n%s", tt.seed, tt.kind, tt.sink, r.Report())
				}
				return
			}
			if r.Failed() {
				t.Fatalf("seed %d, which found %s in %s before the fix, fails again:\n%s", tt.seed, tt.kind, tt.sink, r.Report())
			}
			i := 0
			for _, l := range r.Trace {
				if i < len(tt.witness) && strings.Contains(l, tt.witness[i]) {
					i++
				}
			}
			if i < len(tt.witness) {
				t.Fatalf("seed %d no longer reaches the situation of %s (trace line %q missing, in order): record a seed that does:\n%s",
					tt.seed, tt.name, tt.witness[i], r.Report())
			}
		})
	}
}

// TestDeterministic checks that a seed replays exactly: the same trace,
// line for line, run after run, with every fault on.
func TestDeterministic(t *testing.T) {
	cfg := Config{Faults: true, TxnExpiry: true, EarlyTicks: true, SecondWriter: true, Zombies: true}
	for seed := uint64(1); seed <= 100; seed++ {
		a, b := Run(seed, cfg), Run(seed, cfg)
		if !slices.Equal(a.Trace, b.Trace) {
			for i := range min(len(a.Trace), len(b.Trace)) {
				if a.Trace[i] != b.Trace[i] {
					t.Fatalf("seed %d: traces differ at line %d:\n%s\n%s", seed, i, a.Trace[i], b.Trace[i])
				}
			}
			t.Fatalf("seed %d: traces differ in length: %d, %d", seed, len(a.Trace), len(b.Trace))
		}
	}
}

// TestReference checks the reference model against the real operator on a
// run without faults: the sessions computed from the input alone are what
// the window operator's rows leave in the table.
func TestReference(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		r := Run(seed, Config{Records: 200})
		if r.Failed() {
			t.Fatal(r.Report())
		}
		if !slices.ContainsFunc(r.Trace, func(l string) bool { return strings.Contains(l, "saved checkpoint") }) {
			t.Fatalf("seed %d saved no checkpoint", seed)
		}
	}
}

// TestShrink checks that a violation found in a long run is shown again by
// a shorter one.
func TestShrink(t *testing.T) {
	// The lost part of breach 3, whose shape stays in the simulation (the
	// fix refuses it at start-up, see pendingFix), so it stays found.
	r := Run(9, Config{Faults: true, SecondWriter: true})
	if !r.Has(KindLoss, "hourly") {
		t.Fatalf("seed 9 no longer finds breach 3's loss in the view: give TestShrink a violation the simulation still finds:\n%s", r.Report())
	}
	m := Shrink(r, 300)
	if !m.Has(KindLoss, "hourly") || m.Config.Records >= r.Config.Records || len(m.Trace) >= len(r.Trace) {
		t.Fatalf("shrink of %d records (%d lines) gave %d records (%d lines)", r.Config.Records, len(r.Trace), m.Config.Records, len(m.Trace))
	}
	t.Logf("%d records, %d lines -> seed %d, %d records, %d lines", r.Config.Records, len(r.Trace), m.Seed, m.Config.Records, len(m.Trace))
}
