// Package chainopt resolves what a ClickHouse sink opened in a
// checkpoint.Chain takes from the chain and from its chsink.DB: the
// database, how many checkpoints its journal serves, and the name it is
// registered under. chsink.Open and windowsink.Open share it, so that both
// refuse and default the same values the same way.
//
// # Guarantees
//
// Resolve never changes a value the caller set to something else: a set
// value that disagrees with the chain or the DB is refused, so a sink's
// journal is never pruned by a Keep other than its Store's, and never
// written under a database other than the one its inserts go to.
package chainopt
