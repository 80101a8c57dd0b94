package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Figure is one headline row of the report: a figure, the baseline it is
// read against (a figure of the same run), and the target if one was
// set, as a ratio to the baseline (MinRatio, MaxRatio) or as a value
// (AtLeast, AtMost).
type Figure struct {
	Label     string
	Key       Key
	Base      *Key
	BaseLabel string
	MinRatio  float64 // the ratio must reach this (0: no such target)
	MaxRatio  float64 // the ratio must stay below this (0: none)
	AtLeast   float64 // the value must reach this (0: none)
	Target    string  // the target in words, for the table
}

// Section is a group of figures with a sentence on how they were measured.
type Section struct {
	Title   string
	How     string
	Figures []Figure
}

func key(pkg, bench, unit string) Key { return Key{Pkg: pkg, Bench: bench, Unit: unit} }

func ref(pkg, bench, unit string) *Key { k := key(pkg, bench, unit); return &k }

// vs is a figure read against a baseline of the same unit.
func vs(label, pkg, bench, unit, baseLabel, baseBench string) Figure {
	return Figure{Label: label, Key: key(pkg, bench, unit), Base: ref(pkg, baseBench, unit), BaseLabel: baseLabel}
}

// sections lists the report's headline figures. Sections whose benchmarks
// take a size knob (BenchmarkRecovery's RECOVERY_KEYS) are built from the
// names found in the results.
func sections(r *Results) []Section {
	const (
		e2e   = "examples/processor"
		e2eB  = "BenchmarkEndToEnd"
		ins   = "BenchmarkInsert/"
		vsCH  = "BenchmarkSinkVsClickHouseGo/"
		obs   = "BenchmarkObserve/"
		thr   = "BenchmarkThroughput/"
		chg   = "BenchmarkCheckpointDedupChanged/"
		cpd   = "BenchmarkCheckpointDedup/"
		gw    = "BenchmarkGateway/"
		fp    = "BenchmarkFlushPolicy/"
		kpkg  = "checkpoint/kafkasource"
		cpkg  = "checkpoint"
		bpkg  = "bench"
		spkg  = "sink/chsink"
		e2eMB = "E2E_EVENTS events on 4 partitions (see the run notes), medians of E2E_ROUNDS rounds per run"
	)
	share := func(v, desc string) Figure {
		f := Figure{Label: desc + ", share of raw", Key: key(e2e, e2eB, v+"-%raw")}
		if v == "chain" {
			f.AtLeast, f.Target = 50, "≥ 50 % of raw in the same run (issue 13)"
		}
		return f
	}
	out := []Section{
		{
			Title: "End to end: the example's chain beside raw kafka-go (examples/processor BenchmarkEndToEnd)",
			How:   "kafkasource → event decoder → dedup → one-minute windows → two chsinks, against Kafka (kfake) and ClickHouse each in its own process; " + e2eMB + ".",
			Figures: []Figure{
				{Label: "raw kafka-go (a)", Key: key(e2e, e2eB, "raw-ev/s")},
				// The target is the share within a run (the next
				// row): a ratio of medians pairs runs that met other loads.
				{Label: "chain, 1 s checkpoints", Key: key(e2e, e2eB, "chain-ev/s"), Base: ref(e2e, e2eB, "raw-ev/s"), BaseLabel: "raw kafka-go"},
				share("chain", "chain, 1 s checkpoints"),
				{Label: "chain, checkpoints off (b)", Key: key(e2e, e2eB, "chain-nockpt-ev/s"), Base: ref(e2e, e2eB, "raw-ev/s"), BaseLabel: "raw kafka-go"},
				{Label: "chain per record, 1 s checkpoints", Key: key(e2e, e2eB, "chain-record-ev/s"), Base: ref(e2e, e2eB, "raw-ev/s"), BaseLabel: "raw kafka-go"},
				{Label: "chain CPU per event, this process", Key: key(e2e, e2eB, "chain-cpu-ns/ev"), Base: ref(e2e, e2eB, "raw-cpu-ns/ev"), BaseLabel: "raw kafka-go"},
				{Label: "chain CPU per event, ClickHouse", Key: key(e2e, e2eB, "chain-ch-ns/ev")},
				{Label: "chain allocations per event", Key: key(e2e, e2eB, "chain-allocs/ev"), Base: ref(e2e, e2eB, "raw-allocs/ev"), BaseLabel: "raw kafka-go"},
				vs("event decoder, one record", e2e, "BenchmarkDecodeEvent/eventDecoder", "ns/op", "kafkapub.ReadMetadata + string(key)", "BenchmarkDecodeEvent/ReadMetadata"),
			},
		},
		{
			Title: "Sink beside raw ch-go and clickhouse-go v2 (nested module bench/, BenchmarkSinkVsClickHouseGo)",
			How:   "The same batches of 50,000 rows into a dedicated embedded ClickHouse 26.7, a table per variant; the sink completes a checkpoint per batch.",
			Figures: []Figure{
				{Label: "raw ch-go, columns (floor)", Key: key(bpkg, vsCH+"raw-ch-go", "rows/s")},
				vs("chsink, journal on FSStorage", bpkg, vsCH+"chsink-fsjournal", "rows/s", "raw ch-go", vsCH+"raw-ch-go"),
				vs("chsink, journal on MemoryStorage", bpkg, vsCH+"chsink-memjournal", "rows/s", "raw ch-go", vsCH+"raw-ch-go"),
				vs("clickhouse-go v2, Append per row", bpkg, vsCH+"clickhouse-go-append", "rows/s", "raw ch-go", vsCH+"raw-ch-go"),
				vs("clickhouse-go v2, Column(i).Append", bpkg, vsCH+"clickhouse-go-columnar", "rows/s", "raw ch-go", vsCH+"raw-ch-go"),
				vs("chsink (FSStorage) beside clickhouse-go's row API", bpkg, vsCH+"chsink-fsjournal", "rows/s", "clickhouse-go Append", vsCH+"clickhouse-go-append"),
				vs("chsink (FSStorage), client CPU per row", bpkg, vsCH+"chsink-fsjournal", "client-cpu-ns/row", "clickhouse-go Append", vsCH+"clickhouse-go-append"),
				vs("chsink (FSStorage), allocations per row", bpkg, vsCH+"chsink-fsjournal", "allocs/row", "clickhouse-go Append", vsCH+"clickhouse-go-append"),
			},
		},
		{
			Title: "Sink beside raw ch-go (sink/chsink BenchmarkInsert)",
			How:   "Batches of 50,000 rows, a table per variant; checkpoint per batch, or per ten batches (-ckpt10).",
			Figures: []Figure{
				{Label: "raw ch-go, deduplication off", Key: key(spkg, ins+"raw-ch-go", "rows/s")},
				vs("sink, FSStorage journal, checkpoint per batch", spkg, ins+"sink-fsjournal", "rows/s", "raw ch-go", ins+"raw-ch-go"),
				vs("sink, FSStorage journal, checkpoint per 10 batches", spkg, ins+"sink-fsjournal-ckpt10", "rows/s", "raw ch-go", ins+"raw-ch-go"),
				vs("sink, MemoryStorage journal, checkpoint per batch", spkg, ins+"sink-memjournal", "rows/s", "raw ch-go", ins+"raw-ch-go"),
				vs("sink, FSStorage journal, client CPU per batch", spkg, ins+"sink-fsjournal", "cpu-ms/batch", "raw ch-go", ins+"raw-ch-go"),
			},
		},
		{
			Title: "Sink batching: insert size against checkpoint latency (sink/chsink BenchmarkFlushPolicy)",
			How:   "4 chains × (events sink + window sink), a barrier per second on each; ClickHouse CPU from /proc.",
			Figures: []Figure{
				vs("defaults: ClickHouse CPU per row", spkg, fp+"default", "ch-cpu-ns/row", "MaxDelay 1 s, no flush ahead", fp+"before"),
				vs("MaxDelay 200 ms: ClickHouse CPU per row", spkg, fp+"delay200ms", "ch-cpu-ns/row", "MaxDelay 1 s, no flush ahead", fp+"before"),
				vs("defaults: barrier p50", spkg, fp+"default", "p50-barrier-ms", "MaxDelay 1 s, no flush ahead", fp+"before"),
				vs("flush ahead from 10 k rows: barrier p50", spkg, fp+"ahead10k", "p50-barrier-ms", "MaxDelay 1 s, no flush ahead", fp+"before"),
			},
		},
		recoverySection(r),
		{
			Title: "Checkpoints of a dedup state (checkpoint BenchmarkCheckpointDedup, BenchmarkCheckpointDedupChanged)",
			How:   "FSStorage with fsync; Changed: 1 % of the keys new between two checkpoints, compactions amortized.",
			Figures: []Figure{
				vs("checkpoint of 1 M keys", cpkg, cpd+"keys=1000000/checkpoint", "ns/op", "dedup Snapshot alone", cpd+"keys=1000000/snapshot-only"),
				vs("checkpoint of 10 M keys", cpkg, cpd+"keys=10000000/checkpoint", "ns/op", "dedup Snapshot alone", cpd+"keys=10000000/snapshot-only"),
				vs("1 M keys, incremental: chain blocked per checkpoint", cpkg, chg+"keys=1000000/incremental", "ns/op", "full snapshots", chg+"keys=1000000/full"),
				vs("1 M keys, incremental: bytes written per checkpoint", cpkg, chg+"keys=1000000/incremental", "written-B/op", "full snapshots", chg+"keys=1000000/full"),
				vs("10 M keys, incremental: chain blocked per checkpoint", cpkg, chg+"keys=10000000/incremental", "ns/op", "full snapshots", chg+"keys=10000000/full"),
				vs("10 M keys, incremental: bytes written per checkpoint", cpkg, chg+"keys=10000000/incremental", "written-B/op", "full snapshots", chg+"keys=10000000/full"),
				vs("10 M keys, incremental: restore", cpkg, chg+"keys=10000000/incremental", "restore-ms", "full snapshots", chg+"keys=10000000/full"),
			},
		},
		{
			Title: "kafkasource throughput (checkpoint/kafkasource BenchmarkThroughput)",
			How:   "4 × 250,000 records through chains with a dedup participant, in-process kfake.",
			Figures: []Figure{
				{Label: "Process, checkpoint every 1 s", Key: key(kpkg, thr+"interval=1s", "records/s"), Base: ref(kpkg, thr+"checkpoints=off", "records/s"), BaseLabel: "checkpoints off", MinRatio: 0.95, Target: "overhead < 5 %"},
				vs("ProcessBatch, checkpoint every 1 s", kpkg, thr+"batch/interval=1s", "records/s", "ProcessBatch, checkpoints off", thr+"batch/checkpoints=off"),
				vs("ProcessBatch beside Process, 1 s checkpoints", kpkg, thr+"batch/interval=1s", "records/s", "Process", thr+"interval=1s"),
			},
		},
		{
			Title: "dedup: decisions at DEDUP_BENCH_KEYS live keys, one core (dedup BenchmarkObserve)",
			How:   "Duplicate decisions in pseudo-random order over all live keys; keys built outside the timed part.",
			Figures: []Figure{
				{Label: "ObserveBatch", Key: key("dedup", obs+"dedup-batch", "dup-decisions/s"), Base: ref("dedup", obs+"map", "dup-decisions/s"), BaseLabel: "map[string]int64", AtLeast: 5e6, Target: "≥ 5 M/s"},
				vs("Observe", "dedup", obs+"dedup", "dup-decisions/s", "map[string]int64", obs+"map"),
				vs("heap per live key", "dedup", obs+"dedup", "heap-B/key", "map[string]int64", obs+"map"),
				vs("heap per live key, ExpectedKeys", "dedup", obs+"dedup-presized", "heap-B/key", "map[string]int64", obs+"map"),
			},
		},
		{
			Title: "window and checkpoint storage",
			How:   "window: 1-minute tumbling windows over 100,000 keys; storage: checkpointtest.BenchmarkStorage, S3 on an embedded versitygw.",
			Figures: []Figure{
				{Label: "window with Stats, watermarks, emission", Key: key("window", "BenchmarkTumblingStats", "events/s"), Base: ref("window", "BenchmarkBaselineMap", "events/s"), BaseLabel: "a map of accumulators"},
				{Label: "S3 Put of 64 MiB", Key: key("checkpoint/s3storage", "BenchmarkStorage/Put/65536KiB", "ns/op"), Base: ref(cpkg, "BenchmarkFSStorage/Put/65536KiB", "ns/op"), BaseLabel: "FSStorage"},
				{Label: "S3 Get of 64 MiB", Key: key("checkpoint/s3storage", "BenchmarkStorage/Get/65536KiB", "ns/op"), Base: ref(cpkg, "BenchmarkFSStorage/Get/65536KiB", "ns/op"), BaseLabel: "FSStorage"},
				{Label: "S3 Put of 1 KiB", Key: key("checkpoint/s3storage", "BenchmarkStorage/Put/1KiB", "ns/op"), Base: ref(cpkg, "BenchmarkFSStorage/Put/1KiB", "ns/op"), BaseLabel: "FSStorage"},
			},
		},
		{
			Title: "Gateway and Kafka production",
			How:   "idempotency/kafkapub BenchmarkGateway: signed webhooks from 64 clients, Redis, kfake; kafkatxn: 100 records of 200 bytes per batch.",
			Figures: []Figure{
				{Label: "idempotent gateway (AutoPipeliner)", Key: key("idempotency/kafkapub", gw+"idempotent", "req/s"), Base: ref("idempotency/kafkapub", gw+"bare", "req/s"), BaseLabel: "bare handler", MinRatio: 0.6, Target: "≥ 0.6"},
				vs("idempotent gateway, plain client", "idempotency/kafkapub", gw+"idempotent-unpipelined", "req/s", "bare handler", gw+"bare"),
				vs("idempotent gateway, 28 KB pull_request", "idempotency/kafkapub", gw+"idempotent-28KB", "req/s", "bare handler, 28 KB", gw+"bare-28KB"),
				vs("idempotent producer, per batch", "kafkatxn", "BenchmarkProduce/idempotent", "ns/op", "kafka-go Writer", "BenchmarkProduce/kafka-go-writer"),
				vs("transactions committed every 10 batches", "kafkatxn", "BenchmarkTransactional/batch=100/txn-commit-every=10", "ns/op", "idempotent producer", "BenchmarkTransactional/batch=100/idempotent"),
			},
		},
	}
	return out
}

// recoveryName is a sub-benchmark of BenchmarkRecovery.
var recoveryName = regexp.MustCompile(`^BenchmarkRecovery/keys=([0-9]+)/storage=([a-z0-9]+)/(full|incremental)$`)

type recoveryVariant struct {
	keys          int
	storage, mode string
}

// recoveryVariants are the BenchmarkRecovery variants in the results,
// ordered by keys, storage (fs first) and mode (full first).
func recoveryVariants(r *Results) []recoveryVariant {
	var vs []recoveryVariant
	for _, k := range r.Order {
		m := recoveryName.FindStringSubmatch(k.Bench)
		if k.Pkg != "checkpoint/kafkasource" || m == nil || k.Unit != "recovery-ms" {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		vs = append(vs, recoveryVariant{keys: n, storage: m[2], mode: m[3]})
	}
	slices.SortFunc(vs, func(a, b recoveryVariant) int {
		if a.keys != b.keys {
			return a.keys - b.keys
		}
		if a.storage != b.storage {
			if a.storage == "fs" {
				return -1
			}
			if b.storage == "fs" {
				return 1
			}
			return strings.Compare(a.storage, b.storage)
		}
		return strings.Compare(a.mode, b.mode) // full < incremental
	})
	return vs
}

func (v recoveryVariant) bench() string {
	return fmt.Sprintf("BenchmarkRecovery/keys=%d/storage=%s/%s", v.keys, v.storage, v.mode)
}

func (v recoveryVariant) label() string {
	st := map[string]string{"fs": "FSStorage", "s3": "S3"}[v.storage]
	if st == "" {
		st = v.storage
	}
	return fmt.Sprintf("%s keys, %s, %s", humanCount(float64(v.keys)), st, v.mode)
}

func recoverySection(r *Results) Section {
	s := Section{
		Title: "Recovery from kill -9 (checkpoint/kafkasource BenchmarkRecovery)",
		How: "A processor child process (kafkasource, dedup, 1 s checkpoints, a steady RECOVERY_RATE of new keys) killed with SIGKILL, " +
			"restarted at once: time from the kill to its first record processed after restoring from storage; checkpoint figures of the killed process. " +
			"Recovery is read against FSStorage with full snapshots at the same size; checkpoint duration and bytes against full snapshots on the same storage.",
	}
	const pkg = "checkpoint/kafkasource"
	for _, v := range recoveryVariants(r) {
		fsFull := recoveryVariant{keys: v.keys, storage: "fs", mode: "full"}.bench()
		full := recoveryVariant{keys: v.keys, storage: v.storage, mode: "full"}.bench()
		f := Figure{Label: v.label() + ": kill -9 to first record", Key: key(pkg, v.bench(), "recovery-ms")}
		if v.bench() != fsFull {
			f.Base, f.BaseLabel = ref(pkg, fsFull, "recovery-ms"), "FSStorage, full"
		}
		s.Figures = append(s.Figures, f)
		f = Figure{Label: v.label() + ": of which restore", Key: key(pkg, v.bench(), "restore-ms")}
		s.Figures = append(s.Figures, f)
		for _, unit := range []string{"ckpt-ms", "ckpt-B", "B/new-key"} {
			what := map[string]string{
				"ckpt-ms": "checkpoint duration", "ckpt-B": "bytes written per checkpoint",
				"B/new-key": "bytes written per key the state gained (what changed)",
			}[unit]
			f := Figure{Label: v.label() + ": " + what, Key: key(pkg, v.bench(), unit)}
			if v.mode != "full" {
				f.Base, f.BaseLabel = ref(pkg, full, unit), "full snapshots"
			}
			s.Figures = append(s.Figures, f)
		}
	}
	return s
}

// charts are the report's pictures.
func charts(r *Results) []Chart {
	var out []Chart
	// End to end: each variant's events/s as a share of raw.
	e2e := Chart{File: "e2e-share.svg", Title: "End to end: events/s as a share of raw kafka-go (median, whiskers min–max)", Unit: "%"}
	if st := r.Stat(key("examples/processor", "BenchmarkEndToEnd", "raw-ev/s")); st.N > 0 {
		e2e.Bars = append(e2e.Bars, Bar{Label: "raw kafka-go (a)", Stat: Stat{N: st.N, Median: 100, Min: 100, Max: 100}})
	}
	for _, v := range []struct{ name, label string }{
		{"chain", "chain, 1 s checkpoints"}, {"chain-nockpt", "chain, checkpoints off (b)"}, {"chain-record", "chain per record, 1 s"},
	} {
		if st := r.Stat(key("examples/processor", "BenchmarkEndToEnd", v.name+"-%raw")); st.N > 0 {
			e2e.Bars = append(e2e.Bars, Bar{Label: v.label, Stat: st, Series: 1})
		}
	}
	e2e.Mark, e2e.MarkLabel = 50, "issue 13: 50 %"
	out = append(out, e2e)

	sink := Chart{File: "sink-clients.svg", Title: "Rows/s into ClickHouse, batches of 50,000 rows (median, whiskers min–max)", Unit: "rows/s",
		Legend: []string{"raw ch-go", "chsink (this SDK)", "clickhouse-go v2"}}
	// Client CPU per row: steadier than rows/s when the variants, run one
	// after the other, meet different loads.
	cpu := Chart{File: "sink-clients-cpu.svg", Title: "Client CPU per row into ClickHouse, the same batches (median, whiskers min–max)", Unit: "client-cpu-ns/row",
		Legend: sink.Legend}
	for _, v := range []struct{ name, label string }{
		{"raw-ch-go", "raw ch-go (floor)"}, {"chsink-fsjournal", "chsink, FSStorage journal"}, {"chsink-memjournal", "chsink, MemoryStorage journal"},
		{"clickhouse-go-append", "clickhouse-go, Append"}, {"clickhouse-go-columnar", "clickhouse-go, columnar"},
	} {
		for _, c := range []*Chart{&sink, &cpu} {
			if st := r.Stat(key("bench", "BenchmarkSinkVsClickHouseGo/"+v.name, c.Unit)); st.N > 0 {
				c.Bars = append(c.Bars, Bar{Label: v.label, Stat: st, Series: seriesOf(v.name)})
			}
		}
	}
	out = append(out, sink, cpu)

	modes := []string{"full snapshots", "incremental (dedup Options.Incremental)"}
	rec := Chart{File: "recovery.svg", Title: "Recovery: kill -9 to the first record after restart (median, whiskers min–max)", Unit: "ms", Legend: modes}
	bytes := Chart{File: "checkpoint-bytes.svg", Title: "Bytes written per checkpoint, 1 s checkpoints (median, whiskers min–max)", Unit: "B", Legend: modes}
	for _, v := range recoveryVariants(r) {
		series := 0
		if v.mode == "incremental" {
			series = 1
		}
		if st := r.Stat(key("checkpoint/kafkasource", v.bench(), "recovery-ms")); st.N > 0 {
			rec.Bars = append(rec.Bars, Bar{Label: v.label(), Stat: st, Series: series})
		}
		if st := r.Stat(key("checkpoint/kafkasource", v.bench(), "ckpt-B")); st.N > 0 {
			bytes.Bars = append(bytes.Bars, Bar{Label: v.label(), Stat: st, Series: series})
		}
	}
	out = append(out, rec, bytes)
	return out
}

// seriesOf colours the SDK's bars apart from the baselines'.
func seriesOf(name string) int {
	switch {
	case strings.HasPrefix(name, "chsink"):
		return 1
	case strings.HasPrefix(name, "clickhouse-go"):
		return 2
	}
	return 0
}
