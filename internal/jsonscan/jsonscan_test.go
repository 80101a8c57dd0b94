package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seeds are documents that reach every branch of the grammar, valid and
// not, and the member-matching cases of encoding/json.
var seeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1.5e+3`, `-12.25E-2`, `true`, `false`, `null`,
	` {"a" : [1, 2.0, -3e4, "x", true, false, null, {}, []] } `,
	`{"organization":{"login":"Octo"},"sender":{"login":"u"}}`,
	`{"ORGANIZATION":{"Login":"Octo"}}`,
	`{"organi\u007Aation":{"login":"escaped name"}}`,
	`{"organization":{"login":"a"},"organization":{"id":1}}`,
	`{"organization":{"login":"a","login":"b"}}`,
	`{"organization":"not an object","sender":{"login":"u"}}`,
	`{"organization":{"login":5}}`,
	`{"organization":null,"repository":{"owner":{"login":"o","id":2},"name":"r"}}`,
	`{"installation":{"id":123,"account":{"login":"acct"}}}`,
	`{"installation":{"id":"12"}}`, `{"installation":{"id":"x"}}`,
	`{"\u017fender":{"login":"long s"}}`, // U+017F folds to s
	"{\"sender\":{\"login\":\"\xff\xfe\"}}",
	`{"webhookEvent":"jira:issue_updated","WebhookEvent":"folded"}`,
	`{"a":"\"\\\/\b\f\n\r\t\u00e9"}`,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"` + "\x01" + `"}`,
	`{"a" 1}`, `{"a":1,}`, `{,}`, `[1,]`, `[,1]`, `{"a":1}}`, `{"a":1} x`, `{"a":01}`,
	`{"a":-}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":1e+}`, `{"a":tru}`, `{"a":nul}`,
	`{"a":truex}`, `{"a":1true}`, `{1:2}`, `{"a":[}`, `[{]`, `"unterminated`, `{"a":"b"`,
}

func FuzzValid(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

type account struct {
	Login string `json:"login"`
}

// payload is GitHubPartition's struct, with values and a pointer.
type payload struct {
	Organization account `json:"organization"`
	Repository   *struct {
		Owner account `json:"owner"`
		Name  string  `json:"name"`
	} `json:"repository"`
	Installation struct {
		ID      json.Number `json:"id"`
		Account *account    `json:"account"`
	} `json:"installation"`
	Sender account `json:"sender"`
	A      any     `json:"a"`
}

var payloadFields = Fields{
	"organization": {"login": nil},
	"repository":   {"owner": {"login": nil}, "name": nil},
	"installation": {"id": nil, "account": {"login": nil}},
	"sender":       {"login": nil},
	"a":            nil,
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, minSize := range []int{0, minReduce} { // the pass at every size, and as Unmarshal takes it
			var got, want payload
			gotErr, wantErr := unmarshal(b, &got, payloadFields, minSize), json.Unmarshal(b, &want)
			assertSame(t, b, got, want, gotErr, wantErr)

			// A map's keys match exactly; others may be there too.
			var gotMap, wantMap map[string]json.RawMessage
			gotErr, wantErr = unmarshal(b, &gotMap, Fields{"webhookEvent": nil}, minSize), json.Unmarshal(b, &wantMap)
			assertSame(t, b, gotMap == nil, wantMap == nil, gotErr, wantErr)
			gotEv, gotOK := gotMap["webhookEvent"]
			wantEv, wantOK := wantMap["webhookEvent"]
			assert.Equal(t, wantOK, gotOK, "%q", b)
			assert.Equal(t, wantEv, gotEv, "%q", b)
		}
	})
}

func assertSame[T any](t *testing.T, b []byte, got, want T, gotErr, wantErr error) {
	t.Helper()
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("Unmarshal(%q): error %v, json.Unmarshal's %v", b, gotErr, wantErr)
	}
	assert.Equal(t, want, got, "Unmarshal(%q)", b)
}

func TestUnmarshalMatchesMembersAsEncodingJSON(t *testing.T) {
	tests := []struct {
		give string
		want string // Organization.Login
	}{
		{`{"organization":{"login":"Octo"}}`, "Octo"},
		{`{"ORGANIZATION":{"LOGIN":"folded"}}`, "folded"},
		{`{"organi\u007Aation":{"login":"escaped"}}`, "escaped"},
		{`{"organization":{"login":"first"},"organization":{"login":"last"}}`, "last"},
		{`{"organization":{"login":"kept"},"organization":{"id":1}}`, "kept"},
	}
	for _, tt := range tests {
		var got payload
		require.NoError(t, unmarshal([]byte(tt.give), &got, payloadFields, 0), tt.give)
		assert.Equal(t, tt.want, got.Organization.Login, tt.give)
	}
	var p payload
	err := Unmarshal([]byte(`{"organization":{"login":5}}`), &p, payloadFields)
	assert.EqualError(t, err, json.Unmarshal([]byte(`{"organization":{"login":5}}`), &payload{}).Error())
	err = Unmarshal([]byte(`{"organization":`), &p, payloadFields)
	assert.EqualError(t, err, "unexpected end of JSON input")
}

// TestNestingLimit: encoding/json refuses a value inside more than 10,000
// arrays and objects; so does Valid, and at the same depth.
func TestNestingLimit(t *testing.T) {
	for _, depth := range []int{maxDepth, maxDepth + 1} {
		arrays := strings.Repeat("[", depth) + strings.Repeat("]", depth)
		objects := strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
		for _, doc := range []string{arrays, objects} {
			assert.Equal(t, json.Valid([]byte(doc)), Valid([]byte(doc)), "depth %d", depth)
		}
		assert.Equal(t, depth <= maxDepth, Valid([]byte(arrays)), "depth %d", depth)
	}
}

// TestUnmarshalKeepsOnlyNamedMembers checks the small document handed to
// json.Unmarshal: only the named members, in their order.
func TestUnmarshalKeepsOnlyNamedMembers(t *testing.T) {
	s := scanner{b: []byte(` {"x":[1,{"organization":2}], "repository" : {"id":1,"owner":{"login":"o","type":"User"}}, "sender":{"login":"s"},"y":"z"} `)}
	s.space()
	out, ok := s.object(make([]byte, 0, 64), payloadFields, 1)
	require.True(t, ok)
	assert.Equal(t, `{"repository":{"owner":{"login":"o"}},"sender":{"login":"s"}}`, string(out))
}

// TestSkipPlain puts each byte a string cannot hold as it is at every
// position of runs of bytes it can (those next to the word test's
// thresholds among them), and checks the word-at-a-time scan stops there.
func TestSkipPlain(t *testing.T) {
	var special []byte
	for c := range 0x20 {
		special = append(special, byte(c))
	}
	special = append(special, '"', '\\')
	fillers := []byte{0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa2, 0xdc, 0xff, 'a'}
	for _, fill := range fillers {
		for n := range 26 {
			run := bytes.Repeat([]byte{fill}, n)
			require.Equal(t, n, skipPlain(run, 0), "no special byte in %d × %#x", n, fill)
			for p := range n {
				for _, c := range special {
					b := bytes.Clone(run)
					b[p] = c
					for from := 0; from <= p; from++ {
						require.Equal(t, p, skipPlain(b, from), "%#x at %d of %d × %#x, from %d", c, p, n, fill, from)
					}
				}
			}
		}
	}
}
