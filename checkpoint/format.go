package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strconv"
	"time"
)

// TopicPartition names one Kafka topic-partition: the unit that owns a
// processing chain, its participants' state, its checkpoints and a sink's
// journal. Partition is an int, as in kafka-go's Message.Partition and
// group assignments, so a partition from kafka-go needs no conversion.
type TopicPartition struct {
	Topic     string
	Partition int
}

// String formats p as "topic/partition".
func (p TopicPartition) String() string { return p.Topic + "/" + strconv.Itoa(p.Partition) }

// Checkpoint is one completed checkpoint of one partition's chain: the next
// offset to read and every participant's state at that same position.
type Checkpoint struct {
	ID        ID
	Partition TopicPartition
	// NextOffset is the offset of the first record the state does not
	// reflect: a restored chain reads from here.
	NextOffset int64
	// States holds each participant's Snapshot, by participant name.
	States map[string][]byte
	// Created is when the checkpoint was triggered (the clock of Options.Now).
	Created time.Time
	// Duration is how long the snapshots took, up to the metadata write.
	Duration time.Duration
	// Generation and Member identify the consumer-group generation that
	// wrote the checkpoint. Between two checkpoints with the same ID the
	// one of the later generation wins, and a later generation's
	// checkpoint newer than the start of another's lineage supersedes it
	// (see ErrSuperseded).
	Generation int64
	Member     string
	// Objects names the objects, beside the checkpoint file, that the
	// states reference (an incremental snapshot's base and deltas), as
	// "<participant>/<object>". Store never deletes an object a retained
	// checkpoint names, and restore skips a checkpoint whose objects are
	// missing. Filled by Task.Checkpoint from ObjectParticipant.References.
	Objects []string
	// Parent is the checkpoint this one descends from: the newest
	// checkpoint that the chain which took it had restored, or completed
	// (its participants notified), before this one's barrier; 0 when that
	// chain started fresh. Its output was confirmed intact then (every
	// Resolver accepted it, or every CheckpointCompleted returned). A
	// restore that finds this checkpoint's output lost, and nothing older
	// retained, starts fresh only for Parent 0; Store.Save never prunes
	// the saved checkpoint's parent. Filled by Task.Begin.
	Parent ID
	// ParentUnknown is set by Decode for a file of format version 1,
	// which does not record Parent (Parent is then 0). Encode writes such
	// a checkpoint in version 1, so a file re-encodes to the same bytes.
	ParentUnknown bool
}

// ErrCorrupt is wrapped by errors from Decode for bytes that are not a whole,
// intact checkpoint: truncated or bit-flipped.
var ErrCorrupt = errors.New("checkpoint: corrupt checkpoint")

// ErrUnsupportedVersion is wrapped by errors from Decode for a checkpoint
// file of a format version this build does not read (a newer program wrote
// it). Nothing is decoded.
var ErrUnsupportedVersion = errors.New("checkpoint: unsupported checkpoint version")

// File layout, version 2 (all integers big endian):
//
//	magic    [8]byte  "EOCKPT02"
//	hlen     uint32   length of header
//	header   [hlen]byte JSON of fileHeader
//	states   the participants' states, concatenated in header order
//	crc      uint32   CRC-32C (Castagnoli) of every byte before it
//
// The states are raw bytes rather than JSON so that a state of hundreds of
// megabytes (ten million dedup keys) costs no base64 expansion; Store writes
// the file as a stream from the participants' states, computing the CRC on
// the way, so a state is never copied into one file-sized buffer.
//
// The header's "objects" member (Checkpoint.Objects) is optional and left
// out when empty, so a checkpoint without objects encodes to the same bytes
// as before it existed; a reader that does not know it ignores it (and then
// restores a participant whose state references objects only if that
// participant reads them itself).
//
// Version 2 adds the header's "parent" member (Checkpoint.Parent), always
// present: its absence in a version 1 file ("EOCKPT01", otherwise the same
// layout) means the parent is unknown, and 0 is a meaningful parent (a
// fresh start), so the version, not an optional member, says which. This
// build reads both versions and writes version 2 (version 1 only for a
// checkpoint Decode read from a version 1 file).
const (
	magic   = "EOCKPT02"
	magicV1 = "EOCKPT01"
)

// magicFamily is the magic without its two version digits.
const magicFamily = "EOCKPT"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type fileHeader struct {
	ID         uint64      `json:"id"`
	Topic      string      `json:"topic"`
	Partition  int         `json:"partition"`
	NextOffset int64       `json:"next_offset"`
	Created    time.Time   `json:"created"`
	DurationNS int64       `json:"duration_ns"`
	Generation int64       `json:"generation"`
	Member     string      `json:"member,omitempty"`
	States     []fileState `json:"states"`
	Objects    []string    `json:"objects,omitempty"`
	Parent     *uint64     `json:"parent,omitempty"` // always set in version 2, never in 1
}

type fileState struct {
	Name string `json:"name"`
	Size int    `json:"size"`
}

// Encode returns the durable form of cp. Participant states are written in
// name order, so equal checkpoints encode to equal bytes.
func Encode(cp *Checkpoint) ([]byte, error) {
	size := 0
	for _, st := range cp.States {
		size += len(st)
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(magic)+4+512+size+4))
	if _, err := EncodeTo(buf, cp); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EncodeTo writes what Encode returns to w, without building it in memory:
// the header, then each state as it is, with the CRC computed on the way.
// It returns the number of bytes written.
func EncodeTo(w io.Writer, cp *Checkpoint) (int64, error) {
	names := make([]string, 0, len(cp.States))
	for name := range cp.States {
		names = append(names, name)
	}
	sort.Strings(names)
	h := fileHeader{
		ID: uint64(cp.ID), Topic: cp.Partition.Topic, Partition: cp.Partition.Partition,
		NextOffset: cp.NextOffset, Created: cp.Created.UTC(), DurationNS: int64(cp.Duration),
		Generation: cp.Generation, Member: cp.Member,
		States:  make([]fileState, len(names)),
		Objects: cp.Objects,
	}
	for i, name := range names {
		h.States[i] = fileState{Name: name, Size: len(cp.States[name])}
	}
	m := magicV1
	if !cp.ParentUnknown {
		m = magic
		parent := uint64(cp.Parent)
		h.Parent = &parent
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: encode: %w", err)
	}
	cw := &crcWriter{w: w}
	head := make([]byte, 0, len(m)+4+len(hb))
	head = append(head, m...)
	head = binary.BigEndian.AppendUint32(head, uint32(len(hb)))
	head = append(head, hb...)
	if _, err := cw.Write(head); err != nil {
		return cw.n, err
	}
	for _, name := range names {
		if _, err := cw.Write(cp.States[name]); err != nil {
			return cw.n, err
		}
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, cw.crc)); err != nil {
		return cw.n, err
	}
	return cw.n + 4, nil
}

// crcWriter passes writes on to w and keeps the CRC-32C and the count of
// the bytes written.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// Decode parses bytes written by Encode. Any damage yields an error wrapping
// ErrCorrupt. The returned states alias data.
func Decode(data []byte) (*Checkpoint, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(data) < len(magic)+4+4 {
		return nil, corrupt("%d bytes is too short", len(data))
	}
	v1 := string(data[:len(magic)]) == magicV1
	if string(data[:len(magic)]) != magic && !v1 {
		if string(data[:len(magicFamily)]) == magicFamily {
			return nil, fmt.Errorf("%w: version %q, this build reads %q and %q", ErrUnsupportedVersion,
				data[len(magicFamily):len(magic)], magicV1[len(magicFamily):], magic[len(magicFamily):])
		}
		return nil, corrupt("bad magic %q", data[:len(magic)])
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, corrupt("checksum %08x, want %08x", got, sum)
	}
	hlen := int(binary.BigEndian.Uint32(body[len(magic):]))
	rest := body[len(magic)+4:]
	if hlen > len(rest) {
		return nil, corrupt("header length %d beyond end", hlen)
	}
	var h fileHeader
	if err := json.Unmarshal(rest[:hlen], &h); err != nil {
		return nil, corrupt("header: %v", err)
	}
	rest = rest[hlen:]
	if v1 != (h.Parent == nil) {
		return nil, corrupt("parent recorded in version %q", data[len(magicFamily):len(magic)])
	}
	for _, o := range h.Objects {
		if !ValidName(o) {
			return nil, corrupt("object name %q", o)
		}
	}
	cp := &Checkpoint{
		ID: ID(h.ID), Partition: TopicPartition{Topic: h.Topic, Partition: h.Partition},
		NextOffset: h.NextOffset, Created: h.Created, Duration: time.Duration(h.DurationNS),
		Generation: h.Generation, Member: h.Member,
		States: make(map[string][]byte, len(h.States)), Objects: h.Objects,
		ParentUnknown: v1,
	}
	if h.Parent != nil {
		cp.Parent = ID(*h.Parent)
	}
	for _, s := range h.States {
		if s.Size < 0 || s.Size > len(rest) {
			return nil, corrupt("state %q of %d bytes beyond end", s.Name, s.Size)
		}
		if _, dup := cp.States[s.Name]; dup {
			return nil, corrupt("state %q twice", s.Name)
		}
		cp.States[s.Name] = rest[:s.Size:s.Size]
		rest = rest[s.Size:]
	}
	if len(rest) != 0 {
		return nil, corrupt("%d trailing bytes", len(rest))
	}
	return cp, nil
}
