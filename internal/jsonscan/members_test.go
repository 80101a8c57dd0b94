package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// record is a stream processor's event, decoded by decodeRecord with
// Members and its helpers as a user would.
type record struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	TS     int64  `json:"ts"`
	Kind   string `json:"kind"` // "\u212aind" (Kelvin sign) folds to it
}

func decodeRecord(b []byte, r *record) error {
	return Members(b, func(name, v []byte) error {
		switch {
		case Name(name, "id"):
			return String(v, &r.ID)
		case Name(name, "tenant"):
			return String(v, &r.Tenant)
		case Name(name, "ts"):
			return Int64(v, &r.TS)
		case Name(name, "kind"):
			return String(v, &r.Kind)
		}
		return nil
	})
}

// memberSeeds are records and what can go wrong with one, besides seeds.
var memberSeeds = []string{
	`{"id":"0f8fad5b-d9cb-469f-a165-70867728950e","tenant":"t-042","ts":1796083200000,"kind":"push","payload":"repo t-042/service-3"}`,
	`{"ID":"upper","Tenant":"t","TS":1,"KIND":"k"}`, `{"\u0069d":"escaped name"}`, `{"\u212aind":"kelvin"}`,
	"{\"i\xffd\":\"not UTF-8 name\"}", `{"id":"a","id":"b"}`, `{"id":5,"id":"b"}`, `{"id":null}`,
	`{"ts":1.5}`, `{"ts":1e3}`, `{"ts":"1"}`, `{"ts":9223372036854775807}`, `{"ts":9223372036854775808}`,
	`{"ts":-9223372036854775808}`, `{"ts":-9223372036854775809}`, `{"ts":-0}`, `{"ts":null}`, `{"ts":123456789012345678}`,
	`{"id":"a\"b\\c\u00e9\ud83d\ude00"}`, "{\"id\":\"\xff\xfe\"}", `{"id":"\ud800"}`, `{"id":["a"]}`, `{"id":{"a":1}}`,
	`{"id":true}`, `{"tenant":false}`, `{"id":1,"x":[}`, ` null `, `nul`, `null x`,
}

func FuzzMembers(f *testing.F) {
	for _, s := range append(seeds, memberSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := record{ID: "preset", TS: -1}, record{ID: "preset", TS: -1}
		gotErr, wantErr := decodeRecord(b, &got), json.Unmarshal(b, &want)
		require.Equal(t, wantErr == nil, gotErr == nil, "%q: Members %v, json.Unmarshal %v", b, gotErr, wantErr)
		if wantErr == nil {
			assert.Equal(t, want, got, "%q", b)
			return
		}
		var syntax *json.SyntaxError
		if errors.As(wantErr, &syntax) {
			assert.Equal(t, wantErr, gotErr, "%q: encoding/json's own syntax error", b)
		}
	})
}

// FuzzValue: String and Int64 decode any bytes, one JSON value or not,
// as json.Unmarshal decodes them into a string and an int64.
func FuzzValue(f *testing.F) {
	for _, s := range append(seeds, memberSeeds...) {
		f.Add([]byte(s))
	}
	for _, s := range []string{`"plain"`, `"é"`, "\"\xff\"", `"a\nb"`, "\"a\x01\"", `"a"b"`, `"`, `"\"`, `12`, `-0`, `00`, `-`, ` 1`, `1 `, `+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		gotS, wantS := "preset", "preset"
		gotErr, wantErr := String(b, &gotS), json.Unmarshal(b, &wantS)
		require.Equal(t, wantErr, gotErr, "String(%q)", b)
		require.Equal(t, wantS, gotS, "String(%q)", b)
		gotN, wantN := int64(-1), int64(-1)
		gotErr, wantErr = Int64(b, &gotN), json.Unmarshal(b, &wantN)
		require.Equal(t, wantErr, gotErr, "Int64(%q)", b)
		require.Equal(t, wantN, gotN, "Int64(%q)", b)
	})
}

func TestMembers(t *testing.T) {
	var names, values []string
	err := Members([]byte(` {"a" : [1, {"b":2}], "\u0062":"x", "c":{}} `), func(name, v []byte) error {
		names, values = append(names, string(name)), append(values, string(v))
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, names, "names unescaped, in their order")
	assert.Equal(t, []string{`[1, {"b":2}]`, `"x"`, `{}`}, values, "values as they stand")

	calls := 0
	count := func(name, v []byte) error { calls++; return nil }
	require.NoError(t, Members([]byte("null"), count))
	assert.Zero(t, calls, "null has no members, as encoding/json leaves a struct alone")
	require.ErrorIs(t, Members([]byte(`[{"a":1}]`), count), ErrNotObject)
	require.ErrorIs(t, Members([]byte(`"a"`), count), ErrNotObject)

	// An error from member stops the calls, not the check: a syntax error
	// later on is the answer, as json.Unmarshal checks before it decodes.
	calls = 0
	bad := errors.New("bad")
	fail := func(name, v []byte) error { calls++; return bad }
	require.ErrorIs(t, Members([]byte(`{"a":1,"b":2}`), fail), bad)
	assert.Equal(t, 1, calls)
	err = Members([]byte(`{"a":1,"b":}`), fail)
	var syntax *json.SyntaxError
	require.ErrorAs(t, err, &syntax)
	assert.Equal(t, json.Unmarshal([]byte(`{"a":1,"b":}`), new(any)), err)
}

// TestName: Name matches as bytes.EqualFold, its first-byte shortcut
// included, over names whose first bytes fold in every way.
func TestName(t *testing.T) {
	names := []string{"", "k", "K", "\u212a", "kind", "KIND", "\u212aind", "s", "S", "\u017f", "ts", "tſ", "id", "iD", "@", "`", "é", "É", "x"}
	for _, a := range names {
		for _, b := range names {
			assert.Equal(t, bytes.EqualFold([]byte(a), []byte(b)), Name([]byte(a), b), "Name(%q, %q)", a, b)
		}
	}
}
