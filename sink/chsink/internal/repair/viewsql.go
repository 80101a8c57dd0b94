package repair

// A view's query, made to read the batch alone: the lost-part check and
// repair run a materialized view's query over a staging copy of the sink's
// table. The query's text comes from the server (system.tables.as_select)
// and is first normalised by the server itself (formatQuery); only then is
// the source table's name replaced, token by token, never as a substring:
// db.events must not match inside db.events_orgs. Fixtures under
// testdata/viewsql pin what the server's text looks like.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce/sink/chsink/internal/chsql"
)

// sqlToken is one lexical token of a formatted query.
type sqlToken struct {
	text  string
	ident string // the identifier it names (unquoted), "" if none
}

// lexSQL splits a query into tokens as ClickHouse's lexer does for what
// this needs: identifiers (bare, `backquoted` or "double-quoted"), string
// literals, comments and whitespace kept as they are, anything else one
// character at a time. Joining the tokens' texts gives the query back.
func lexSQL(q string) ([]sqlToken, error) {
	var out []sqlToken
	for i := 0; i < len(q); {
		c := q[i]
		j := i + 1
		tok := sqlToken{}
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			for j < len(q) && strings.IndexByte(" \t\n\r", q[j]) >= 0 {
				j++
			}
		case c == '-' && j < len(q) && q[j] == '-':
			for j < len(q) && q[j] != '\n' {
				j++
			}
		case c == '/' && j < len(q) && q[j] == '*':
			end := strings.Index(q[j+1:], "*/")
			if end < 0 {
				return nil, errors.New("unterminated comment")
			}
			j += 1 + end + 2
		case c == '\'' || c == '`' || c == '"':
			var b strings.Builder
			for {
				if j >= len(q) {
					return nil, fmt.Errorf("unterminated %c", c)
				}
				if q[j] == '\\' && j+1 < len(q) {
					b.WriteByte(q[j+1])
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c { // doubled quote
						b.WriteByte(c)
						j += 2
						continue
					}
					j++
					break
				}
				b.WriteByte(q[j])
				j++
			}
			if c != '\'' {
				tok.ident = b.String()
			}
		case isIdentStart(c):
			for j < len(q) && isIdentPart(q[j]) {
				j++
			}
			tok.ident = q[i:j]
		case c >= '0' && c <= '9':
			for j < len(q) && (isIdentPart(q[j]) || q[j] == '.') {
				j++
			}
		}
		tok.text = q[i:j]
		out = append(out, tok)
		i = j
	}
	return out, nil
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// readFrom returns query, as formatted by the server, reading table
// stage instead of db.table where the query's FROM names db.table (the
// table a materialized view is triggered by; joins and subqueries that
// read other tables, or read db.table again, keep reading the table as
// it is, as the view does). The staging table keeps the original name as
// its alias, so that columns qualified by the table's name still resolve.
// It fails if no FROM names db.table.
func readFrom(query, db, table, stageDB, stage string) (string, error) {
	toks, err := lexSQL(query)
	if err != nil {
		return "", fmt.Errorf("read the view's query: %w", err)
	}
	next := func(i int) int { // the next token that is not space or comment
		for i++; i < len(toks); i++ {
			if t := strings.TrimSpace(toks[i].text); t != "" && !strings.HasPrefix(t, "--") && !strings.HasPrefix(t, "/*") {
				return i
			}
		}
		return len(toks)
	}
	keyword := func(i int, kw string) bool {
		return i < len(toks) && strings.EqualFold(toks[i].text, kw)
	}
	for i := range toks {
		if !keyword(i, "FROM") {
			continue
		}
		a := next(i)
		dot := next(a)
		b := next(dot)
		if b >= len(toks) || toks[a].ident != db || toks[dot].text != "." || toks[b].ident != table {
			continue
		}
		if after := next(b); after < len(toks) && toks[after].text == "." {
			continue // db.table.column: not a table expression
		}
		repl := chsql.Ident(stageDB) + "." + chsql.Ident(stage)
		if !keyword(next(b), "AS") {
			repl += " AS " + chsql.Ident(table)
		}
		var out strings.Builder
		for _, t := range toks[:a] {
			out.WriteString(t.text)
		}
		out.WriteString(repl)
		for _, t := range toks[b+1:] {
			out.WriteString(t.text)
		}
		return out.String(), nil
	}
	return "", fmt.Errorf("the view's query reads %s.%s in no FROM clause", db, table)
}
