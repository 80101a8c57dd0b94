package sink_test

import (
	"fmt"
	"strings"

	"github.com/exactlyonce/exactlyonce/sink"
)

// A replayed batch whose rows differ from the journaled ones can be
// inserted again under a token derived from the old one and the new content:
// the same new content always gets the same token, so a second replay of it
// is deduplicated.
func ExampleReinsertToken() {
	old := "eo1:5f0c:webhooks:0:100.0-180.2"
	tok := sink.ReinsertToken(old, 0xfeed)
	fmt.Println(strings.HasPrefix(tok, old+"~r"), tok == sink.ReinsertToken(old, 0xfeed), tok == sink.ReinsertToken(old, 0xbeef))
	// Output: true true false
}
