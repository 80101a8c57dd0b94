// Package chsql holds the few pieces of ClickHouse SQL text that chsink
// and its lost-part repair both write: a quoted string literal, a quoted
// identifier, and a query whose String columns are read into rows.
//
// # Guarantees
//
// Quote and Ident return text that ClickHouse reads back as exactly the
// value given, whatever it holds (quotes, backslashes, backquotes), so a
// table or database name can never end a literal early. Strings holds no
// state: it runs one query on the connection it is given.
package chsql
