package repair

// The lost-part check: does a table hold what the insert of a batch wrote
// there? The server's deduplication log names the part (partition_N_N_0,
// N the block number the insert took), but after a restart that name may
// be another insert's: the server numbers blocks on from its highest
// surviving part. So the check compares content, not names:
//
//   - the named part still unmerged: its rows are compared with what the
//     insert wrote (the batch, or a view's rows of it, written into a
//     staging copy of the table, so the engine folds them on insert as it
//     did then), as a multiset fingerprint; a read by the part's name
//     counts only if the part was still active after it (a merge may
//     retire it meanwhile: see readBlock);
//   - merged, in a MergeTree that keeps every row and stores each row's
//     block number (enable_block_number_column = 1): the rows of block N,
//     compared the same way;
//   - merged, in a ReplacingMergeTree: each row's sorting key at a version
//     at least the row's (see lostPartProof); any other shape merged is
//     refused by New (proofcheck.go).
//
// content is all it goes by: another insert that took the lost part's name
// with the same rows (and, stored, the same block number) passes for the
// batch's. A Replacing table does not mind; a plain MergeTree view target,
// whose rows another partition's batch may repeat, is refused unless
// Options.DistinctViewRows (reproducible, and lacks for one added later).

import (
	"context"
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// proof says how the sink tells whether a table of engine holds a block
// that the server deduplicated a re-insert against (see lostPartProof).
type proof uint8

const (
	// proofNone: the engine commits the block's token and its part
	// together (Replicated and Shared tables, in Keeper): nothing to check.
	proofNone proof = iota
	// proofRows: merges keep every row (MergeTree): the rows of the block
	// are compared exactly, by the block number each row stores; New
	// accepts the table only with enable_block_number_column (provable).
	proofRows
	// proofKeys: merges keep one row per sorting key (the Replacing
	// family): the block's rows are held when their keys are there at a
	// version at least theirs, which is what the engine itself promises (a
	// row of the same key and a version as high replaces them in FINAL).
	proofKeys
	// proofFolded: merges fold rows of a key into one (Aggregating,
	// Summing, Collapsing, Coalescing, Graphite): once the block's part is
	// merged, its rows cannot be told from other inserts' rows of the same
	// keys. New refuses such a table unless replicated (provable).
	proofFolded
)

// lostPartProof is where the sink decides whether the lost-part check and
// repair apply to a table of this engine (system.tables.engine), and how
// it proves a block held. It is the one place to change for an engine.
func lostPartProof(engine string) proof {
	if strings.HasPrefix(engine, "Replicated") || strings.HasPrefix(engine, "Shared") {
		return proofNone
	}
	switch engine {
	case "MergeTree":
		return proofRows
	case "ReplacingMergeTree":
		return proofKeys
	}
	return proofFolded
}

// tableFacts are what the check needs to know of a table.
type tableFacts struct {
	engine     string
	sortingKey string // as system.tables has it; "" for none
	version    string // a ReplacingMergeTree's version column; "" for none
}

// facts reads db.table's engine, sorting key and version column.
func (v *verifier) facts(ctx context.Context, db, table string) (tableFacts, error) {
	rows, err := chsql.Strings(ctx, v.c, fmt.Sprintf(
		"SELECT engine AS c0, sorting_key AS c1, engine_full AS c2 FROM system.tables WHERE database = %s AND name = %s",
		chsql.Quote(db), chsql.Quote(table)), 3)
	if err != nil {
		return tableFacts{}, err
	}
	if len(rows) != 1 {
		return tableFacts{}, fmt.Errorf("table %s.%s does not exist", db, table)
	}
	f := tableFacts{engine: rows[0][0], sortingKey: rows[0][1]}
	if lostPartProof(f.engine) == proofKeys {
		f.version = replacingVersion(rows[0][2])
	}
	return f, nil
}

// fingerprint returns the row count and a hash of the multiset of rows of
// db.table matching where, over cols: equal fingerprints are equal
// multisets of rows (but for a 64-bit hash collision).
func (v *verifier) fingerprint(ctx context.Context, db, table, where string, cols []string) (string, error) {
	rows, err := chsql.Strings(ctx, v.c, fmt.Sprintf(
		"SELECT toString(count()) || '/' || toString(sum(cityHash64(formatRow('RowBinary', %s)))) AS c0 FROM %s.%s WHERE %s",
		chsql.JoinIdents(cols), chsql.Ident(db), chsql.Ident(table), where), 1)
	if err != nil {
		return "", err
	}
	if len(rows) != 1 {
		return "", fmt.Errorf("fingerprint of %s.%s: no answer", db, table)
	}
	return rows[0][0], nil
}

// blockRows is the condition on a table's rows that selects what the
// insert that took part's block number wrote there: the part itself,
// still unmerged, or (with stored block numbers) the rows of that block.
func blockRows(part string, byNumber bool) string {
	p, lo, _, ok := PartBlocks(part)
	if !byNumber || !ok {
		return "_part = " + chsql.Quote(part)
	}
	return fmt.Sprintf("_partition_id = %s AND _block_number = %d", chsql.Quote(p), lo)
}

// staged is a staging table, in the sink's database, holding what an
// insert wrote into a table, and the columns that insert wrote (the
// others took their defaults, which a second insert need not repeat:
// now(), say).
type staged struct {
	table string
	cols  []string
}

// exact tells, when it can, whether db.table holds the block the
// deduplication log named as part: decided reports whether it could. want
// are the staging tables holding what the insert may have written into
// db.table, one per view writing there (the batch itself for the sink's
// table); the block is held when its rows are one of them, partition by
// partition.
func (v *verifier) exact(ctx context.Context, db, table, part string, f tableFacts, want []staged) (held, decided bool, err error) {
	var got []string
	ok, err := v.readBlock(ctx, db, table, part, f, func(where string) error {
		got = got[:0]
		for _, w := range want {
			fp, err := v.fingerprint(ctx, db, table, where, w.cols)
			if err != nil {
				return err
			}
			got = append(got, fp)
		}
		return nil
	})
	if err != nil || !ok {
		return false, false, err
	}
	pid, _, _, _ := PartBlocks(part)
	for i, w := range want {
		exp, err := v.fingerprint(ctx, v.r.db, w.table, "_partition_id = "+chsql.Quote(pid), w.cols)
		if err != nil {
			return false, false, err
		}
		if exp == got[i] {
			return true, true, nil
		}
	}
	return false, true, nil
}

// readBlock runs read over the rows of the block the server named as part
// (see blockCond); ok is false when they cannot be selected (merged, and
// no block numbers stored). A merge may retire the part after blockCond
// found it active and before read runs, and a query reads active parts
// only: read would find none of the block's rows, and the block would be
// taken for lost and repaired, written twice. So a read by the part's name
// counts only if the part was still active after it (a retired part never
// comes back, so it was active throughout); otherwise the block is read
// again, merged.
func (v *verifier) readBlock(ctx context.Context, db, table, part string, f tableFacts, read func(where string) error) (ok bool, err error) {
	for range 3 {
		where, ok, err := v.blockCond(ctx, db, table, part, f)
		if err != nil || !ok {
			return false, err
		}
		if err := v.r.step("located"); err != nil {
			return false, err
		}
		if err := read(where); err != nil {
			return false, err
		}
		if where != blockRows(part, false) {
			return true, nil // by block number: merges keep it
		}
		if active, err := v.active(ctx, db, table, part); err != nil || active {
			return active, err
		}
	}
	return false, fmt.Errorf("part %s of %s.%s: merged away while its rows were read, again and again", part, db, table)
}

// active reports whether part is an active part of db.table.
func (v *verifier) active(ctx context.Context, db, table, part string) (bool, error) {
	rows, err := chsql.Strings(ctx, v.c, fmt.Sprintf(
		"SELECT name AS c0 FROM system.parts WHERE active AND database = %s AND table = %s AND name = %s",
		chsql.Quote(db), chsql.Quote(table), chsql.Quote(part)), 1)
	return len(rows) > 0, err
}

// blockCond returns the condition on db.table's rows that selects exactly
// the rows of the block the server named as part (see blockRows): ok is
// false once that part is merged, unless the table keeps every row and
// stores its block number.
func (v *verifier) blockCond(ctx context.Context, db, table, part string, f tableFacts) (where string, ok bool, err error) {
	active, err := v.active(ctx, db, table, part)
	if err != nil {
		return "", false, err
	}
	if active {
		return blockRows(part, false), true, nil
	}
	if lostPartProof(f.engine) != proofRows {
		return "", false, nil
	}
	byNumber, err := v.storesBlockNumbers(ctx, db, table, part)
	if err != nil || !byNumber {
		return "", false, err
	}
	return blockRows(part, true), true, nil
}

// storesBlockNumbers reports whether every active part of db.table that
// covers part's block stores each row's block number (a table with
// enable_block_number_column = 1): the block's rows can then be read out
// of merged parts.
func (v *verifier) storesBlockNumbers(ctx context.Context, db, table, part string) (bool, error) {
	p, lo, hi, ok := PartBlocks(part)
	if !ok {
		return false, nil
	}
	rows, err := chsql.Strings(ctx, v.c, fmt.Sprintf(
		"SELECT toString(count()) AS c0, toString(countIf(name IN (SELECT part_name FROM system.parts_columns WHERE database = %[1]s AND table = %[2]s AND column = '_block_number'))) AS c1 "+
			"FROM system.parts WHERE active AND database = %[1]s AND table = %[2]s AND partition_id = %[3]s AND min_block_number <= %[4]d AND max_block_number >= %[5]d",
		chsql.Quote(db), chsql.Quote(table), chsql.Quote(p), lo, hi), 2)
	if err != nil || len(rows) != 1 {
		return false, err
	}
	return rows[0][0] != "0" && rows[0][0] == rows[0][1], nil
}
