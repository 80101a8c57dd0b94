package sink

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// JournalPrefix is the storage name prefix under which journals live:
// JournalPrefix + table + "/" + topic + "/" + partition + "/".
const JournalPrefix = "sink-journal/"

// IntentVersion is the Version of the intents the journal writes.
const IntentVersion = 1

// Intent is one journal entry: a batch the sink is about to insert (or did
// insert), identified by its source positions. It is recorded durably before
// the insert. Once ClickHouse acknowledged it, the ack normally rides on the
// next intent of the same epoch (AckedThrough) and a load reports the entry as
// Acked; a replayed batch's ack is a record of its own beside the entry.
type Intent struct {
	Version   int       `json:"v"`
	Table     string    `json:"table"`
	Topic     string    `json:"topic"`
	Partition int       `json:"partition"`
	First     Position  `json:"first"`
	Last      Position  `json:"last"`
	Rows      int       `json:"rows"`
	Hash      uint64    `json:"hash"`
	Token     string    `json:"token"`
	Epoch     uint64    `json:"epoch"` // owner epoch that wrote the intent
	Owner     string    `json:"owner"` // instance that wrote the intent
	Created   time.Time `json:"created"`
	// Block is the table's highest block number seen just before the insert,
	// used to tell whether a re-insert is still inside the deduplication
	// window; -1 when unknown.
	Block int64 `json:"block"`
	Acked bool  `json:"acked"`
	// AckEpoch is the owner epoch that set Acked.
	AckEpoch uint64 `json:"ack_epoch,omitempty"`
	// AckedThrough, set when the intent is recorded, acknowledges the earlier
	// entries of the same epoch and owner that end at or before it: the ack
	// of batch N rides on the intent of batch N+1 instead of a write of its
	// own. A load reports such entries as Acked.
	AckedThrough *Position `json:"acked_through,omitempty"`
	// Supersedes is the token of the journaled batch over the same positions
	// that this one replaces: the replayed rows differed and were inserted
	// again under a fresh token (see ReinsertToken). A load returns this entry
	// in place of the one it supersedes.
	Supersedes string `json:"supersedes,omitempty"`
	// Earlier lists the versions of this token's batch that an insert may
	// have written before this entry's own, oldest first: a replay cut
	// short at its last row (a stalled replay) is journaled before its
	// insert, under the same token, and the server then holds whichever
	// version landed first. A part of the table whose first block is at or
	// below Earlier[i].Block holds the version that ends at Earlier[i].Last.
	Earlier []Prior `json:"earlier,omitempty"`
	// Boot names the ClickHouse server's run (start to stop) in which the
	// intent was journaled; empty when unknown. A part can be lost, or its
	// name reused by another insert, only across a restart, so a replay on
	// the same run needs no check of the parts.
	Boot string `json:"boot,omitempty"`
}

// Prior is an earlier version of a journaled batch (see Intent.Earlier).
type Prior struct {
	Block int64    `json:"block"` // the table's last block before its insert
	Last  Position `json:"last"`
}

// ReinsertToken returns the insert_deduplication_token for content with
// hash replayed into the positions of a journaled batch whose token is prev
// but whose content differed. It is deterministic, so a second replay of
// the same new content gets the same token and ClickHouse drops it, and it
// differs from prev and from every token derived along another history:
// the suffix hashes prev (itself possibly derived) with the new hash.
func ReinsertToken(prev string, hash uint64) string {
	root, _, _ := strings.Cut(prev, "~r")
	h := fnv.New64a()
	_, _ = h.Write([]byte(prev))
	_, _ = h.Write(binary.BigEndian.AppendUint64(nil, hash))
	return fmt.Sprintf("%s~r%016x", root, h.Sum64())
}
