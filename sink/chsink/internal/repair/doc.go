// Package repair checks and repairs what a plain MergeTree table lost
// while keeping its deduplication tokens: the lost-part repair of a
// chsink.Sink, as a unit of its own.
//
// A plain MergeTree writes a block's token to its deduplication log
// before it renames the block's part into the table; a server killed
// between the two keeps the token without the rows, and drops every retry
// of the block as a duplicate. A sink's insert that may repeat an earlier
// one reads the server's log (a [Log] watches the query) and hands the
// dropped blocks to [Repairer.Settle], which checks each named part and
// repairs what is lost: the batch's rows put back into the sink's table without firing
// its views, a view's rows of the batch derived again into its target.
// At start-up, [Provable] and [TargetRefused] say why a table, or a view's
// target, must be refused whose lost part could not be told.
//
// The sink keeps what is public: chsink.LostPartError is made of a
// [Lost] field for field, and chsink.ErrUnprovenTarget is [ErrUnproven].
//
// # Guarantees
//
// Settle returns the parts of the sink's table that hold the batch, or an
// error; it never writes a batch's rows into a table that holds them.
// Every repair survives a crash at any step: its staging tables are named
// after the batch (its token), and their state says how far it got, so a
// repeated repair finishes the first one's work instead of doing it
// again. A view's rows derived again go in under a token derived from the
// batch's, which the target's deduplication drops when repeated.
//
// A Repairer's checks and repairs run on the connection they are given,
// which the caller must not use meanwhile; only DropStaging dials a
// connection of its own and may run beside them. It starts no goroutine.
package repair
