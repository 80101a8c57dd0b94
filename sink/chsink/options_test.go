package chsink_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// Options and schema are checked before New dials: every refusal wraps
// ErrInvalidOptions, and the unreachable address is never tried.
func TestNewInvalidOptions(t *testing.T) {
	tests := []struct {
		name   string
		schema chsink.Schema[event]
		opts   chsink.Options
	}{
		{"nil schema", nil, chsink.Options{}},
		{"empty schema", func() []chsink.Column[event] { return nil }, chsink.Options{}},
		{"MaxRows too large", eventSchema, chsink.Options{MaxRows: 2_000_000}},
		{"negative MaxBytes", eventSchema, chsink.Options{MaxBytes: -1}},
		{"negative FlushAheadMinRows", eventSchema, chsink.Options{FlushAheadMinRows: -1}},
		{"MaxBackoff below InitialBackoff", eventSchema, chsink.Options{InitialBackoff: 2, MaxBackoff: 1}},
		{"negative MaxAttempts", eventSchema, chsink.Options{MaxAttempts: -1}},
		{"unknown MismatchPolicy", eventSchema, chsink.Options{OnMismatch: 99}},
		{"unknown WindowPolicy", eventSchema, chsink.Options{OnOutsideWindow: 99}},
	}
	for _, tt := range tests {
		_, err := chsink.New(context.Background(), chsink.Table{Addr: "127.0.0.1:1", Name: "t"},
			checkpoint.TopicPartition{Topic: "t"}, checkpoint.NewMemoryStorage(), tt.schema, tt.opts)
		assert.ErrorIs(t, err, chsink.ErrInvalidOptions, tt.name)
	}
}
