package chsink

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/repair"
)

// TestLostPartErrorNamesTable: the message says whether the rows were lost
// in the sink's table itself or in a view's target, and whether the loss
// is proven or only cannot be ruled out.
func TestLostPartErrorNamesTable(t *testing.T) {
	in := sink.Intent{First: sink.Position{Offset: 10}, Last: sink.Position{Offset: 20, Index: 1}, Token: "tok"}
	cascade := errors.New("no materialized view of db.events writes to db.rollup directly (a cascade of views)")
	unproven := fmt.Errorf("%w: part all_3_3_0 of db.events (SummingMergeTree) is merged", ErrUnprovenTarget)
	tests := []struct {
		name string
		give LostPartError
		want string
	}{
		{
			name: "view target",
			give: LostPartError{Intent: in, Table: "db.rollup", ViewTarget: true, Part: "all_3_3_0", Err: cascade},
			want: "chsink: batch " + in.First.String() + ".." + in.Last.String() + " (token tok): db.rollup, the target of a materialized view over the sink's table, " +
				"deduplicated it against part all_3_3_0, which it does not hold, and the view's rows of this batch cannot be derived again: " + cascade.Error(),
		},
		{
			name: "the table itself",
			give: LostPartError{Intent: in, Table: "db.events", Part: "all_3_3_0", Err: errors.New("no staging table")},
			want: "chsink: batch " + in.First.String() + ".." + in.Last.String() + " (token tok): the sink's table db.events " +
				"deduplicated it against part all_3_3_0, which it does not hold, and the table's rows of this batch cannot be put back: no staging table",
		},
		{
			name: "the table itself, unproven",
			give: LostPartError{Intent: in, Table: "db.events", Part: "all_3_3_0", Err: unproven},
			want: "chsink: batch " + in.First.String() + ".." + in.Last.String() + " (token tok): the sink's table db.events " +
				"deduplicated it against part all_3_3_0, which it may no longer hold, and whether it holds the batch cannot be checked: " + unproven.Error(),
		},
		{
			name: "view target, unproven",
			give: LostPartError{Intent: in, Table: "db.rollup", ViewTarget: true, Part: "all_3_3_0", Err: unproven},
			want: "chsink: batch " + in.First.String() + ".." + in.Last.String() + " (token tok): db.rollup, the target of a materialized view over the sink's table, " +
				"deduplicated it against part all_3_3_0, which it may no longer hold, and whether it holds the batch cannot be checked: " + unproven.Error(),
		},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.give.Error(), tt.name)
	}
}

// TestLostPartFromRepair: what the repair reports of a table it could not
// repair, or not check, reaches the caller as a *LostPartError with the
// same fields, matching ErrLostPart, and ErrUnprovenTarget when the loss
// could not be proven.
func TestLostPartFromRepair(t *testing.T) {
	in := sink.Intent{First: sink.Position{Offset: 10}, Last: sink.Position{Offset: 20}, Token: "tok-10"}
	cascade := errors.New("no materialized view of db.events writes to db.lonely directly")
	err := lostPart(&repair.Lost{Intent: in, Table: "db.lonely", ViewTarget: true, Part: "all_4_4_0", Err: cascade})
	lost, ok := errors.AsType[*LostPartError](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, LostPartError{Intent: in, Table: "db.lonely", ViewTarget: true, Part: "all_4_4_0", Err: cascade}, *lost)
	assert.ErrorIs(t, err, ErrLostPart)
	assert.ErrorContains(t, err, "db.lonely, the target of a materialized view over the sink's table,")

	unproven := fmt.Errorf("%w: part all_1_1_0 of db.sums (SummingMergeTree) is merged", repair.ErrUnproven)
	err = lostPart(&repair.Lost{Intent: in, Table: "db.sums", Part: "all_1_1_0", Err: unproven})
	assert.ErrorIs(t, err, ErrLostPart)
	assert.ErrorIs(t, err, ErrUnprovenTarget)
	assert.ErrorContains(t, err, "the sink's table db.sums deduplicated")

	other := errors.New("dial: refused")
	assert.Equal(t, other, lostPart(other), "any other error as it is")
	assert.NoError(t, lostPart(nil))
}
