package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// crashSummary reduces what embedded.ClickHouse.Crashed says of a server
// that exited on its own (how it exited, then the tail of its log: errors
// it logged as expected, such as chsink's probes for tables that do not
// exist yet, and a fault report of about 180 lines) to one line: how it
// exited and the first line that says why. It reads clickhouse-local's own
// text, so each server version it knows has a fixture under testdata
// (TestCrashSummary).
func crashSummary(text string) string {
	exit, log, _ := strings.Cut(text, "\n")
	exit = strings.TrimSuffix(strings.TrimSpace(exit), "; output:")
	lines := strings.Split(log, "\n")
	var why string
	for _, marker := range crashMarkers {
		for i, line := range lines {
			j := strings.Index(line, marker)
			if j < 0 {
				continue
			}
			why = strings.TrimSpace(line[j:])
			if strings.HasSuffix(why, ":") && i+1 < len(lines) { // the exception is on the next line
				why += " " + logMessage(lines[i+1])
			}
			break
		}
		if why != "" {
			break
		}
	}
	if why == "" {
		return clip(exit, 300)
	}
	return clip(exit+": "+why, 300)
}

// crashMarkers are the phrases of clickhouse-local's log that say why it
// died, the most telling first.
var crashMarkers = []string{
	"Terminate called for uncaught exception:",
	"Received signal",
	"<Fatal>",
}

// logMessage returns the message of a line of clickhouse-local's log
// ("2026.12.06 02:39:29.450829 [ 23301 ] {} <Fatal> ClientBase: Code: 210.
// ..., Stack trace ..."): what follows the level and the logger's name, up
// to the stack trace.
func logMessage(line string) string {
	if _, rest, ok := strings.Cut(line, "> "); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			line = msg
		}
	}
	line, _, _ = strings.Cut(line, ", Stack trace")
	return strings.TrimSpace(line)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " ..."
}

// saveCrashLog writes a crashed server's log into its data directory and
// returns the file's path, or why it could not.
func saveCrashLog(dir, text string) string {
	path := filepath.Join(dir, fmt.Sprintf("crash-%s.log", time.Now().UTC().Format("20060102T150405.000")))
	if err := os.WriteFile(path, []byte(text+"\n"), 0o644); err != nil {
		return fmt.Sprintf("not saved: %v", err)
	}
	return path
}
