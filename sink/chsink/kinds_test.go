package chsink

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// KindRow has a field of every column kind the sink maps: each constructor,
// plus Col over ch-go columns that need preparation or a state prefix
// (LowCardinality inside an Array, Map, Nullable inside an Array).
type KindRow struct {
	ID    uint64
	S     string
	LC    string
	I64   int64
	I32   int32
	U64   uint64
	U32   uint32
	U8    uint8
	F     float64
	Milli time.Time
	Nano  time.Time
	NS    proto.Nullable[string]
	NI    proto.Nullable[int64]
	AS    []string
	AI    []int64
	ALC   []string
	ANS   []proto.Nullable[string]
	M     map[string]uint64
}

// KindDDL creates the table for KindRow; %s is the database.
const KindDDL = `CREATE TABLE %s.kinds (
	id UInt64, s String, lc LowCardinality(String), i64 Int64, i32 Int32,
	u64 UInt64, u32 UInt32, u8 UInt8, f Float64, milli DateTime64(3), nano DateTime64(9),
	ns Nullable(String), ni Nullable(Int64), as Array(String), ai Array(Int64),
	alc Array(LowCardinality(String)), ans Array(Nullable(String)), m Map(String, UInt64)
) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100, enable_block_number_column = 1`

// KindSchema maps KindRow.
func KindSchema() []Column[KindRow] {
	return []Column[KindRow]{
		UInt64("id", func(r *KindRow) uint64 { return r.ID }),
		String("s", func(r *KindRow) string { return r.S }),
		LowCardinality("lc", func(r *KindRow) string { return r.LC }),
		Int64("i64", func(r *KindRow) int64 { return r.I64 }),
		Int32("i32", func(r *KindRow) int32 { return r.I32 }),
		UInt64("u64", func(r *KindRow) uint64 { return r.U64 }),
		UInt32("u32", func(r *KindRow) uint32 { return r.U32 }),
		UInt8("u8", func(r *KindRow) uint8 { return r.U8 }),
		Float64("f", func(r *KindRow) float64 { return r.F }),
		DateTime64("milli", proto.PrecisionMilli, func(r *KindRow) time.Time { return r.Milli }),
		DateTime64("nano", proto.PrecisionNano, func(r *KindRow) time.Time { return r.Nano }),
		Nullable("ns", new(proto.ColStr), func(r *KindRow) proto.Nullable[string] { return r.NS }),
		Nullable("ni", new(proto.ColInt64), func(r *KindRow) proto.Nullable[int64] { return r.NI }),
		Array("as", new(proto.ColStr), func(r *KindRow) []string { return r.AS }),
		Array("ai", new(proto.ColInt64), func(r *KindRow) []int64 { return r.AI }),
		Array("alc", proto.NewLowCardinality[string](new(proto.ColStr)), func(r *KindRow) []string { return r.ALC }),
		Array("ans", proto.NewColNullable[string](new(proto.ColStr)), func(r *KindRow) []proto.Nullable[string] { return r.ANS }),
		Map("m", new(proto.ColStr), new(proto.ColUInt64), func(r *KindRow) map[string]uint64 { return r.M }),
	}
}

// KindRows returns n rows, ids from first, that cycle through edge cases:
// empty and unicode strings, NULL and empty-but-not-NULL, empty arrays and
// maps, extreme integers, sub-millisecond times.
func KindRows(first uint64, n int) []KindRow {
	strs := []string{"", "héllo, 世界 🌍", "plain", "tab\tnew\nline\x00nul", "ünïcödé ✓"}
	rows := make([]KindRow, n)
	for i := range rows {
		id := first + uint64(i)
		k := int(id)
		r := KindRow{
			ID: id, S: strs[k%len(strs)], LC: []string{"push", "", "pr.merged", "ïssue"}[k%4],
			I64: []int64{math.MinInt64, -1, 0, math.MaxInt64}[k%4] + int64(k%2), I32: []int32{math.MinInt32, math.MaxInt32, int32(k)}[k%3],
			U64: []uint64{0, math.MaxUint64, id}[k%3], U32: []uint32{0, math.MaxUint32, uint32(k)}[k%3], U8: uint8(k * 37),
			F:     []float64{0, -2.25e300, 1.5, math.Inf(1), math.SmallestNonzeroFloat64}[k%5],
			Milli: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000*k%1_000_000_000, time.UTC).Truncate(time.Millisecond),
			Nano:  time.Date(1999, 12, 31, 23, 59, 59, 123_456_789+k, time.UTC),
			AS:    []string{}, AI: []int64{}, ALC: []string{}, ANS: []proto.Nullable[string]{}, M: map[string]uint64{},
		}
		switch k % 3 {
		case 0: // NULLs
		case 1:
			r.NS, r.NI = proto.NewNullable(""), proto.NewNullable(int64(0)) // empty, not NULL
		case 2:
			r.NS, r.NI = proto.NewNullable(strs[1]), proto.NewNullable(int64(-k))
		}
		for j := 0; j < k%4; j++ { // 0 to 3 elements, so a quarter of the arrays are empty
			r.AS = append(r.AS, strs[(k+j)%len(strs)])
			r.AI = append(r.AI, int64(j-k))
			r.ALC = append(r.ALC, []string{"a", "β", ""}[j%3])
			if j%2 == 0 {
				r.ANS = append(r.ANS, proto.Null[string]())
			} else {
				r.ANS = append(r.ANS, proto.NewNullable(strs[j%len(strs)]))
			}
			r.M[strs[(k+j)%len(strs)]] = uint64(j)
		}
		rows[i] = r
	}
	return rows
}

// OneEntryMaps keeps, in each row's map, only the smallest key: the batch
// pinned by TestSealHashIsStable predates Map's key order, and with one
// entry per map both orders encode alike.
func OneEntryMaps(rows []KindRow) []KindRow {
	for i := range rows {
		if m := rows[i].M; len(m) > 1 {
			k := slices.Min(slices.Collect(maps.Keys(m)))
			rows[i].M = map[string]uint64{k: m[k]}
		}
	}
	return rows
}
