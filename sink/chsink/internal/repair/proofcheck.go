package repair

// Start-up's half of the lost-part check: New accepts a table, and each
// target of a view over it, only in a shape whose lost part the sink can
// tell exactly after any merge (see lostPartProof and the "Lost parts"
// table of chsink's package doc), and refuses every other shape with a
// *chsink.TableCheckError that matches ErrUnproven, whose Reason these
// functions give. A check that could be
// fooled would be a silent loss in the one crash window no token covers.

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnproven is chsink.ErrUnprovenTarget: a table, or a view's target,
// of a shape in which a lost part could not be told from another insert's
// rows. New's refusals (Provable, TargetRefused) and the check's
// Lost errors wrap it.
var ErrUnproven = errors.New("chsink: a lost part of this table could not be told from another insert's rows")

// crashWindow names the crash a refusal is about, for its Reason.
const crashWindow = "a server killed between writing a block's deduplication token and renaming its part in keeps the token without the rows"

// Shape is what New read of a table that decides whether its lost part
// can be told.
type Shape struct {
	Engine       string // system.tables.engine
	Replicated   bool   // Replicated or Shared: the token commits with the part
	BlockNumbers bool   // enable_block_number_column = 1: each row stores its block number
}

// Provable returns why New must refuse db.table (of shape info), "" if it
// need not: the sink must tell exactly, after any merge, whether the
// table holds what a replayed batch's insert wrote there.
func Provable(db, table string, info Shape) (refused string) {
	switch lostPartProof(info.Engine) {
	case proofNone, proofKeys:
		return ""
	case proofRows:
		if info.BlockNumbers {
			return ""
		}
		return fmt.Sprintf("%s; without enable_block_number_column a merged part's rows of that block cannot be told from "+
			"another insert of the same rows, so the sink cannot prove a replayed batch held or lost: "+
			"ALTER TABLE %s.%s MODIFY SETTING enable_block_number_column = 1 (ClickHouse 26.7 allows it on an existing table; "+
			"parts written before keep no block numbers until merged), create the table with it, or use ReplicatedMergeTree",
			crashWindow, db, table)
	}
	return fmt.Sprintf("%s; %s merges fold one insert's rows into another's, so once the block's part is merged the sink "+
		"cannot tell whether a replayed batch's rows are there: use Replicated%s (the token commits with the part in Keeper), "+
		"or write windows with sink/chsink/windowsink into a ReplacingMergeTree, or keep each row in a MergeTree with "+
		"enable_block_number_column = 1 and aggregate at read time",
		crashWindow, info.Engine, info.Engine)
}

// TargetRefused returns why New must refuse db.target, the target of a
// materialized view over srcDB.src, "" if it need not: a cascade (below
// says src is itself a view's target; see cascade), a shape whose lost
// part cannot be told (Provable), or a plain MergeTree unless distinct
// (Options.DistinctViewRows; see reproducible).
func TargetRefused(srcDB, src string, srcReplicated, below, distinct bool, db, target string, info Shape) (refused string) {
	if below {
		if why := cascade(srcDB, src, srcReplicated, db, target, info); why != "" {
			return why
		}
	}
	if why := Provable(db, target, info); why != "" || distinct {
		return why
	}
	return reproducible(db, target, info)
}

// otherInsert names the second crash a refusal is about, for its Reason.
const otherInsert = "after the restart the server numbers blocks on from its highest surviving part, so the name that token's " +
	"log entry gives is then the next insert's, whoever's"

// reproducible returns why New must refuse db.target, the target of a
// materialized view over the sink's table, "" if it need not. It refuses
// a plain MergeTree: its rows are all there is to tell the batch's block
// from another insert's that took the lost part's name, and another insert can write the very same rows there (a
// count per hour of equally sized batches from several partitions), so a
// lost part would pass for held. The sink's own table is not refused: its
// rows are the batch's records' (see chsink's Guarantees).
// Options.DistinctViewRows accepts the target, on the caller's word that no
// other insert writes such rows.
func reproducible(db, target string, info Shape) (refused string) {
	if lostPartProof(info.Engine) != proofRows {
		return ""
	}
	return fmt.Sprintf("%s, and %s: the rows of a plain MergeTree are then all there is to tell the batch's block by, and another "+
		"insert can write the same rows here (a count per hour of equally sized batches from several partitions), which would "+
		"pass for the lost batch's: use Replicated%s (the token commits with the part in Keeper), or write windows with "+
		"sink/chsink/windowsink into a ReplacingMergeTree, or aggregate the sink's table at read time; or, if every row the "+
		"views write here carries a key that only this sink's partition writes, set Options.DistinctViewRows",
		crashWindow, otherInsert, info.Engine)
}

// cascade returns why New must refuse db.target, fed by a view over src
// (itself a view target), "" if it need not. It refuses it unless both
// are replicated: a lost part of target cannot be
// derived from the batch alone (it is src's rows that feed it), and a
// repair of a lost part of src would fire target's view again under
// another token.
func cascade(srcDB, src string, srcReplicated bool, db, target string, info Shape) (refused string) {
	if srcReplicated && info.Replicated {
		return ""
	}
	return fmt.Sprintf("fed through a cascade of views (its view reads %s.%s, itself a view's target); %s, and a lost part here "+
		"cannot be derived from the sink's batch, nor one of %s.%s repaired without firing this view again: "+
		"make both tables Replicated, or feed %s.%s by a view over the sink's table directly",
		srcDB, src, crashWindow, srcDB, src, db, target)
}

// replacingVersion returns the version column of a ReplacingMergeTree
// from its engine_full ("ReplacingMergeTree(version[, is_deleted]) ORDER
// BY ..."), read with the same lexer as a view's query; "" when it has
// none.
func replacingVersion(engineFull string) string {
	toks, err := lexSQL(engineFull)
	if err != nil {
		return ""
	}
	var sig []sqlToken // without space and comments
	for _, t := range toks {
		if s := strings.TrimSpace(t.text); s != "" && !strings.HasPrefix(s, "--") && !strings.HasPrefix(s, "/*") {
			sig = append(sig, t)
		}
	}
	if len(sig) < 3 || !strings.HasSuffix(sig[0].ident, "ReplacingMergeTree") || sig[1].text != "(" {
		return ""
	}
	return sig[2].ident // ")" for none: no ident
}
