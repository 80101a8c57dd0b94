// Package windowsink writes the rows of a window.Operator into a ClickHouse
// ReplacingMergeTree, exactly once, with what a window sink needs set for
// you: the positions of the rows (a sink.Cursor), the rows a Tick emits,
// the mismatch policy (chsink.MismatchReinsert), and the version and
// deleted columns.
//
// # Tour
//
// Build the operator, then the sink over it in the partition's
// checkpoint.Chain, and feed it events:
//
//	op, err := window.New(window.Session(30*time.Minute), window.Count[string]{}, window.Options{Inputs: []int{c.Partition().Partition}})
//	ws, err := windowsink.Open(ctx, c, chsink.DB{Addr: addr, Database: db}, "sessions", op, columns, windowsink.Options{})
//	// Process: ws.Add(ctx, m.Offset, window.Event[string]{...})
//	// Tick:    ws.Tick(ctx)
//
// Open registers the sink in the chain under the table's name, the one
// participant for the operator, the cursor and the rows, over the chain's
// Storage and with the Store's Keep (kafkasource.Chains builds the chain,
// runs the sink and closes it). New is the same sink without a chain: pass
// the table, partition and Storage yourself and register it by name.
//
// columns maps a window.Row to the table's key, start (and end) and result
// columns; the sink adds the version column (Row.Version, UInt64) and the
// deleted column (Row.Deleted, UInt8) itself. The table:
//
//	CREATE TABLE sessions (key String, start DateTime64(3), end DateTime64(3),
//	    events UInt64, version UInt64, deleted UInt8)
//	ENGINE = ReplacingMergeTree(version, deleted) ORDER BY (key, start)
//	SETTINGS non_replicated_deduplication_window = 1000
//
// Tumbling and hopping windows need ReplacingMergeTree(version), ordered by
// key and start (their deleted column is optional); sessions need the
// deleted column, since a merge retracts a session's row. New checks this
// at start-up and refuses any other table with a *chsink.TableCheckError
// matching ErrNotReplacing whose message says what to change.
//
// # Errors
//
// Match them with errors.Is:
//
//   - [ErrInvalidOptions] is wrapped by the error New returns for unusable
//     arguments; the message names the field and what it accepts.
//   - [ErrNotReplacing] is matched by the *chsink.TableCheckError New
//     returns for a table that cannot hold window rows: not a
//     ReplacingMergeTree, one without the version column (or, for sessions,
//     the deleted column), or one whose version or deleted column is another
//     than Options names or of another type than UInt64 and UInt8.
//
// # Guarantees
//
// The table read with FINAL holds exactly the windows (or sessions) of the
// events the operator accepted, with their results, after any number of
// crashes and replays, given chsink's assumptions (a deduplication
// window, shared checkpoint storage), the operator's (events once and in
// offset order), and, when events can be late, that idleness decides
// alike in every run (it does with a negative IdleTimeout), since which
// events are late depends on it.
//
// Replays may emit other rows than the first run at the same positions: a
// Tick, an early firing by interval or idleness depend on the clock. The
// sink inserts those under a fresh token (MismatchReinsert), and since
// every row of a window carries its number of events as its version, the
// ReplacingMergeTree keeps the most complete one whichever run wrote it.
//
// A session merged away is retracted whenever the table may hold a row of
// it, not only when the replaying operator emitted one. After a restore,
// or on a fresh start over a journal that a dead run left, the sink reads
// how far the journal's batches past the checkpoint reach
// ([chsink.Sink.JournalReach]); while the input is at or before that
// offset, the operator counts every session it holds as written
// ([window.Operator.AssumeWritten]). So a session that only the dead run
// showed (by a Tick) and the replay merges away gets its deletion row. The
// rows this adds concern only sessions held in that stretch of a replay:
// deletions, each for a (Key, Start) where no session starts again, with
// a version above every row written there, and early rows of the merged
// sessions, which their final rows replace.
//
// Which sessions the operator assumes written depends on the restored
// state, the input and the journal only, never on the clock: two replays
// from the same checkpoint over the same journal, with the same Ticks,
// emit the same rows at the same positions, which chsink re-cuts into the
// journaled batches under the same tokens (derived from the positions).
// Where rows differ from what a dead run wrote there (its Tick rows, or
// the rows this adds), chsink inserts them under a token derived from
// their content, so a later replay of the same content is deduplicated.
// This holds through a SIGKILL after any step of early firings, merges,
// late events and EndInput, on tumbling, hopping and session windows
// (docs/design/tests.md names the tests).
package windowsink
