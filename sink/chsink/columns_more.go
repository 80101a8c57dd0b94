package chsink

import (
	"time"

	"github.com/ClickHouse/ch-go/proto"
)

// The column types of a typical schema beside those of columns.go: seconds
// and days, small integers, Float32 and Bool.

// DateTime maps a DateTime column (seconds; the fraction is dropped). The
// column's time zone only changes how ClickHouse prints it.
func DateTime[T any](name string, get func(*T) time.Time) Column[T] {
	return Col(name, new(proto.ColDateTime), get)
}

// Date maps a Date column (days since 1970-01-01, up to 2149-06-06): the
// UTC day of the time.
func Date[T any](name string, get func(*T) time.Time) Column[T] {
	return Col(name, new(proto.ColDate), get)
}

// Date32 maps a Date32 column (days from 1900-01-01 to 2299-12-31).
func Date32[T any](name string, get func(*T) time.Time) Column[T] {
	return Col(name, new(proto.ColDate32), get)
}

// UInt16 maps a UInt16 column.
func UInt16[T any](name string, get func(*T) uint16) Column[T] {
	return Col(name, new(proto.ColUInt16), get)
}

// Int16 maps an Int16 column.
func Int16[T any](name string, get func(*T) int16) Column[T] {
	return Col(name, new(proto.ColInt16), get)
}

// Int8 maps an Int8 column.
func Int8[T any](name string, get func(*T) int8) Column[T] {
	return Col(name, new(proto.ColInt8), get)
}

// Float32 maps a Float32 column.
func Float32[T any](name string, get func(*T) float32) Column[T] {
	return Col(name, new(proto.ColFloat32), get)
}

// Bool maps a Bool column.
func Bool[T any](name string, get func(*T) bool) Column[T] {
	return Col(name, new(proto.ColBool), get)
}
