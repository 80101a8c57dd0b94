package chaudit

import (
	"context"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/sink/chsink"
)

// Server is chsink.ReadServerSettings.
//
// Deprecated: use chsink.ReadServerSettings; two names for one call
// read as two calls. It returns the ClickHouse server's version and the deduplication
// settings the sinks' guarantees depend on, as they are for the
// connection opts describes (its user's profile applied), with the values
// every chsink insert sends instead: what an audit prints beside its
// counts, so that a report says which server and settings it was made on.
func Server(ctx context.Context, opts ch.Options) (chsink.ServerSettings, error) {
	return chsink.ReadServerSettings(ctx, opts)
}
