package exactlyonce_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmePrelude declares what the README's code takes as given: the
// servers' addresses, the event type, its parser and the tables' columns.
const readmePrelude = `package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/exactlyonce/exactlyonce/checkpoint"
	"github.com/exactlyonce/exactlyonce/checkpoint/kafkasource"
	"github.com/exactlyonce/exactlyonce/dedup"
	"github.com/exactlyonce/exactlyonce/sink"
	"github.com/exactlyonce/exactlyonce/sink/chsink"
	"github.com/exactlyonce/exactlyonce/sink/chsink/windowsink"
	"github.com/exactlyonce/exactlyonce/state"
	"github.com/exactlyonce/exactlyonce/window"
)

// Every import is used by some block; these keep the file compiling
// whichever blocks the README holds.
var (
	_ = kafka.Message{}
	_ = dedup.DefaultTTL
	_ = sink.Position{}
	_ = windowsink.Options{}
	_ = state.Options{}
	_ = window.Options{}
	_ = time.Second
	_ = slog.Default
)

type Event struct {
	OrgID, Source, EventID string
	At                     time.Time
}

var (
	ctx          = context.Background()
	chAddr       = "127.0.0.1:9000"
	brokers      = []string{"127.0.0.1:9092"}
	eventSchema  chsink.Schema[Event]
	minuteSchema chsink.Schema[window.Row[uint64]]
	db           = chsink.DB{Addr: chAddr, Database: "analytics"}
)

func parse(b []byte) (Event, error) {
	var ev Event
	err := json.Unmarshal(b, &ev)
	return ev, err
}

func main() {}
`

// TestReadmeCode compiles every go block of README.md, so the code a
// newcomer copies first builds against today's API and checks its errors
// (the compiler refuses an unused err). A block is marked by the comment
// before it: "main" is the body of a func() error; "chain" the body of the
// function kafkasource.Chains calls; "part of a chain" the start of one.
// The blocks are built in place with go build -overlay: nothing is written
// into the checkout.
func TestReadmeCode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)<!-- readme: ([a-z ]+)[^>]*-->\n```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.GreaterOrEqual(t, len(blocks), 3, "README.md's go blocks are marked <!-- readme: kind -->")
	require.Equal(t, strings.Count(string(readme), "```go"), len(blocks), "every go block of README.md is marked <!-- readme: kind -->")

	var src strings.Builder
	src.WriteString(readmePrelude)
	for i, b := range blocks {
		kind, code := strings.TrimSpace(b[1]), b[2]
		switch kind {
		case "main":
			fmt.Fprintf(&src, "\nfunc block%d() error {\n%s}\n", i, code)
		case "chain":
			fmt.Fprintf(&src, "\nfunc block%d(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {\n%s}\n", i, code)
		case "part of a chain":
			fmt.Fprintf(&src, "\nfunc block%d(ctx context.Context, c *checkpoint.Chain) (*kafkasource.Processor, error) {\n%sreturn nil, nil\n}\n", i, code)
		default:
			t.Fatalf("README.md block %d: unknown kind %q", i, kind)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(file, []byte(src.String()), 0o644))
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(root, "readmecode", "main.go"): file}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644))
	cmd := exec.CommandContext(t.Context(), "go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", os.DevNull, "./readmecode")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "README.md's code does not compile:\n%s\n(the file built, blocks numbered from 0:)\n%s", out, src.String())
}
