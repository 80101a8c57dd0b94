package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"
)

// Type is what an operation's entry says about it, as in Jepsen.
type Type string

// The types of an entry. A write is an Invoke followed by one of OK, Fail
// or Info; a read, a poll and a commit are recorded once, as OK, when their
// answer came.
const (
	// Invoke: the operation was started.
	Invoke Type = "invoke"
	// OK: it took effect (a write acknowledged, a transaction committed,
	// a read answered).
	OK Type = "ok"
	// Fail: it definitely did not take effect (a write refused, a
	// transaction aborted).
	Fail Type = "fail"
	// Info: its outcome is unknown (no answer, a timeout, a 5xx): it may
	// or may not have taken effect.
	Info Type = "info"
)

// The functions (Op.F) of a history.
const (
	// Send is one write of Value.Key to the stream Value.Table by a client
	// (a webhook delivery to the gateway; in the chaos run also a record
	// of the pipeline's topic, as what the processors' output owes).
	Send = "send"
	// Txn is one Kafka transaction writing Value.Keys to the stream
	// Value.Table: OK committed, Fail aborted, Info unknown.
	Txn = "txn"
	// Poll is one fetch by a consumer (Op.Process) of Value.Partition of
	// Value.Table: Value.Offsets and Value.Keys, in the order handed out.
	Poll = "poll"
	// Read is part of the final read of Value.Table, a store holding the
	// stream Value.Of: one key per row in Value.Keys, with Value.Partition
	// and Value.Offsets where the store is a Kafka topic.
	Read = "read"
	// Commit is a consumer group's committed offset (Value.Offset, the
	// next to read) of Value.Partition of Value.Table, as seen by a
	// periodic look.
	Commit = "commit"
)

// Op is one entry of a history: one line of its JSON.
type Op struct {
	// Process is the actor: a provider, the transactional writer, a
	// consumer, the verifier. One actor's operations may overlap (the
	// providers send concurrently): a completion carries its invocation's
	// key, so no pairing by process is needed.
	Process string `json:"process"`
	// Time is nanoseconds since the history began.
	Time  int64  `json:"time"`
	Type  Type   `json:"type"`
	F     string `json:"f"`
	Value Value  `json:"value"`
}

// Value is an operation's value; which fields are set depends on Op.F.
type Value struct {
	// Table is the stream a write goes to, or the store a poll, read or
	// commit looks at.
	Table string `json:"table,omitempty"`
	// Of is, for a read, the stream the store holds.
	Of        string   `json:"of,omitempty"`
	Key       string   `json:"key,omitempty"`
	Keys      []string `json:"keys,omitempty"`
	Partition int      `json:"partition"`
	Offsets   []int64  `json:"offsets,omitempty"`
	Offset    int64    `json:"offset,omitempty"`
	// Txn names a transaction (its producer id and epoch).
	Txn string `json:"txn,omitempty"`
	// Detail is free text: an error, a status code.
	Detail string `json:"detail,omitempty"`
}

// Recorder collects a history and writes each entry, as one JSON line, to
// its writer as it comes. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []Op
	w     *bufio.Writer
	err   error
}

// NewRecorder returns a Recorder whose times count from now, writing to w
// (nil: none).
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{start: time.Now()}
	if w != nil {
		r.w = bufio.NewWriter(w)
	}
	return r
}

// Add records op, stamping its Time. It returns op as stamped.
func (r *Recorder) Add(op Op) Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	op.Time = time.Since(r.start).Nanoseconds()
	r.ops = append(r.ops, op)
	if r.w != nil && r.err == nil {
		r.err = writeOp(r.w, op)
	}
	return op
}

// Ops returns a copy of the history so far.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Flush writes out what is buffered and returns the first write error.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && r.err == nil {
		r.err = r.w.Flush()
	}
	return r.err
}

func writeOp(w io.Writer, op Op) error {
	b, err := json.Marshal(op)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Encode writes ops as JSON lines.
func Encode(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	for _, op := range ops {
		if err := writeOp(bw, op); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// Decode reads a history written by Encode or a Recorder.
func Decode(r io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(r)
	for line := 1; ; line++ {
		var op Op
		if err := dec.Decode(&op); err == io.EOF {
			return ops, nil
		} else if err != nil {
			return ops, fmt.Errorf("history: entry %d: %w", line, err)
		}
		ops = append(ops, op)
	}
}
