package chainopt

import (
	"fmt"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Sink is what a sink's Open was given (Resolve's input) and what it is
// to be built with (Resolve's output).
type Sink struct {
	Addr     string // chsink.DB.Addr
	Database string // chsink.DB.Database; "default" when empty
	Table    string
	// OptsDatabase and OptsKeep are chsink.Options.Database and
	// KeepCheckpoints: zero, or equal to what the DB and the chain give.
	OptsDatabase string
	OptsKeep     int
	// Participant is chsink.Options.ParticipantName, the table's name when
	// empty.
	Participant string
}

// Resolve returns s with its defaults filled from c: Database and
// OptsDatabase the DB's database, OptsKeep the Keep of c's Store,
// Participant the table's name when empty. Its errors wrap invalid (the
// calling package's ErrInvalidOptions).
func Resolve(c *checkpoint.Chain, s Sink, invalid error) (Sink, error) {
	if c == nil {
		return s, fmt.Errorf("%w: nil chain: pass the checkpoint.Chain the sink belongs to", invalid)
	}
	if s.Addr == "" || s.Table == "" {
		return s, fmt.Errorf("%w: DB.Addr %q, table %q: both are needed", invalid, s.Addr, s.Table)
	}
	if s.Database == "" {
		s.Database = "default"
	}
	switch {
	case s.OptsDatabase != "" && s.OptsDatabase != s.Database:
		return s, fmt.Errorf("%w: Options.Database is %q, DB.Database %q: leave Options.Database empty, the DB names it",
			invalid, s.OptsDatabase, s.Database)
	case s.OptsKeep != 0 && s.OptsKeep != c.Keep():
		return s, fmt.Errorf("%w: Options.KeepCheckpoints is %d, the chain's Store keeps %d: leave it 0, the chain gives it",
			invalid, s.OptsKeep, c.Keep())
	}
	s.OptsDatabase, s.OptsKeep = s.Database, c.Keep()
	if s.Participant == "" {
		s.Participant = s.Table
	}
	return s, nil
}
