// Package window aggregates keyed events in event-time windows and emits
// one idempotent row per window, for a ReplacingMergeTree(version) table:
// stage 5 of the pipeline, "aggregate in the stream processor, and have
// ClickHouse store results".
//
// # Tour
//
// A Spec says which windows an event belongs to: Tumbling(time.Minute),
// Hopping(time.Hour, 10*time.Minute) or Session(30*time.Minute). An aggregator says what a window
// computes: Count, Sum, Min, Max, Avg, Stats (count, sum, avg, min, max in
// one), Sums (several counts and sums in one row), Distinct (exact),
// ApproxDistinct (HyperLogLog), or any type
// implementing Aggregator and Codec. New combines them:
//
//	op, err := window.New(window.Tumbling(time.Minute), window.Stats{}, window.Options{
//		MaxOutOfOrderness: 5 * time.Second,
//		AllowedLateness:   time.Minute,
//	})
//	var out window.Output[float64, window.Summary]
//	err = op.Add(window.Event[float64]{Input: partition, Key: key, Time: t, Value: v}, &out)
//	// out.Rows: rows for the sink; out.Late: events too late for a window.
//
// The Operator is a checkpoint.Participant, owned by one partition chain
// (one goroutine): Snapshot and Restore carry its windows, watermark and
// per-input event times; it starts no goroutines and has no timer of its
// own, so the chain calls Tick when no events arrive (NextTick says when).
//
// # Early firings and the end of input
//
// A window is emitted when it fires, after its End and the
// out-of-orderness bound have passed. Options.Early also emits its partial
// result before: every EarlyFiring.Every events of the window, and every
// EarlyFiring.Interval of processing time for windows that changed. Early
// rows have Row.Early set and the number of events so far as Version, so
// the final row replaces them in the table: a dashboard reading with FINAL
// sees the current hour as it fills and the exact result once it closes.
//
// EndInput tells the operator that the input is finished (a backfill, a
// bounded replay, a test): the watermark moves past every window and every
// open window fires at once, as with Flink's final watermark.
//
// # Session windows
//
// Session(gap) groups each key's events into sessions: events at most gap
// apart are in one session [first event, last event + gap), so a session
// ends after gap without events; two events exactly gap apart are in one
// session, as Flink merges windows that touch. A session fires when the
// watermark reaches its End, and stays open for AllowedLateness after
// that, like a window. A session's row is keyed by (Key, Start), with End
// as a column: write session rows to a ReplacingMergeTree(Version,
// Deleted) ordered by (Key, Start).
//
// An event that arrives out of order may extend a session, or bridge two
// (its [t, t+gap] reaches both): they merge into one, with the
// aggregator's Merge, and the merged session's Version is its number of
// events. When the table may hold a row of a merged session under a Start
// that is no longer a session's start (the operator emitted one: it
// fired, or had an early row; or AssumeWritten says a run that died may
// have), the operator emits a Row with Deleted set for that (Key, Start),
// whose Version beats every row written there; the merged session is
// emitted at once (a final row when the watermark is past its End, else an
// early row). A table read with FINAL so holds exactly the current
// sessions. With Early.Every, a session gets an early row whenever its
// count reaches or passes a multiple of Every, by one event or by a merge
// (3 + 3 + 1 events under Every 4).
//
// After a crash, the table holds what the dead run wrote after its last
// checkpoint, and the replay from that checkpoint may not emit it again:
// early rows by Early.Interval and sessions fired by idleness depend on
// the clock. So what a merge retracts cannot follow from what the
// replaying operator emitted alone. Turned on, [Operator.AssumeWritten]
// makes it count every session it holds, and every one it creates or
// changes, as written: a merge retracts them. A sink turns it on after a
// restore while the input is within what the dead run may have written,
// and off after (package sink/chsink/windowsink does, from its journal).
// A deletion for a (Key, Start) that holds no row costs a row and nothing
// else: no session of the key starts there again (the merged session
// holds an event there and starts before it), and FINAL drops the key.
//
// Lateness is judged on the merged session, as Flink does: an event is
// late when the session it would make, merged with the sessions it
// reaches, ends more than AllowedLateness behind the watermark; so an
// event whose own [t, t+gap) is behind the watermark but which joins an
// open session is kept. One rule more keeps the table exact: an event is
// also late when the merged session would reach a session of its key that
// has closed (its row can no longer be retracted), so the table never
// holds two overlapping sessions of a key. Late events go to Output.Late
// (Start and End are the event's own [t, t+gap)).
//
// Differences from Flink's EventTimeSessionWindows with its
// EventTimeTrigger, CountTrigger and ContinuousProcessingTimeTrigger, each
// for a reason:
//
//   - An event that would make a session overlap or touch one already
//     closed is late; Flink keeps it and emits a second session over the
//     same time. Reason: the closed session's row can no longer be
//     retracted, and the table must hold each key's sessions once.
//   - A key is forgotten gap + AllowedLateness of watermark after its last
//     session closed. A session that opens while the operator holds
//     nothing of its key, at watermark W, cannot be extended back to W -
//     AllowedLateness - gap or before: an event that would is late.
//     Reason: memory bounded by the open sessions, not by every key ever
//     seen; only an event more than gap + AllowedLateness behind the
//     watermark can be refused this way.
//   - Every refused event is in Output.Late; Flink's late-data side output
//     gets only events whose own time is behind the watermark by more than
//     the lateness, and drops the others silently. Reason: nothing is
//     lost without a trace.
//   - A merge retracts the rows of the sessions it replaced (Deleted rows)
//     and emits the merged session at once when the table may hold a row
//     of one of them; Flink emits the merged window when it next fires
//     and leaves the parts' results standing downstream. Reason: the table
//     read with FINAL holds only current sessions, never a part beside
//     the whole.
//   - Early.Every fires at multiples of the session's total count (4, 8,
//     12 under Every 4; 7 then 8 after a 3 + 3 + 1 merge); Flink's
//     CountTrigger counts since its last firing (7, then 11). Reason: a
//     row's Version is its count, so each row is determined by the input
//     and replays write the same rows. Early firings come in addition to
//     the final one, not instead of it.
//   - Early.Interval emits, on one processing-time timer for the
//     operator, only the sessions that changed since their last row;
//     Flink's ContinuousProcessingTimeTrigger fires every window on its
//     own timer, changed or not. Reason: an unchanged row is the same
//     bytes again. There is no event-time interval
//     (ContinuousEventTimeTrigger): use Every, or the final row.
//   - A restored operator emits its open sessions' early rows again at
//     the first interval, changed or not (Flink's trigger state is in its
//     checkpoint). Reason: what was shown is processing-time state, kept
//     out of the snapshot so equal states give equal bytes; the rows
//     written again are the same.
//
// A session operator's snapshot is format version 3 (the gap, each
// session's end and whether the table may hold a row of it, and each
// key's floor: where its
// closed sessions end); it reads version 2 too. Window operators still
// write version 1, and a snapshot of one kind is refused by the other with
// ErrIncompatible.
//
// # Inputs, partitions and RemoveInput
//
// The rule for when an operator spans partitions: it does when one
// goroutine feeds it records of several partitions, and only then. With
// checkpoint/kafkasource it never does: each partition has its own chain,
// the chain builds its own operator (declare Options.Inputs as the chain's
// one partition), and a revoked partition takes its operator, state and
// watermark with it, so there is nothing to remove. An operator spans
// partitions when a consumer of your own feeds it several (a merged stream,
// a manually assigned set of partitions checkpointed together); then an
// input that leaves for good (revoked, or a bounded input that is done)
// must be removed with RemoveInput, or it holds the watermark back until it
// turns idle, and forever when idleness is off.
//
// # Aggregators and neutral elements
//
// An Aggregator is a commutative monoid (Identity, Merge) with Add and
// Result. Identity is "no samples", which is 0 for Count and Sum but is not
// a sample of 0 for Avg: an average is kept as (sum, count), and an average
// of nothing is absent (Result's ok is false, Row.Valid is false, the table
// gets NULL). That is the article's avgState(toFloat64(0)) bug, shown
// against a real ClickHouse server in this package's tests.
//
// # Watermarks and idleness
//
// Each input (Event.Input, typically a Kafka partition) has a watermark:
// its newest event time minus MaxOutOfOrderness. The operator's watermark
// is the minimum over active inputs and never goes back. A window [Start,
// End) fires when the watermark reaches End. An event for a window that
// already fired is added and the window is emitted again while the
// watermark is below End + AllowedLateness; later, the event goes to
// Output.Late and the late counter instead, never silently dropped.
//
// Idleness rule: an input that has delivered nothing for IdleTimeout of
// processing time (Options.Now) is idle and no longer holds the minimum
// back. When every input is idle, the watermark jumps to the newest event
// time seen (the out-of-orderness bound is released: nothing arrived for
// IdleTimeout) and then advances with the clock. So on a quiet stream a
// window fires IdleTimeout after the last event plus the event time still
// missing to its End, without waiting for a new record (unlike Kafka
// Streams' suppress), and exactly then rather than at the next periodic
// check (unlike FLINK-40503): idleness is evaluated on every Add and Tick,
// and NextTick gives the owner the exact time to call Tick. An idle input
// becomes active with its next event; events it brings behind the
// watermark are late.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrInvalidOptions] reports a Spec or Options that New refuses.
//   - [ErrInvalidEvent] reports an event the operator cannot place in time
//     (a zero time, or one outside about the years 1770 to 2170).
//   - [ErrCorrupt] reports a snapshot or an accumulator state that is
//     truncated, fails its checksum or is otherwise malformed.
//   - [ErrUnsupportedVersion] reports a snapshot written by a newer format.
//   - [ErrIncompatible] reports a snapshot taken by an operator with another
//     window Spec: its windows would not line up.
//   - [ErrKeySplit] reports a window key seen on two Kafka partitions.
//   - [CorruptError] is the error for a malformed snapshot: it wraps
//     ErrCorrupt and says at which byte offset decoding failed.
//   - [KeySplitError] is the error of PartitionCheck.Check: Key was seen on
//     partition First and now on Second.
//
// # Guarantees
//
// Deterministic: given the same snapshot and the same input in the same
// order (RemoveInput, EndInput and AssumeWritten calls included), and the
// same idleness and early-firing-interval decisions, the operator emits
// byte-identical rows in the same order (windows by start, then key) and
// takes byte-identical snapshots. Processing time is not in a snapshot.
//
// Idleness and EarlyFiring.Interval are the inputs that are not replayed:
// they depend on the clock, so a replay may close a window, or emit a
// partial row, at another point of the input than the first run did, and a
// row may then hold more or fewer events. (Early rows by EarlyFiring.Every
// depend on the input only.) Output stays
// idempotent anyway: a row is keyed by (Key, Start, End) and its Version is
// the number of events folded into the window, so a ReplacingMergeTree
// (read with FINAL) keeps the most complete emission, whichever run wrote
// it, early or final, and rewriting a row writes the same bytes. A row written by a run that
// died before its checkpoint is replaced or rewritten by the replay, never
// added to (a session's row that the replay merges away is replaced by its
// deletion when the replay assumes it written: see Sessions across
// crashes below).
//
// Assumptions: events reach Add at least once and in offset order per
// input, deduplicated upstream (package dedup) so a redelivery is not
// counted twice; the sink writes every row before the checkpoint that
// covers it completes, into a table keyed by (Key, Start, End) with Version
// as the version column. Aggregates are kept per partition (one Operator
// per partition's chain), so every event of one window key must live in one
// Kafka partition: the producer's partition key must determine the window
// key (kafkapub keys webhooks by tenant: a window keyed by organisation and
// employee fits). PartitionCheck catches a key seen on two partitions with a
// loud ErrKeySplit instead of two partial rows.
//
// Sessions: whatever the arrival order, as long as no event is late, the
// rows read as a ReplacingMergeTree(Version, Deleted) with FINAL are
// exactly the sessions computed from the sorted events, each with the
// aggregate of its events; with late events, exactly the sessions of the
// accepted events, and every other event is in Output.Late. Session rows
// are keyed by (Key, Start) and need the Deleted column: a merge retracts
// a session's row by a deletion, never by a row of another key.
//
// Sessions across crashes: the same holds for the rows of every run
// together, those of runs that died before their next checkpoint
// included, when each replay from a snapshot has AssumeWritten on while
// it replays the input that a dead run after that snapshot may have
// written rows for, and, when events can be late, idleness decides alike
// in every run (it does with a negative IdleTimeout; otherwise which
// events are late may differ between runs). A session that only a dead
// run showed (by Early.Interval or idleness) and that the replay merges
// away then gets its deletion row although the replay never emitted it.
package window
