package windowsink

import (
	"strings"
)

// replacing is what the engine of a table says about how it replaces rows:
// engine_full of system.tables, read by parseEngine. It is the one place
// that reads ClickHouse's text of an engine (fixtures in engine_test.go).
type replacing struct {
	family  bool   // a ReplacingMergeTree (plain, Replicated or Shared)
	version string // the version column, "" when the engine has none
	deleted string // the is_deleted column, "" when the engine has none
}

// parseEngine reads engine (system.tables.engine) and engineFull
// (system.tables.engine_full), such as
//
//	ReplacingMergeTree(version, deleted) ORDER BY (k, start) SETTINGS ...
//	ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/t', '{replica}', version)
//
// The replicated and shared engines take the ZooKeeper path and replica
// name first, when given; they are string literals, the columns are not.
func parseEngine(engine, engineFull string) replacing {
	if !strings.HasSuffix(engine, "ReplacingMergeTree") {
		return replacing{}
	}
	r := replacing{family: true}
	rest, ok := strings.CutPrefix(strings.TrimSpace(engineFull), engine)
	if !ok || !strings.HasPrefix(rest, "(") {
		return r // no arguments
	}
	var args []string
	depth, quoted, start := 0, false, 1
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case quoted:
			if c == '\\' {
				i++
			} else if c == '\'' {
				quoted = false
			}
		case c == '\'':
			quoted = true
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 {
				args = append(args, strings.TrimSpace(rest[start:i]))
				i = len(rest)
			}
		case c == ',' && depth == 1:
			args = append(args, strings.TrimSpace(rest[start:i]))
			start = i + 1
		}
	}
	var cols []string
	for _, a := range args {
		if a == "" || strings.HasPrefix(a, "'") {
			continue // replication path and replica name
		}
		cols = append(cols, strings.Trim(a, "`"))
	}
	if len(cols) > 0 {
		r.version = cols[0]
	}
	if len(cols) > 1 {
		r.deleted = cols[1]
	}
	return r
}
