package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"time"

	"github.com/exactlyonce/exactlyonce/audit"
	"github.com/exactlyonce/exactlyonce/sink"
)

// The decoders below read the participants' states by their documented
// layouts (dedup/snapshot.go, dedup/incremental.go, window/snapshot.go,
// sink/chsink/participant.go, sink/cursor.go, audit/counter.go) without
// the participants' types, which a user's chain chooses (a window's
// aggregator is generic). Their tests decode states the real participants
// wrote, so a format change fails a test here, not an operator.

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// stateInfo is what show prints of one participant's state.
type stateInfo struct {
	Name  string `json:"name"`
	Bytes int    `json:"bytes"`
	Kind  string `json:"kind"` // dedup, window, sink, cursor, audit, unknown
	// Error says why a state that looks like a kind did not decode.
	Error  string         `json:"error,omitempty"`
	Dedup  *dedupInfo     `json:"dedup,omitempty"`
	Window *windowInfo    `json:"window,omitempty"`
	Sink   *sinkInfo      `json:"sink,omitempty"`
	Cursor *sink.Position `json:"cursor,omitempty"`
	Audit  *auditInfo     `json:"audit,omitempty"`
}

type dedupInfo struct {
	Keys        uint64    `json:"keys"`
	ExactKeys   bool      `json:"exact_keys"`
	Clock       time.Time `json:"clock"` // the newest event time seen
	FirstExpiry time.Time `json:"first_expiry,omitzero"`
	LastExpiry  time.Time `json:"last_expiry,omitzero"`
	// Objects names an incremental snapshot's base and deltas.
	Objects []string `json:"objects,omitempty"`
}

type windowInfo struct {
	Size, Slide, Gap time.Duration
	Watermark        time.Time `json:"watermark,omitzero"`
	Inputs           int       `json:"inputs"`
	Open             uint64    `json:"open"` // windows (or sessions) held
	FirstStart       time.Time `json:"first_start,omitzero"`
	LastStart        time.Time `json:"last_start,omitzero"`
	Events           uint64    `json:"events"` // folded into the open windows
}

type sinkInfo struct {
	Table      string         `json:"table"`
	Covered    *sink.Position `json:"covered,omitempty"` // rows durable through here
	Pending    int            `json:"pending"`           // journaled batches still to replay
	First      *sink.Position `json:"pending_first,omitempty"`
	Last       *sink.Position `json:"pending_last,omitempty"`
	ReplayFrom *sink.Position `json:"fed,omitempty"`
}

type auditInfo struct {
	Bucket string            `json:"bucket"`
	Counts int               `json:"counts"`
	Stages map[string]uint64 `json:"totals_by_stage"`
	First  time.Time         `json:"first_bucket,omitzero"`
	Last   time.Time         `json:"last_bucket,omitzero"`
}

// decodeState recognises and decodes one state; object reads an object of
// the partition's participant (for an incremental dedup snapshot).
func decodeState(ctx context.Context, name string, state []byte, object func(ctx context.Context, participant, name string) ([]byte, error)) stateInfo {
	si := stateInfo{Name: name, Bytes: len(state), Kind: "unknown"}
	fail := func(kind string, err error) stateInfo {
		si.Kind, si.Error = kind, err.Error()
		return si
	}
	switch {
	case bytes.HasPrefix(state, []byte(dedupMagic)):
		d, err := decodeDedup(ctx, state, func(o string) ([]byte, error) { return object(ctx, name, o) })
		if err != nil {
			return fail("dedup", err)
		}
		si.Kind, si.Dedup = "dedup", d
	case bytes.HasPrefix(state, []byte("EOWN")):
		w, err := decodeWindow(state)
		if err != nil {
			return fail("window", err)
		}
		si.Kind, si.Window = "window", w
	case bytes.HasPrefix(state, []byte(`{"v":`)) && bytes.Contains(state, []byte(`"table":`)):
		s, err := decodeSinkState(state)
		if err != nil {
			return fail("sink", err)
		}
		si.Kind, si.Sink = "sink", s
	case len(state) == 13 && state[0] == 1:
		var c sink.Cursor
		if err := c.Restore(ctx, state); err != nil {
			return fail("cursor", err)
		}
		p := c.Peek()
		si.Kind, si.Cursor = "cursor", &p
	case len(state) >= 14 && state[0] == 1:
		st, err := audit.DecodeState(state)
		if err != nil {
			return si // not a counter either: unknown
		}
		a := &auditInfo{Bucket: st.Bucket.String(), Counts: len(st.Counts), Stages: map[string]uint64{}}
		for _, r := range st.Counts {
			a.Stages[r.Stage] += r.Count
			if a.First.IsZero() || r.Bucket.Before(a.First) {
				a.First = r.Bucket
			}
			if r.Bucket.After(a.Last) {
				a.Last = r.Bucket
			}
		}
		si.Kind, si.Audit = "audit", a
	}
	return si
}

const dedupMagic = "EODEDUP\x00"

// decodeDedup reads a dedup snapshot: version 1 (the entries themselves)
// or version 2 (a manifest of a base and deltas in objects, each in
// version 1, whose union less what expired at the clock is the state).
func decodeDedup(ctx context.Context, b []byte, object func(name string) ([]byte, error)) (*dedupInfo, error) {
	if len(b) < 24 {
		return nil, fmt.Errorf("dedup state of %d bytes is too short", len(b))
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, errors.New("dedup state: checksum mismatch (corrupt)")
	}
	version := binary.LittleEndian.Uint16(b[8:])
	exact := binary.LittleEndian.Uint16(b[10:])&1 == 1
	clock := int64(binary.LittleEndian.Uint64(b[12:]))
	info := &dedupInfo{ExactKeys: exact, Clock: time.Unix(0, clock).UTC()}
	expiries := map[[16]byte]uint32{}
	switch version {
	case 1:
		if err := dedupEntries(b, exact, expiries); err != nil {
			return nil, err
		}
	case 2:
		n := binary.LittleEndian.Uint32(b[20:])
		r := bytes.NewReader(b[24 : len(b)-4])
		for range n {
			l, err := binary.ReadUvarint(r)
			if err != nil || l == 0 || l > 255 || int(l) > r.Len() {
				return nil, errors.New("dedup manifest: bad object name")
			}
			nb := make([]byte, l)
			_, _ = r.Read(nb)
			var rest [20]byte
			if _, err := r.Read(rest[:]); err != nil {
				return nil, errors.New("dedup manifest: truncated")
			}
			info.Objects = append(info.Objects, string(nb))
			data, err := object(string(nb))
			if err != nil {
				return nil, fmt.Errorf("dedup object %s: %w", nb, err)
			}
			if err := dedupEntries(data, exact, expiries); err != nil {
				return nil, fmt.Errorf("dedup object %s: %w", nb, err)
			}
		}
	default:
		return nil, fmt.Errorf("dedup state version %d: this build reads 1 and 2", version)
	}
	now := uint32(clock / int64(time.Second))
	for _, e := range expiries {
		if e <= now {
			continue // expired at the clock
		}
		info.Keys++
		t := time.Unix(int64(e), 0).UTC()
		if info.FirstExpiry.IsZero() || t.Before(info.FirstExpiry) {
			info.FirstExpiry = t
		}
		if t.After(info.LastExpiry) {
			info.LastExpiry = t
		}
	}
	return info, nil
}

// dedupEntries adds the entries of a version-1 snapshot to expiries, by
// hash, keeping the largest expiry.
func dedupEntries(b []byte, exact bool, expiries map[[16]byte]uint32) error {
	if len(b) < 32 || string(b[:8]) != dedupMagic || binary.LittleEndian.Uint16(b[8:]) != 1 {
		return errors.New("not a version 1 dedup snapshot")
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return errors.New("checksum mismatch (corrupt)")
	}
	n := binary.LittleEndian.Uint64(b[20:])
	r := b[28 : len(b)-4]
	for range n {
		if len(r) < 20 {
			return errors.New("truncated entries")
		}
		var h [16]byte
		copy(h[:], r[:16])
		if e := binary.LittleEndian.Uint32(r[16:20]); e > expiries[h] {
			expiries[h] = e
		}
		r = r[20:]
		if exact {
			l, k := binary.Uvarint(r)
			if k <= 0 || uint64(len(r)-k) < l {
				return errors.New("truncated key")
			}
			r = r[k+int(l):]
		}
	}
	if len(r) != 0 {
		return fmt.Errorf("%d bytes after the entries", len(r))
	}
	return nil
}

// decodeWindow reads a window operator's snapshot header and walks its
// windows without decoding their accumulators.
func decodeWindow(b []byte) (*windowInfo, error) {
	if len(b) < 9 {
		return nil, errors.New("window state too short")
	}
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, errors.New("window state: checksum mismatch (corrupt)")
	}
	version := b[4]
	if version != 1 && version != 2 {
		return nil, fmt.Errorf("window state version %d: this build reads 1 and 2", version)
	}
	r := &stickyReader{r: bytes.NewReader(b[5 : len(b)-4])}
	var w windowInfo
	w.Size, w.Slide = time.Duration(r.varint()), time.Duration(r.varint())
	r.varint() // offset
	if version == 2 {
		w.Gap = time.Duration(r.varint())
	}
	if wm := r.varint(); wm != -1<<63 {
		w.Watermark = time.Unix(0, wm).UTC()
	}
	w.Inputs = int(r.uvarint())
	for i := 0; i < w.Inputs && r.err == nil; i++ {
		r.varint() // id
		if r.skip(1) == 1 {
			r.varint() // newest event time
		}
	}
	w.Open = r.uvarint()
	for i := uint64(0); i < w.Open && r.err == nil; i++ {
		r.skip(r.uvarint()) // key
		start := time.Unix(0, r.varint()).UTC()
		if version == 2 {
			r.varint() // end
			r.skip(1)  // flags
		}
		w.Events += r.uvarint()
		r.skip(r.uvarint()) // accumulator
		if w.FirstStart.IsZero() || start.Before(w.FirstStart) {
			w.FirstStart = start
		}
		if start.After(w.LastStart) {
			w.LastStart = start
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("window state: %w", r.err)
	}
	if n := r.r.Len(); n != 0 {
		return nil, fmt.Errorf("window state: %d bytes after the windows", n)
	}
	return &w, nil
}

// stickyReader reads varints and skips bytes, keeping the first error:
// the reads after it return zero.
type stickyReader struct {
	r   *bytes.Reader
	err error
}

var errTruncated = errors.New("truncated")

func (s *stickyReader) varint() int64 {
	if s.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(s.r)
	if err != nil {
		s.err = errTruncated
	}
	return v
}

func (s *stickyReader) uvarint() uint64 {
	if s.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(s.r)
	if err != nil {
		s.err = errTruncated
	}
	return v
}

// skip skips n bytes and returns the last one skipped (0 when none).
func (s *stickyReader) skip(n uint64) byte {
	if s.err != nil || n == 0 {
		return 0
	}
	if n > uint64(s.r.Len()) {
		s.err = errTruncated
		return 0
	}
	_, _ = s.r.Seek(int64(n-1), io.SeekCurrent)
	c, _ := s.r.ReadByte()
	return c
}

func decodeSinkState(b []byte) (*sinkInfo, error) {
	var st struct {
		Version    int           `json:"v"`
		Table      string        `json:"table"`
		HasCovered bool          `json:"has_covered"`
		Covered    sink.Position `json:"covered"`
		Pending    struct {
			Count       int
			First, Last sink.Position
		} `json:"pending"`
		Fed *sink.Position `json:"fed"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("sink state: %w", err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("sink state version %d: this build reads 1", st.Version)
	}
	s := &sinkInfo{Table: st.Table, Pending: st.Pending.Count, ReplayFrom: st.Fed}
	if st.HasCovered {
		s.Covered = &st.Covered
	}
	if st.Pending.Count > 0 {
		s.First, s.Last = &st.Pending.First, &st.Pending.Last
	}
	return s, nil
}

// journalInfo is a sink journal as show prints it.
type journalInfo struct {
	Name     string         `json:"name"` // table/topic/partition
	Epoch    uint64         `json:"epoch"`
	Owner    string         `json:"owner"`
	Pruned   *sink.Position `json:"pruned,omitempty"` // entries through here are gone
	Intents  []sink.Intent  `json:"intents"`
	Acks     int            `json:"acks"` // ack records of replayed batches
	Problems []string       `json:"problems,omitempty"`
}

// readJournals reads the sink journals of topic/partition: the owner
// record (its epoch, owner and prune point), the intents and the acks,
// laid out as sink/internal/journal documents.
func readJournals(ctx context.Context, st interface {
	Get(context.Context, string) ([]byte, error)
	List(context.Context, string) ([]string, error)
}, topic string, partition int) ([]journalInfo, error) {
	names, err := st.List(ctx, sink.JournalPrefix)
	if err != nil {
		return nil, err
	}
	suffix := fmt.Sprintf("/%s/%d/", topic, partition)
	byDir := map[string]*journalInfo{}
	var order []string
	for _, n := range names {
		rest := strings.TrimPrefix(n, sink.JournalPrefix)
		i := strings.LastIndexByte(rest, '/')
		if i < 0 || !strings.HasSuffix(rest[:i+1], suffix) {
			continue
		}
		dir, file := rest[:i], rest[i+1:]
		j := byDir[dir]
		if j == nil {
			j = &journalInfo{Name: dir, Intents: []sink.Intent{}}
			byDir[dir] = j
			order = append(order, dir)
		}
		data, err := st.Get(ctx, n)
		if err != nil {
			j.Problems = append(j.Problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		switch {
		case file == "owner":
			var o struct {
				Epoch  uint64         `json:"epoch"`
				Owner  string         `json:"owner"`
				Pruned *sink.Position `json:"pruned"`
			}
			if err := json.Unmarshal(data, &o); err != nil {
				j.Problems = append(j.Problems, fmt.Sprintf("owner record: %v", err))
				continue
			}
			j.Epoch, j.Owner, j.Pruned = o.Epoch, o.Owner, o.Pruned
		case strings.HasPrefix(file, "b-"):
			var in sink.Intent
			if err := json.Unmarshal(data, &in); err != nil {
				j.Problems = append(j.Problems, fmt.Sprintf("intent %s: %v", file, err))
				continue
			}
			if in.Version != sink.IntentVersion || in.Topic != topic || in.Partition != partition || in.Last.Compare(in.First) < 0 {
				j.Problems = append(j.Problems, fmt.Sprintf("intent %s: version %d, %s/%d, %v..%v: not an intent of this journal", file, in.Version, in.Topic, in.Partition, in.First, in.Last))
				continue
			}
			j.Intents = append(j.Intents, in)
		case strings.HasPrefix(file, "a-"):
			j.Acks++
		default:
			j.Problems = append(j.Problems, fmt.Sprintf("%s: unknown journal object", file))
		}
	}
	out := make([]journalInfo, 0, len(order))
	for _, d := range order {
		j := byDir[d]
		if j.Owner == "" && len(j.Problems) == 0 {
			j.Problems = append(j.Problems, "no owner record")
		}
		out = append(out, *j)
	}
	return out, nil
}
