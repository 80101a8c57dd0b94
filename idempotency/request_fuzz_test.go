package idempotency

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bodies, signatures and keys to the request
// parser. It must never panic, and whatever it accepts must be signed, keyed
// and a JSON object; whatever it rejects must carry one of the rejection
// errors. Run with: go test -fuzz FuzzParse ./idempotency/
func FuzzParse(f *testing.F) {
	secret := []byte("fuzz-secret")
	signed := func(b string) string { return SignGitHub(secret, []byte(b)) }
	seeds := []struct{ body, sig, key string }{
		{`{"action":"opened"}`, signed(`{"action":"opened"}`), "72d3162e-cc78-11e3-81ab-4c9367dc0958"},
		{`{"action":"opened"}`, "sha256=00", "k"},
		{`[]`, signed(`[]`), "k"},
		{` {"a":[1,2,{"b":null}]} `, signed(` {"a":[1,2,{"b":null}]} `), "k"},
		{`{"a":"\ud800"}`, signed(`{"a":"\ud800"}`), "k"},
		{`{`, signed(`{`), "k"},
		{``, signed(``), ""},
		{`{}`, "sha256=", "k"},
		{`{}`, signed(`{}`), string(bytes.Repeat([]byte("k"), MaxKeyBytes+1))},
	}
	for _, s := range seeds {
		f.Add(s.body, s.sig, s.key)
	}
	p := parser{maxBody: 256, key: HeaderKey(HeaderGitHubDelivery), verify: GitHubSignature(secret)}
	f.Fuzz(func(t *testing.T, body, sig, key string) {
		h := http.Header{}
		h.Set(HeaderGitHubSignature, sig)
		h.Set(HeaderGitHubDelivery, key)
		d, err := p.parse(h, bytes.NewReader([]byte(body)), int64(len(sig)%3-1)*int64(len(body))) // a size unknown, 0 or right
		if err != nil {
			if !errors.Is(err, ErrBodyTooLarge) && !errors.Is(err, ErrSignature) &&
				!errors.Is(err, ErrNoKey) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("unclassified rejection: %v", err)
			}
			return
		}
		if len(body) > 256 {
			t.Fatalf("accepted a body of %d bytes over the 256 limit", len(body))
		}
		if !strings.EqualFold(sig, signed(body)) { // hex digits in either case
			t.Fatalf("accepted signature %q for body %q", sig, body)
		}
		if d.Key == "" || d.Key != h.Get(HeaderGitHubDelivery) || len(d.Key) > MaxKeyBytes {
			t.Fatalf("accepted key %q", d.Key)
		}
		var obj map[string]any
		if err := json.Unmarshal(d.Body, &obj); err != nil {
			t.Fatalf("accepted a body that is not a JSON object: %q: %v", d.Body, err)
		}
		if string(d.Body) != body {
			t.Fatalf("body changed: %q != %q", d.Body, body)
		}
	})
}

// FuzzParseForm feeds arbitrary form-encoded bodies, signed, to the parser
// of the GitHub preset. It must never panic; whatever it accepts is a JSON
// object decoded from the payload field, with the event header's type;
// whatever it rejects carries ErrMalformed. Run with:
// go test -fuzz FuzzParseForm ./idempotency/
func FuzzParseForm(f *testing.F) {
	secret := []byte("fuzz-secret")
	for _, s := range []string{
		"payload=%7B%22zen%22%3A%22x%22%7D",
		"payload=%7B",
		"payload=1&payload=2",
		"a=b",
		"%zz",
		"payload=%5B%5D",
		"",
	} {
		f.Add(s)
	}
	p := parser{maxBody: 1024, key: HeaderKey(HeaderGitHubDelivery), verify: GitHubSignature(secret), provider: GitHub()}
	f.Fuzz(func(t *testing.T, body string) {
		h := http.Header{}
		h.Set("Content-Type", "application/x-www-form-urlencoded")
		h.Set(HeaderGitHubSignature, SignGitHub(secret, []byte(body)))
		h.Set(HeaderGitHubDelivery, "k")
		h.Set(HeaderGitHubEvent, "push")
		d, err := p.parse(h, strings.NewReader(body), int64(len(body)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrBodyTooLarge) {
				t.Fatalf("unclassified rejection: %v", err)
			}
			return
		}
		var obj map[string]any
		if err := json.Unmarshal(d.Body, &obj); err != nil {
			t.Fatalf("accepted a payload that is not a JSON object: %q: %v", d.Body, err)
		}
		if d.Event != "push" || d.Key != "k" {
			t.Fatalf("delivery %+v", d)
		}
	})
}
