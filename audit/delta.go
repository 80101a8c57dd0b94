package audit

import (
	"encoding/json"
	"fmt"
	"time"
)

// Delta is a count increment a stage without checkpoints of its own (the
// gateway) sends to the audit topic, one record each, keyed by tenant. The
// processor folds it into its Counter once: Source and Seq name it, and a
// delta sent again (its acknowledgement lost) keeps both.
type Delta struct {
	// Source is the sending process's incarnation: unique per process
	// start (audit/kafkaaudit takes the host name, the pid and the start
	// time), so a restarted gateway never reuses a sequence number.
	Source string    `json:"source"`
	Seq    uint64    `json:"seq"` // from 1, per Source
	Stage  string    `json:"stage"`
	Tenant string    `json:"tenant"`
	Bucket time.Time `json:"bucket"`
	Count  uint64    `json:"count"`
}

// Encode returns the record value of d.
func (d Delta) Encode() []byte {
	b, _ := json.Marshal(d) // strings, numbers and a time: cannot fail
	return b
}

// DecodeDelta parses a record value written by Delta.Encode. A value that
// is no delta wraps ErrCorrupt.
func DecodeDelta(b []byte) (Delta, error) {
	var d Delta
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%w: delta: %v", ErrCorrupt, err)
	}
	if d.Source == "" || d.Seq == 0 || d.Stage == "" || d.Bucket.IsZero() {
		return d, fmt.Errorf("%w: delta %s without source, sequence number, stage or bucket", ErrCorrupt, b)
	}
	return d, nil
}
