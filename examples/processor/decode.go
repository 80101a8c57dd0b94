package main

import (
	"fmt"
	"strconv"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/idempotency/kafkapub"
)

// eventDecoder reads the event of a record the gateway published with
// kafkapub: the tenant is the record's key, the delivery's id, source and
// type are headers, the time is the record's timestamp. The value (the
// provider's payload) is not read at all: this chain needs nothing from it.
//
// It does what kafkapub.ReadMetadata and string(m.Key) do, with the same
// answers and errors (FuzzDecodeEvent checks it against them), in one pass
// over the headers, and without a string per field. Why hand-written, not
// a library: there is nothing to parse, only headers to pick and strings to
// make, and a general decoder would still allocate one string per field.
// The tenant, source and type repeat (hundreds of tenants, two sources,
// tens of event types), so they are interned: a map lookup with
// m[string(b)] does not allocate, and a new value is added while the table
// holds fewer than maxInterned strings (beyond, it allocates as before,
// so an input with ever new tenants costs memory only up to that bound).
// Only the event id, new in every event, becomes a new string: it goes to
// the events table.
type eventDecoder struct {
	interned map[string]string
}

// maxInterned bounds an eventDecoder's table of repeated strings.
const maxInterned = 1 << 14

func (d *eventDecoder) intern(b []byte) string {
	if s, ok := d.interned[string(b)]; ok {
		return s
	}
	s := string(b)
	if d.interned == nil {
		d.interned = make(map[string]string)
	}
	if len(d.interned) < maxInterned {
		d.interned[s] = s
	}
	return s
}

// decode sets ev from m. A record without delivery metadata (no or an
// empty event-id header, or a retry header that is no count) is an error
// wrapping kafkapub.ErrNoMetadata, as ReadMetadata's, and ev is unchanged.
// When a header appears twice the last one wins.
func (d *eventDecoder) decode(m *kafka.Message, ev *event) error {
	var id, source, typ, retry []byte
	for i := range m.Headers {
		h := &m.Headers[i]
		switch h.Key {
		case kafkapub.HeaderEventID:
			id = h.Value
		case kafkapub.HeaderSource:
			source = h.Value
		case kafkapub.HeaderEventType:
			typ = h.Value
		case kafkapub.HeaderRetry:
			retry = h.Value
		}
	}
	if len(id) == 0 {
		return fmt.Errorf("%w: no %s header (partition %d, offset %d)", kafkapub.ErrNoMetadata, kafkapub.HeaderEventID, m.Partition, m.Offset)
	}
	if len(retry) > 0 {
		// Only the deliveries retried by their provider carry it; the
		// conversion allocates for those only.
		if n, err := strconv.Atoi(string(retry)); err != nil || n < 0 {
			return fmt.Errorf("%w: %s header %q (partition %d, offset %d)", kafkapub.ErrNoMetadata, kafkapub.HeaderRetry, retry, m.Partition, m.Offset)
		}
	}
	*ev = event{Tenant: d.intern(m.Key), Source: d.intern(source), ID: string(id), Type: d.intern(typ), At: m.Time.UTC()}
	return nil
}
