package peers

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/testkit"
)

// TestCheckRefusesWrongOutput: check passes the exact output and refuses
// a duplicate event, a missing event, a wrong window count and a window
// that should not exist, so a wrong output never becomes a figure.
func TestCheckRefusesWrongOutput(t *testing.T) {
	addr, _ := testkit.ClickHouse(t)
	in := input{unique: 3, sentinel: "~end-", windows: map[window]int64{
		{"t-001", 1_764_547_200_000}: 2,
		{"t-002", 1_764_547_260_000}: 1,
	}}
	exact := []string{
		`INSERT INTO %[1]s.events VALUES ('t-001', 'a', '2025-12-01 00:00:01'), ('t-001', 'b', '2025-12-01 00:00:02'), ('t-002', 'c', '2025-12-01 00:01:03')`,
		`INSERT INTO %[1]s.tenant_minute VALUES ('t-001', '2025-12-01 00:00:00', 1, 1), ('t-001', '2025-12-01 00:00:00', 2, 2),
			('t-002', '2025-12-01 00:01:00', 1, 1), ('~end-0', '2025-12-01 01:00:00', 1, 1)`,
	}
	tests := []struct {
		name  string
		extra []string
		ok    bool
	}{
		{"exact", nil, true},
		{"duplicate event", []string{`INSERT INTO %[1]s.events VALUES ('t-001', 'a', '2025-12-01 00:00:01')`}, false},
		{"extra event", []string{`INSERT INTO %[1]s.events VALUES ('t-001', 'd', '2025-12-01 00:00:01')`}, false},
		{"wrong count", []string{`INSERT INTO %[1]s.tenant_minute VALUES ('t-001', '2025-12-01 00:00:00', 3, 3)`}, false},
		{"extra window", []string{`INSERT INTO %[1]s.tenant_minute VALUES ('t-003', '2025-12-01 00:00:00', 1, 1)`}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testkit.NewDatabase(t, addr)
			for _, q := range append(append(append([]string{}, tableDDL...), exact...), tt.extra...) {
				require.NoError(t, testkit.Exec(context.Background(), addr, "", fmt.Sprintf(q, db)))
			}
			err := check(t, &env{chAddr: addr, in: in}, db)
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
		})
	}
}

// TestCheckMissingEvent: an output short of one event is refused.
func TestCheckMissingEvent(t *testing.T) {
	addr, db := testkit.ClickHouse(t)
	for _, q := range tableDDL {
		require.NoError(t, testkit.Exec(context.Background(), addr, "", fmt.Sprintf(q, db)))
	}
	require.NoError(t, testkit.Exec(context.Background(), addr, "", fmt.Sprintf(`INSERT INTO %s.events VALUES ('t-001', 'a', '2025-12-01 00:00:01')`, db)))
	err := check(t, &env{chAddr: addr, in: input{unique: 2, sentinel: "~end-"}}, db)
	assert.ErrorContains(t, err, "want 2 of each")
}
