package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fastjson"
)

// records are n record values in the format of bench/peers' generate (its
// jsonEvent, json.Marshal'ed, its values drawn the same way over its
// default 30 minutes), re-sends left out: they are the same bytes again.
func records(n int) [][]byte {
	type jsonEvent struct {
		ID      string `json:"id"`
		Tenant  string `json:"tenant"`
		TS      int64  `json:"ts"`
		Kind    string `json:"kind"`
		Payload string `json:"payload"`
	}
	kinds := []string{"push", "pull_request", "issues", "deployment_status", "jira:issue_updated"}
	const partitions, tenants = 4, 200
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	out := make([][]byte, 0, n)
	for p := range partitions {
		rng := rand.New(rand.NewPCG(44, uint64(p)))
		for i := range n / partitions {
			ts := base + int64(i)*30*60_000/int64(n/partitions) - rng.Int64N(2000)
			tenant := fmt.Sprintf("t-%03d", rng.IntN(tenants/partitions)*partitions+p)
			v, err := json.Marshal(jsonEvent{
				ID:     fmt.Sprintf("%08x-%04x-4%03x-%012x", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.Uint64()>>16),
				Tenant: tenant, TS: ts, Kind: kinds[rng.IntN(len(kinds))],
				Payload: fmt.Sprintf("repo %s/service-%d, sender dev-%d, number %d", tenant, rng.IntN(20), rng.IntN(300), rng.IntN(5000)),
			})
			if err != nil {
				panic(err)
			}
			out = append(out, v)
		}
	}
	return out
}

// BenchmarkDecodeEvent decodes the job's records into its event struct
// with each candidate; an op is one record. encoding/json is the
// baseline; jsonscan is decodeEvent; go-json is goccy/go-json's drop-in
// Unmarshal; fastjson is valyala/fastjson's parser with its getters,
// which accepts what encoding/json does not (names matched exactly, no
// check of escapes) and is here for its speed only.
func BenchmarkDecodeEvent(b *testing.B) {
	recs := records(4000)
	var p fastjson.Parser
	for _, c := range []struct {
		name   string
		decode func([]byte, *event) error
	}{
		{"encoding-json", func(r []byte, ev *event) error { return json.Unmarshal(r, ev) }},
		{"jsonscan", decodeEvent},
		{"go-json", func(r []byte, ev *event) error { return gojson.Unmarshal(r, ev) }},
		{"fastjson", func(r []byte, ev *event) error {
			v, err := p.ParseBytes(r)
			if err != nil {
				return err
			}
			ev.ID, ev.Tenant = string(v.GetStringBytes("id")), string(v.GetStringBytes("tenant"))
			ev.TS, ev.Kind = v.GetInt64("ts"), string(v.GetStringBytes("kind"))
			return nil
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			var size int64
			for _, r := range recs {
				size += int64(len(r))
			}
			b.SetBytes(size / int64(len(recs)))
			b.ReportAllocs()
			i := 0
			var ev event // as the job's, decoded into a slice it reuses
			for b.Loop() {
				ev = event{}
				if err := c.decode(recs[i], &ev); err != nil || ev.ID == "" {
					b.Fatalf("%s: %v", recs[i], err)
				}
				if i++; i == len(recs) {
					i = 0
				}
			}
		})
	}
}

// FuzzDecodeEvent: decodeEvent accepts what json.Unmarshal into an event
// accepts and decodes the same fields; where json.Unmarshal refuses a
// record, so does it, with encoding/json's *json.SyntaxError for one that
// is not JSON.
func FuzzDecodeEvent(f *testing.F) {
	for _, r := range records(8) {
		f.Add(r)
	}
	for _, s := range []string{
		``, `null`, `[]`, `"x"`, `7`, `{}`, ` {"id":"a"} `, `{"id":"a"}x`, `{"id":"a",}`, `{"id":"a"`,
		`{"ID":"upper","Tenant":"t","TS":1,"KIND":"k"}`, `{"\u0069d":"escaped name"}`, `{"\u212aind":"kelvin"}`,
		`{"id":"a","id":"b"}`, `{"id":5}`, `{"id":null}`, `{"id":"a","ts":1.5}`, `{"id":"a","ts":1e3}`,
		`{"id":"a","ts":"1"}`, `{"id":"a","ts":9223372036854775807}`, `{"id":"a","ts":9223372036854775808}`,
		`{"id":"a","ts":-9223372036854775808}`, `{"id":"a","ts":-0}`, `{"id":"a","ts":null}`, `{"id":"a","ts":01}`,
		`{"id":"a\"b\\c\u00e9\ud83d\ude00"}`, "{\"id\":\"\xff\xfe\"}", "{\"id\":\"a\x01\"}", `{"id":"\ud800"}`,
		`{"id":"a","payload":{"x":[1,{"y":null}]}}`, `{"id":"a","payload":[}`, `{"id":["a"]}`, `{"id":{"a":1}}`,
		`{"id":true}`, `{"id":"a","tenant":false}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want event
		gotErr, wantErr := decodeEvent(b, &got), json.Unmarshal(b, &want)
		require.Equal(t, wantErr == nil, gotErr == nil, "%q: decodeEvent %v, json.Unmarshal %v", b, gotErr, wantErr)
		if wantErr == nil {
			assert.Equal(t, want, got, "%q", b)
			return
		}
		var syntax *json.SyntaxError
		if errors.As(wantErr, &syntax) {
			assert.Equal(t, wantErr, gotErr, "%q", b)
		}
	})
}
