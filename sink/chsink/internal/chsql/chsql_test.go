package chsql

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestQuoting: a literal or identifier holding the quote characters is
// read back as the value itself.
func TestQuoting(t *testing.T) {
	tests := []struct {
		give      string
		wantQuote string
		wantIdent string
	}{
		{give: "events", wantQuote: `'events'`, wantIdent: "`events`"},
		{give: `it's`, wantQuote: `'it\'s'`, wantIdent: "`it's`"},
		{give: `a\b`, wantQuote: `'a\\b'`, wantIdent: "`a\\b`"},
		{give: "x`y", wantQuote: "'x`y'", wantIdent: "`x``y`"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.wantQuote, Quote(tt.give), tt.give)
		assert.Equal(t, tt.wantIdent, Ident(tt.give), tt.give)
	}
	assert.Equal(t, "`a`, `b`", JoinIdents([]string{"a", "b"}))
	assert.Equal(t, "DROP TABLE IF EXISTS `db`.`t` SYNC", DropTable("db", "t"))
}
