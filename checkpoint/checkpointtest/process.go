package checkpointtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/exactlyonce/exactlyonce/checkpoint"
)

// Environment of a child process of TestProcessRace.
const (
	envShared = "EXACTLYONCE_CHECKPOINTTEST_SHARED"
	envID     = "EXACTLYONCE_CHECKPOINTTEST_ID"
)

// Sizes of TestProcessRace: small enough for a few seconds on a loaded
// machine, large enough that the processes overlap.
const (
	raceProcs      = 4
	raceRounds     = 15
	raceIncrements = 8
	resultPrefix   = "CHECKPOINTTEST-RESULT "
)

// childResult is what a child process reports on its stdout.
type childResult struct {
	Wins      []int    // the Create rounds this process won
	Conflicts int      // the Replaces it lost
	Errors    []string // every error that is neither nil nor ErrConflict
}

// TestProcessRace checks that conditional writes exclude each other across
// processes, for Storages that processes share (a directory, an S3 bucket).
// It runs the calling test again in several child processes (re-executions of
// the test binary) that race, released together: each round of Creates of a
// name has exactly one winner, whose data the name holds, and the losers get
// ErrConflict; compare-and-swap increments of one counter by every process
// (GetVersion, then Replace, again on ErrConflict) lose no update.
//
// setup runs only in the parent and returns a description of the shared
// storage (a directory, an endpoint and bucket); open opens the storage from
// that description, in every child. Code of the test before TestProcessRace
// also runs in the children, so it must start no servers: put that in setup.
func TestProcessRace(t *testing.T, setup func(t *testing.T) string, open func(shared string) (checkpoint.Storage, error)) {
	if shared, ok := os.LookupEnv(envShared); ok {
		runChild(shared, open)
		return
	}
	shared := setup(t)
	s, err := open(shared)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err = s.Create(ctx, "race/counter", []byte("0"))
	require.NoError(t, err)

	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	children := make([]*child, raceProcs)
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.count=1")
		cmd.Env = append(os.Environ(), envShared+"="+shared, envID+"="+strconv.Itoa(i))
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
		children[i] = c
		t.Cleanup(func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() })
	}
	// A barrier: every child has opened the storage before any starts.
	for i, c := range children {
		require.True(t, scanUntil(c.out, "READY"), "child %d never got ready", i)
	}
	for _, c := range children {
		_, err := io.WriteString(c.stdin, "GO\n")
		require.NoError(t, err)
	}
	winners := make(map[int][]int) // round -> processes that won it
	for i, c := range children {
		var res childResult
		line := ""
		for c.out.Scan() {
			if l, ok := strings.CutPrefix(c.out.Text(), resultPrefix); ok {
				line = l
			}
		}
		require.NotEmpty(t, line, "child %d reported nothing", i)
		require.NoError(t, json.Unmarshal([]byte(line), &res))
		require.NoError(t, c.cmd.Wait(), "child %d", i)
		for _, e := range res.Errors {
			t.Errorf("child %d: %s", i, e)
		}
		for _, r := range res.Wins {
			winners[r] = append(winners[r], i)
		}
		t.Logf("child %d: won %d Create rounds, lost %d Replaces", i, len(res.Wins), res.Conflicts)
	}
	for r := range raceRounds {
		name := fmt.Sprintf("race/create-%d", r)
		if !assert.Len(t, winners[r], 1, "winners of %s", name) {
			continue
		}
		got, err := s.Get(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("process %d", winners[r][0]), string(got), "%s holds the winner's data", name)
	}
	got, err := s.Get(ctx, "race/counter")
	require.NoError(t, err)
	assert.Equal(t, strconv.Itoa(raceProcs*raceIncrements), counterValue(got), "compare-and-swap increments lost none")
}

// runPattern is a -test.run pattern matching exactly the test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func scanUntil(sc *bufio.Scanner, line string) bool {
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}

// counterValue is the count in the counter's content "<count> by <process>".
func counterValue(data []byte) string {
	v, _, _ := strings.Cut(string(data), " ")
	return v
}

// runChild is the child's side of TestProcessRace: it reports on stdout.
func runChild(shared string, open func(shared string) (checkpoint.Storage, error)) {
	id := os.Getenv(envID)
	var res childResult
	report := func() {
		b, _ := json.Marshal(res)
		fmt.Printf("\n%s%s\n", resultPrefix, b)
	}
	defer report()
	s, err := open(shared)
	if err != nil {
		res.Errors = append(res.Errors, "open: "+err.Error())
		return
	}
	fmt.Println("\nREADY")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		res.Errors = append(res.Errors, "waiting for GO: "+err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fail := func(op string, err error) {
		res.Errors = append(res.Errors, op+": "+err.Error())
	}
	// Interleave the two races so that Creates and Replaces overlap.
	increments := 0
	for r := range raceRounds {
		_, err := s.Create(ctx, fmt.Sprintf("race/create-%d", r), []byte("process "+id))
		switch {
		case err == nil:
			res.Wins = append(res.Wins, r)
		case !errors.Is(err, checkpoint.ErrConflict):
			fail("create", err)
		}
		if increments < raceIncrements && r%2 == 1 {
			if !increment(ctx, s, id, &res) {
				return
			}
			increments++
		}
	}
	for ; increments < raceIncrements; increments++ {
		if !increment(ctx, s, id, &res) {
			return
		}
	}
}

// increment adds one to the shared counter by compare-and-swap.
func increment(ctx context.Context, s checkpoint.Storage, id string, res *childResult) bool {
	for {
		data, v, err := s.GetVersion(ctx, "race/counter")
		if err != nil {
			res.Errors = append(res.Errors, "get counter: "+err.Error())
			return false
		}
		n, err := strconv.Atoi(counterValue(data))
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("counter %q: %v", data, err))
			return false
		}
		// The writer's id makes every content unique: no A-B-A.
		_, err = s.Replace(ctx, "race/counter", fmt.Appendf(nil, "%d by %s", n+1, id), v)
		switch {
		case err == nil:
			return true
		case errors.Is(err, checkpoint.ErrConflict):
			res.Conflicts++
		default:
			res.Errors = append(res.Errors, "replace counter: "+err.Error())
			return false
		}
	}
}
