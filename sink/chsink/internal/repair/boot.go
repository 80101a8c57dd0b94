package repair

// The server's run: a part can be lost, or its name given to another
// insert, only when the server restarts, so a lost-part check is needed
// only for a batch journaled on an earlier run than the one that answers
// its replay. Uptime cannot tell that exactly (seconds, and a second
// restart before the replay makes the first one invisible); a row in a
// Memory table can: it does not survive a restart, so a run's row names
// that run and no other.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"

	"github.com/ClickHouse/ch-go"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// bootTable is the sink's Memory table, in Options.Database, whose rows
// name the server's current run.
const bootTable = "eo_boot"

// ReadBoot returns an id of the server's current run, creating it if this
// run has none yet; "" if it cannot (no right to create the table, say),
// which makes every later check assume a restart. It runs once per
// connection: a restart drops the connection, so one connection's
// lifetime lies within one run. Its insert sends settings, the sink's
// insert settings without a token: with async_insert = 1 and
// wait_for_async_insert = 0 in a profile, the id would be returned before
// the server holds it.
func ReadBoot(ctx context.Context, c *ch.Client, db string, settings []ch.Setting) string {
	ids, err := bootIDs(ctx, c, db)
	if err != nil {
		if err = c.Do(ctx, ch.Query{Body: "CREATE TABLE IF NOT EXISTS " + chsql.Ident(db) + "." + bootTable + " (id String) ENGINE = Memory"}); err != nil {
			return ""
		}
	}
	if len(ids) > 0 {
		return ids[0]
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if err := c.Do(ctx, ch.Query{Body: "INSERT INTO " + chsql.Ident(db) + "." + bootTable + " (id) VALUES (" + chsql.Quote(id) + ")", Settings: settings}); err != nil {
		return ""
	}
	return id
}

// bootIDs lists the ids of the server's current run: usually one, more if
// two sinks gave the run an id at once (either names the run).
func bootIDs(ctx context.Context, c *ch.Client, db string) ([]string, error) {
	rows, err := chsql.Strings(ctx, c, "SELECT id AS c0 FROM "+chsql.Ident(db)+"."+bootTable+" ORDER BY id", 1)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r[0]
	}
	return ids, nil
}

// sameRun reports whether the server has run without a restart since in
// was journaled: the run id in.Boot is still among the ids in db's boot
// table. An unknown id (an intent of an older build, or none to be had)
// counts as a restart.
func sameRun(ctx context.Context, c *ch.Client, db string, in sink.Intent) (bool, error) {
	if in.Boot == "" {
		return false, nil
	}
	ids, err := bootIDs(ctx, c, db)
	if err != nil {
		return false, fmt.Errorf("chsink: read the server's run: %w", err)
	}
	return slices.Contains(ids, in.Boot), nil
}
