package kafkawire

import (
	"errors"
	"fmt"
)

// ErrMalformed marks a fetch response or record batch the decoder cannot
// read (truncated, a bad length or CRC): the fetch fails rather than hand
// out records it is not sure of.
var ErrMalformed = errors.New("kafkawire: malformed fetch response")

// FormatError is a record batch in a message format older than v2 (magic
// 0 or 1, written by Kafka before 0.11 and not converted by the broker),
// which this decoder does not read. Nothing at or after Offset is handed
// out.
type FormatError struct {
	Topic     string
	Partition int
	Offset    int64 // the batch's base offset
	Magic     int8
}

func (e *FormatError) Error() string {
	return fmt.Sprintf("kafkawire: %s/%d at offset %d: record batch format v%d; only v2 (Kafka 0.11 and later) is read",
		e.Topic, e.Partition, e.Offset, e.Magic)
}
