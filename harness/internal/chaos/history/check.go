package history

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// The checkers' names (Finding.Checker).
const (
	// Lost: a write acknowledged (a send answered OK, a transaction
	// committed) whose key a final read of a store of its stream lacks.
	Lost = "lost"
	// Duplicate: a key a final read found more than once in a store that
	// must hold each once.
	Duplicate = "duplicate"
	// AbortedRead: a key read or polled that only aborted transactions
	// wrote.
	AbortedRead = "aborted-read"
	// UnexpectedRead: a key read or polled that no operation of the
	// history wrote to that stream.
	UnexpectedRead = "unexpected-read"
	// NonMonotonicPoll: a consumer's poll of a partition handed out an
	// offset at or before one it handed out earlier.
	NonMonotonicPoll = "non-monotonic-poll"
	// SkippedPoll: between two consecutive polls of a partition by one
	// consumer, offsets the final read of the partition holds were never
	// handed out.
	SkippedPoll = "skipped-poll"
	// InconsistentPoll: a poll handed out, at an offset, a key other than
	// the one the final read found there, or an offset the final read does
	// not hold (the record vanished from the log).
	InconsistentPoll = "inconsistent-poll"
	// NonMonotonicCommit: a consumer group's committed offset of a
	// partition moved backwards.
	NonMonotonicCommit = "non-monotonic-commit"
)

// Finding is one anomaly a checker found.
type Finding struct {
	Checker   string `json:"checker"`
	Table     string `json:"table,omitempty"`
	Partition int    `json:"partition"`
	Key       string `json:"key,omitempty"`
	Detail    string `json:"detail"`
}

func (f Finding) String() string {
	where := f.Table
	if f.Key != "" {
		key := f.Key
		if strings.IndexFunc(key, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			key = strconv.Quote(key) // a transaction marker's, say
		}
		where += " " + key
	}
	return fmt.Sprintf("%s: %s: %s", f.Checker, strings.TrimSpace(where), f.Detail)
}

// Options tunes Check.
type Options struct {
	// MayDuplicate lists the stores (a Read's Table) that may hold a key
	// more than once: a topic that a retrying producer without
	// transactions writes, whose duplicates the consumer drops. Lost writes
	// are still checked there.
	MayDuplicate []string
	// Foreign reports keys that another writer, outside the history, put
	// in the stores: reads of them are not unexpected. Default: none.
	Foreign func(key string) bool
}

// Check runs every checker on h and returns their findings, sorted.
func Check(h []Op, opts Options) []Finding {
	var out []Finding
	out = append(out, LostWrites(h)...)
	out = append(out, Duplicates(h, opts.MayDuplicate)...)
	out = append(out, AbortedReads(h)...)
	out = append(out, UnexpectedReads(h, opts.Foreign)...)
	out = append(out, Polls(h)...)
	out = append(out, Commits(h)...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Checker != b.Checker {
			return a.Checker < b.Checker
		}
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Key < b.Key
	})
	return out
}

// writeState is what the writes of one key to one stream did.
type writeState struct {
	acked   bool // a send answered OK or a transaction committed
	unknown bool // a write answered Info
	pending int  // writes invoked and not answered yet
	aborted bool // written by an aborted transaction
}

// maybe reports whether a write of unknown outcome may have written the key.
func (w *writeState) maybe() bool { return w.unknown || w.pending > 0 }

// writes returns, per stream and key, what the writes of h did.
func writes(h []Op) map[string]map[string]*writeState {
	out := map[string]map[string]*writeState{}
	at := func(stream, key string) *writeState {
		m := out[stream]
		if m == nil {
			m = map[string]*writeState{}
			out[stream] = m
		}
		w := m[key]
		if w == nil {
			w = &writeState{}
			m[key] = w
		}
		return w
	}
	for _, op := range h {
		var keys []string
		switch op.F {
		case Send:
			keys = []string{op.Value.Key}
		case Txn:
			keys = op.Value.Keys
		default:
			continue
		}
		for _, k := range keys {
			w := at(op.Value.Table, k)
			switch op.Type {
			case Invoke:
				w.pending++
				continue
			case OK:
				w.acked = true
			case Fail:
				if op.F == Txn {
					w.aborted = true
				}
			case Info:
				w.unknown = true
			}
			w.pending = max(w.pending-1, 0)
		}
	}
	return out
}

// store is what the final reads of one store found.
type store struct {
	of     string
	counts map[string]int
	// at is, for a topic, the key at each offset, by partition.
	at map[int]map[int64]string
}

func stores(h []Op) map[string]*store {
	out := map[string]*store{}
	for _, op := range h {
		if op.F != Read || op.Type != OK {
			continue
		}
		s := out[op.Value.Table]
		if s == nil {
			s = &store{of: op.Value.Of, counts: map[string]int{}, at: map[int]map[int64]string{}}
			out[op.Value.Table] = s
		}
		for i, k := range op.Value.Keys {
			s.counts[k]++
			if i < len(op.Value.Offsets) {
				p := s.at[op.Value.Partition]
				if p == nil {
					p = map[int64]string{}
					s.at[op.Value.Partition] = p
				}
				p[op.Value.Offsets[i]] = k
			}
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// LostWrites reports every acknowledged write missing from a final read of
// a store of its stream.
func LostWrites(h []Op) []Finding {
	ws := writes(h)
	var out []Finding
	sts := stores(h)
	for _, name := range sortedKeys(sts) {
		s := sts[name]
		for _, k := range sortedKeys(ws[s.of]) {
			if ws[s.of][k].acked && s.counts[k] == 0 {
				out = append(out, Finding{Checker: Lost, Table: name, Key: k,
					Detail: fmt.Sprintf("acknowledged write to %s not in the final read", s.of)})
			}
		}
	}
	return out
}

// Duplicates reports every key a final read found more than once, except in
// the stores mayDuplicate names.
func Duplicates(h []Op, mayDuplicate []string) []Finding {
	var out []Finding
	sts := stores(h)
	for _, name := range sortedKeys(sts) {
		if slices.Contains(mayDuplicate, name) {
			continue
		}
		s := sts[name]
		for _, k := range sortedKeys(s.counts) {
			if n := s.counts[k]; n > 1 {
				out = append(out, Finding{Checker: Duplicate, Table: name, Key: k, Detail: fmt.Sprintf("read %d times", n)})
			}
		}
	}
	return out
}

// readKeys calls f for every key a read or a poll of h handed out, with the
// stream it belongs to ("" for a poll of a store no final read names).
func readKeys(h []Op, f func(op Op, stream, key string)) {
	of := map[string]string{}
	for _, op := range h {
		if op.F == Read && op.Value.Of != "" {
			of[op.Value.Table] = op.Value.Of
		}
	}
	for _, op := range h {
		if op.Type != OK || (op.F != Read && op.F != Poll) {
			continue
		}
		stream := op.Value.Of
		if op.F == Poll {
			stream = of[op.Value.Table]
		}
		for _, k := range op.Value.Keys {
			f(op, stream, k)
		}
	}
}

// AbortedReads reports every key read or polled that only aborted
// transactions wrote.
func AbortedReads(h []Op) []Finding {
	ws := writes(h)
	seen := map[string]bool{}
	var out []Finding
	readKeys(h, func(op Op, stream, key string) {
		w := ws[stream][key]
		if w == nil || !w.aborted || w.acked || w.maybe() || seen[op.F+op.Value.Table+key] {
			return
		}
		seen[op.F+op.Value.Table+key] = true
		out = append(out, Finding{Checker: AbortedRead, Table: op.Value.Table, Partition: op.Value.Partition, Key: key,
			Detail: fmt.Sprintf("%s by %s of a key only aborted transactions wrote", op.F, op.Process)})
	})
	return out
}

// UnexpectedReads reports every key read or polled that no write of h
// aimed at its stream and foreign does not claim.
func UnexpectedReads(h []Op, foreign func(string) bool) []Finding {
	ws := writes(h)
	seen := map[string]bool{}
	var out []Finding
	readKeys(h, func(op Op, stream, key string) {
		if stream == "" || ws[stream][key] != nil || (foreign != nil && foreign(key)) || seen[op.Value.Table+key] {
			return
		}
		seen[op.Value.Table+key] = true
		out = append(out, Finding{Checker: UnexpectedRead, Table: op.Value.Table, Partition: op.Value.Partition, Key: key,
			Detail: fmt.Sprintf("%s by %s of a key never written to %s", op.F, op.Process, stream)})
	})
	return out
}

// Polls reports, per consumer and partition, polls that went backwards,
// skipped offsets the final read of the partition holds, or handed out what
// the final read does not hold at that offset. Without a final read of the
// store only the order is checked.
func Polls(h []Op) []Finding {
	sts := stores(h)
	type stream struct {
		process, table string
		partition      int
	}
	last := map[stream]int64{}
	offsets := map[stream][]int64{} // the final read's, sorted, by table and partition
	sorted := func(table string, partition int, final map[int64]string) []int64 {
		id := stream{table: table, partition: partition}
		if offs, ok := offsets[id]; ok {
			return offs
		}
		offs := make([]int64, 0, len(final))
		for o := range final {
			offs = append(offs, o)
		}
		slices.Sort(offs)
		offsets[id] = offs
		return offs
	}
	var out []Finding
	for _, op := range h {
		if op.F != Poll || op.Type != OK {
			continue
		}
		id := stream{op.Process, op.Value.Table, op.Value.Partition}
		var final map[int64]string
		if s := sts[op.Value.Table]; s != nil {
			final = s.at[op.Value.Partition]
		}
		prev, polled := last[id]
		for i, o := range op.Value.Offsets {
			if polled && o <= prev {
				out = append(out, Finding{Checker: NonMonotonicPoll, Table: op.Value.Table, Partition: op.Value.Partition,
					Detail: fmt.Sprintf("%s handed out offset %d after %d", op.Process, o, prev)})
			} else if polled && final != nil {
				// The final read's offsets strictly between the two.
				offs := sorted(op.Value.Table, op.Value.Partition, final)
				lo, _ := slices.BinarySearch(offs, prev+1)
				hi, _ := slices.BinarySearch(offs, o)
				if hi > lo {
					out = append(out, Finding{Checker: SkippedPoll, Table: op.Value.Table, Partition: op.Value.Partition,
						Detail: fmt.Sprintf("%s went from offset %d to %d past %d records of the final read (first %d)", op.Process, prev, o, hi-lo, offs[lo])})
				}
			}
			if final != nil && i < len(op.Value.Keys) {
				if k, ok := final[o]; !ok || k != op.Value.Keys[i] {
					what := "nothing"
					if ok {
						what = k
					}
					out = append(out, Finding{Checker: InconsistentPoll, Table: op.Value.Table, Partition: op.Value.Partition, Key: op.Value.Keys[i],
						Detail: fmt.Sprintf("%s saw it at offset %d, where the final read has %s", op.Process, o, what)})
				}
			}
			prev, polled = o, true
		}
		if polled {
			last[id] = prev
		}
	}
	return out
}

// Commits reports every committed offset of a partition, as one looker saw
// them, below an earlier one.
func Commits(h []Op) []Finding {
	type part struct {
		process, table string
		partition      int
	}
	last := map[part]int64{}
	var out []Finding
	for _, op := range h {
		if op.F != Commit || op.Type != OK {
			continue
		}
		id := part{op.Process, op.Value.Table, op.Value.Partition}
		if prev, ok := last[id]; ok && op.Value.Offset < prev {
			out = append(out, Finding{Checker: NonMonotonicCommit, Table: op.Value.Table, Partition: op.Value.Partition,
				Detail: fmt.Sprintf("%s's committed offset went from %d back to %d", op.Process, prev, op.Value.Offset)})
		}
		last[id] = max(last[id], op.Value.Offset)
	}
	return out
}
