package chaudit

import (
	"context"
	"fmt"
	"hash/crc32"

	"github.com/ClickHouse/ch-go"
	"github.com/ClickHouse/ch-go/proto"
)

// Shard is one of Shards parts of the event-id space, so a full scan by
// event id holds one part in memory at a time: the ids whose IEEE CRC-32
// (ClickHouse's CRC32) modulo Shards is Index.
type Shard struct{ Index, Shards int }

// Has reports whether id is in the shard.
func (s Shard) Has(id string) bool {
	return s.Shards <= 1 || int(crc32.ChecksumIEEE([]byte(id))%uint32(s.Shards)) == s.Index
}

// ScanIDs calls fn with each event id of database.table in shard and the
// number of rows holding it (with final, as SELECT … FINAL reads a
// ReplacingMergeTree), grouped in ClickHouse, so only the ids of the shard
// cross the wire. A table without the column is an error wrapping
// ErrSchema.
func ScanIDs(ctx context.Context, opts ch.Options, database, table, column string, final bool, shard Shard, fn func(id string, rows uint64)) error {
	c, err := dial(ctx, opts)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := checkColumns(ctx, c, database, table, []string{column}); err != nil {
		return err
	}
	fin, where := "", ""
	if final {
		fin = " FINAL"
	}
	id := "CAST(toString(" + ident(column) + "), 'String')"
	if shard.Shards > 1 {
		where = fmt.Sprintf(" WHERE CRC32(%s) %% %d = %d", id, shard.Shards, shard.Index)
	}
	var (
		ids proto.ColStr
		n   proto.ColUInt64
	)
	err = c.Do(ctx, ch.Query{
		Body:   fmt.Sprintf("SELECT %s AS id, count() AS n FROM %s.%s%s%s GROUP BY id", id, ident(database), ident(table), fin, where),
		Result: proto.Results{{Name: "id", Data: &ids}, {Name: "n", Data: &n}},
		OnResult: func(context.Context, proto.Block) error {
			for i := range ids.Rows() {
				fn(ids.Row(i), n[i])
			}
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("chaudit: scan the ids of %s.%s: %w", database, table, err)
	}
	return nil
}
