package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
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
	// one of the later generation wins.
	Generation int64
	Member     string
}

// ErrCorrupt is wrapped by errors from Decode for bytes that are not a whole,
// intact checkpoint: truncated or bit-flipped.
var ErrCorrupt = errors.New("checkpoint: corrupt checkpoint")

// ErrUnsupportedVersion is wrapped by errors from Decode for a checkpoint
// file of a format version this build does not read (a newer program wrote
// it). Nothing is decoded.
var ErrUnsupportedVersion = errors.New("checkpoint: unsupported checkpoint version")

// File layout, version 1 (all integers big endian):
//
//	magic    [8]byte  "EOCKPT01"
//	hlen     uint32   length of header
//	header   [hlen]byte JSON of fileHeader
//	states   the participants' states, concatenated in header order
//	crc      uint32   CRC-32C (Castagnoli) of every byte before it
//
// The states are raw bytes rather than JSON so that a state of hundreds of
// megabytes (ten million dedup keys) costs one copy, not a base64 expansion.
const magic = "EOCKPT01"

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
}

type fileState struct {
	Name string `json:"name"`
	Size int    `json:"size"`
}

// Encode returns the durable form of cp. Participant states are written in
// name order, so equal checkpoints encode to equal bytes.
func Encode(cp *Checkpoint) ([]byte, error) {
	names := make([]string, 0, len(cp.States))
	total := 0
	for name, s := range cp.States {
		names = append(names, name)
		total += len(s)
	}
	sort.Strings(names)
	h := fileHeader{
		ID: uint64(cp.ID), Topic: cp.Partition.Topic, Partition: cp.Partition.Partition,
		NextOffset: cp.NextOffset, Created: cp.Created.UTC(), DurationNS: int64(cp.Duration),
		Generation: cp.Generation, Member: cp.Member,
		States: make([]fileState, len(names)),
	}
	for i, name := range names {
		h.States[i] = fileState{Name: name, Size: len(cp.States[name])}
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode: %w", err)
	}
	buf := make([]byte, 0, len(magic)+4+len(hb)+total+4)
	buf = append(buf, magic...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(hb)))
	buf = append(buf, hb...)
	for _, name := range names {
		buf = append(buf, cp.States[name]...)
	}
	buf = binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
	return buf, nil
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
	if string(data[:len(magic)]) != magic {
		if string(data[:len(magicFamily)]) == magicFamily {
			return nil, fmt.Errorf("%w: version %q, this build reads %q", ErrUnsupportedVersion, data[len(magicFamily):len(magic)], magic[len(magicFamily):])
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
	cp := &Checkpoint{
		ID: ID(h.ID), Partition: TopicPartition{Topic: h.Topic, Partition: h.Partition},
		NextOffset: h.NextOffset, Created: h.Created, Duration: time.Duration(h.DurationNS),
		Generation: h.Generation, Member: h.Member,
		States: make(map[string][]byte, len(h.States)),
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
