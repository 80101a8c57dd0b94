package chsink

import (
	"context"
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// DB is a ClickHouse server and one of its databases: where a chain's
// tables are, named once for all its sinks.
type DB struct {
	Addr     string // host:port of the native protocol
	Database string // default "default"
}

// Open is New for a sink that is part of a checkpoint.Chain: it builds the
// sink for table in db, over the chain's partition and Storage, keeping the
// journal for as many checkpoints as the chain's Store keeps, and registers
// it in the chain under the table's name. The returned Sink is the handle
// the chain's Process adds rows to; the chain's owner (a kafkasource
// Source) runs and closes it.
//
// opts is as for New, except for what the chain and db give: leave
// opts.Database and opts.KeepCheckpoints zero (a value that disagrees with
// db or the chain is refused with ErrInvalidOptions). A table name already
// registered in the chain is refused with an error wrapping
// checkpoint.ErrInvalidOptions; nothing is left open then.
func Open[T any](ctx context.Context, c *checkpoint.Chain, db DB, table string, schema Schema[T], opts Options) (*Sink[T], error) {
	t, opts, err := ChainOptions(c, db, table, opts)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, t, c.Partition(), c.Storage(), schema, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Add(table, s); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// ChainOptions returns the Table and the Options that New takes for a sink
// of chain c writing table in db: opts with the database of db and the Keep
// of c's Store. It refuses, with ErrInvalidOptions, an opts whose Database
// or KeepCheckpoints is set and disagrees. Open uses it; so does a sink
// package built on chsink (windowsink.Open).
func ChainOptions(c *checkpoint.Chain, db DB, table string, opts Options) (Table, Options, error) {
	if c == nil {
		return Table{}, opts, fmt.Errorf("%w: nil chain: pass the checkpoint.Chain the sink belongs to", ErrInvalidOptions)
	}
	if db.Addr == "" || table == "" {
		return Table{}, opts, fmt.Errorf("%w: DB.Addr %q, table %q: both are needed", ErrInvalidOptions, db.Addr, table)
	}
	if db.Database == "" {
		db.Database = "default"
	}
	switch {
	case opts.Database != "" && opts.Database != db.Database:
		return Table{}, opts, fmt.Errorf("%w: Options.Database is %q, DB.Database %q: leave Options.Database empty, the DB names it",
			ErrInvalidOptions, opts.Database, db.Database)
	case opts.KeepCheckpoints != 0 && opts.KeepCheckpoints != c.Keep():
		return Table{}, opts, fmt.Errorf("%w: Options.KeepCheckpoints is %d, the chain's Store keeps %d: leave it 0, the chain gives it",
			ErrInvalidOptions, opts.KeepCheckpoints, c.Keep())
	}
	opts.Database, opts.KeepCheckpoints = db.Database, c.Keep()
	return Table{Addr: db.Addr, Name: table}, opts, nil
}
