package chsink

import (
	"cmp"
	"slices"
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// Column maps one field of a row type T to a ClickHouse column. It owns a
// ch-go proto column whose buffers the sink resets and reuses between
// batches. Appending a row calls a typed getter: no reflection.
//
// A Column belongs to one sink: build columns in a Schema function, which
// the sink calls for each set of column buffers it keeps.
type Column[T any] struct {
	name string
	data proto.Column
	add  func(*T)
}

// Name returns the ClickHouse column name.
func (c Column[T]) Name() string { return c.name }

// Schema builds a fresh set of columns for one sink. The sink calls it twice
// at construction (one set fills while the other is inserted); every call
// must return new columns, the same names in the same order.
type Schema[T any] func() []Column[T]

// Col maps get's result into col, any ch-go column of V. The other
// constructors are shorthands for it.
//
// The same row must encode to the same bytes every time: a replayed batch's
// encoding is hashed and compared with the journaled hash (see
// Options.OnMismatch). A ch-go Map column appends a Go map's entries in
// iteration order, which is random, so rows with two or more entries would
// fail that comparison: map such fields with Map, which sorts the keys.
func Col[T, V any](name string, col proto.ColumnOf[V], get func(*T) V) Column[T] {
	return Column[T]{name: name, data: col, add: func(r *T) { col.Append(get(r)) }}
}

// String maps a String column.
func String[T any](name string, get func(*T) string) Column[T] {
	return Col(name, new(proto.ColStr), get)
}

// LowCardinality maps a LowCardinality(String) column.
func LowCardinality[T any](name string, get func(*T) string) Column[T] {
	return Col(name, proto.NewLowCardinality[string](new(proto.ColStr)), get)
}

// Int64 maps an Int64 column.
func Int64[T any](name string, get func(*T) int64) Column[T] {
	return Col(name, new(proto.ColInt64), get)
}

// Int32 maps an Int32 column.
func Int32[T any](name string, get func(*T) int32) Column[T] {
	return Col(name, new(proto.ColInt32), get)
}

// UInt64 maps a UInt64 column.
func UInt64[T any](name string, get func(*T) uint64) Column[T] {
	return Col(name, new(proto.ColUInt64), get)
}

// UInt32 maps a UInt32 column.
func UInt32[T any](name string, get func(*T) uint32) Column[T] {
	return Col(name, new(proto.ColUInt32), get)
}

// UInt8 maps a UInt8 column (also Bool).
func UInt8[T any](name string, get func(*T) uint8) Column[T] {
	return Col(name, new(proto.ColUInt8), get)
}

// Float64 maps a Float64 column.
func Float64[T any](name string, get func(*T) float64) Column[T] {
	return Col(name, new(proto.ColFloat64), get)
}

// DateTime64 maps a DateTime64(precision) column; precision is the number of
// decimal digits of the fraction of a second (3 = milliseconds).
func DateTime64[T any](name string, precision proto.Precision, get func(*T) time.Time) Column[T] {
	return Col(name, new(proto.ColDateTime64).WithPrecision(precision), get)
}

// Nullable maps a Nullable(V) column over inner, a fresh column of V.
func Nullable[T, V any](name string, inner proto.ColumnOf[V], get func(*T) proto.Nullable[V]) Column[T] {
	return Col(name, proto.NewColNullable(inner), get)
}

// Array maps an Array(V) column over inner, a fresh column of V.
func Array[T, V any](name string, inner proto.ColumnOf[V], get func(*T) []V) Column[T] {
	return Col(name, proto.NewArray(inner), get)
}

// Map maps a Map(K, V) column from a Go map over keys and values, fresh
// columns of K and V. It appends each row's entries in ascending key order:
// a Go map's iteration order is random, and a row must encode to the same
// bytes every time (see Col).
func Map[T any, K cmp.Ordered, V any](name string, keys proto.ColumnOf[K], values proto.ColumnOf[V], get func(*T) map[K]V) Column[T] {
	col := proto.NewMap(keys, values)
	var sorted []K // reused: a column is filled by one goroutine at a time
	return Column[T]{name: name, data: col, add: func(r *T) {
		m := get(r)
		sorted = sorted[:0]
		for k := range m {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		for _, k := range sorted {
			keys.Append(k)
			values.Append(m[k])
		}
		col.Offsets.Append(uint64(keys.Rows()))
	}}
}
