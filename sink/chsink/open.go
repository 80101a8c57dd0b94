package chsink

import (
	"context"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chainopt"
)

// DB is a ClickHouse server and one of its databases: where a chain's
// tables are, named once for all its sinks.
type DB struct {
	Addr     string // host:port of the native protocol
	Database string // default "default"
}

// Open builds the sink for table in db as part of the checkpoint.Chain c,
// over the chain's partition and Storage, keeping the journal for as many
// checkpoints as the chain's Store keeps, and registers it in the chain
// under opts.ParticipantName (default: the table's name). The returned
// Sink is the handle the chain's Process adds rows to; the chain's owner
// (a kafkasource Source) runs and closes it. It is how a chain gets a
// ClickHouse sink; New is for a sink outside a chain.
//
// opts is as for New, except for what the chain and db give: leave
// opts.Database and opts.KeepCheckpoints zero (a value that disagrees with
// db or the chain is refused with ErrInvalidOptions). A participant name
// already registered in the chain is refused with an error wrapping
// checkpoint.ErrInvalidOptions; nothing is left open then.
func Open[T any](ctx context.Context, c *checkpoint.Chain, db DB, table string, schema Schema[T], opts Options) (*Sink[T], error) {
	r, err := chainopt.Resolve(c, chainopt.Sink{Addr: db.Addr, Database: db.Database, Table: table,
		OptsDatabase: opts.Database, OptsKeep: opts.KeepCheckpoints, Participant: opts.ParticipantName}, ErrInvalidOptions)
	if err != nil {
		return nil, err
	}
	opts.Database, opts.KeepCheckpoints = r.OptsDatabase, r.OptsKeep
	s, err := New(ctx, Table{Addr: r.Addr, Name: r.Table}, c.Partition(), c.Storage(), schema, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Add(r.Participant, s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// ChainOptions returns the Table and the Options that New takes for a sink
// of chain c writing table in db: opts with the database of db and the Keep
// of c's Store. It refuses, with ErrInvalidOptions, an opts whose Database
// or KeepCheckpoints is set and disagrees.
//
// Deprecated: open a chain's sink with Open (or windowsink.Open), which
// resolves the same values and registers the sink. ChainOptions will be
// removed before v0.1.0.
func ChainOptions(c *checkpoint.Chain, db DB, table string, opts Options) (Table, Options, error) {
	r, err := chainopt.Resolve(c, chainopt.Sink{Addr: db.Addr, Database: db.Database, Table: table,
		OptsDatabase: opts.Database, OptsKeep: opts.KeepCheckpoints}, ErrInvalidOptions)
	if err != nil {
		return Table{}, opts, err
	}
	opts.Database, opts.KeepCheckpoints = r.OptsDatabase, r.OptsKeep
	return Table{Addr: r.Addr, Name: r.Table}, opts, nil
}
