package embedded

import (
	"errors"
	"flag"
)

// ErrShort is returned by every Start and Ensure function of the package
// inside `go test -short` (make test-short): the short tier starts no
// server and downloads nothing, so it runs in seconds on any machine.
// testkit skips a test on it, whatever CI says.
var ErrShort = errors.New("embedded: go test -short starts no servers")

// Short reports whether the process is a test binary run with -short.
// It reads the flag rather than calling testing.Short, so that programs
// that are not tests (the demo) can import the package.
func Short() bool {
	f := flag.Lookup("test.short")
	return f != nil && f.Value.String() == "true"
}

// SkipShort skips a test that starts servers itself (rather than through
// testkit) inside `go test -short`.
func SkipShort(t interface {
	Helper()
	Skip(args ...any)
}) {
	t.Helper()
	if Short() {
		t.Skip(ErrShort.Error())
	}
}
