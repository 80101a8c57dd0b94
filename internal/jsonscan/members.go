package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// ErrNotObject is Members' error for a valid JSON document that is neither
// an object nor null: encoding/json refuses it for a struct too (an
// *json.UnmarshalTypeError there).
var ErrNotObject = errors.New("jsonscan: the JSON value is not an object")

// Members walks the JSON object data once, checking it as json.Valid does,
// and calls member with each member's name (unescaped, as encoding/json
// matches it: see [Name]) and its value as it stands in data (one valid
// JSON value, a subslice of data: [String] and [Int64] decode it). It is
// for small records decoded by the million, such as a stream processor's
// events, where json.Unmarshal into a struct is most of the job's CPU: it
// validates every byte (checkValid) and then reads every byte again
// through reflection.
//
// Its answer is json.Unmarshal's for a struct whose fields member decodes:
// data that is not valid JSON gets encoding/json's own *json.SyntaxError
// (and member may have been called for the members before the fault, as
// json.Unmarshal would not have); a document that is null has no members
// and no error, as encoding/json leaves a struct alone then; any other
// that is not an object gets ErrNotObject. An error from member does not
// stop the walk, only the calls: the document is still checked, and a
// syntax error is returned before it, as json.Unmarshal's checkValid runs
// before it decodes; otherwise the first error member returned is. member
// sees duplicate names in their order, so storing each value keeps the
// last one, as encoding/json does.
func Members(data []byte, member func(name, value []byte) error) error {
	s := scanner{b: data}
	s.space()
	if s.next('n') && s.literal("null") {
		if s.space(); s.i == len(data) {
			return nil
		}
		return syntaxError(data)
	}
	if !s.next('{') {
		if !Valid(data) {
			return syntaxError(data)
		}
		return ErrNotObject
	}
	first, ok := s.members(member)
	if s.space(); !ok || s.i != len(data) {
		return syntaxError(data)
	}
	return first
}

// members reads the top-level object at i (depth 1), calling member for
// each member until it returns an error, and reports the first error
// member returned and whether the object was well formed.
func (s *scanner) members(member func(name, value []byte) error) (first error, ok bool) {
	s.i++ // '{'
	s.space()
	if s.next('}') {
		s.i++
		return nil, true
	}
	for {
		quoted, escaped, ok := s.memberName()
		if !ok {
			return first, false
		}
		v := s.i
		if !s.value(1) {
			return first, false
		}
		if first == nil {
			name := quoted[1 : len(quoted)-1]
			if escaped || !ascii(name) && !utf8.Valid(name) {
				name = unquote(quoted)
			}
			first = member(name, s.b[v:s.i])
		}
		if end, ok := s.memberEnd(); !ok || end {
			return first, ok
		}
	}
}

// syntaxError is encoding/json's error for data, which Members found not
// to be valid JSON: the same *json.SyntaxError (message and offset) that
// json.Unmarshal returns. A json.RawMessage target takes nothing but the
// check.
func syntaxError(data []byte) error {
	var raw json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	return errors.New("jsonscan: invalid JSON") // cannot happen: the grammars are the same (FuzzValid)
}

// unquote is the string quoted (a well-formed JSON string) as
// encoding/json decodes it: escapes resolved, bytes that are not UTF-8
// replaced by U+FFFD.
func unquote(quoted []byte) []byte {
	var u string
	if json.Unmarshal(quoted, &u) != nil {
		return nil // cannot happen: str checked it
	}
	return []byte(u)
}

// Name reports whether the member name (as Members hands it) is the field
// a struct tag names, as encoding/json matches them: exactly, or else
// case-insensitively (bytes.EqualFold, so "ID", "Id" and "iD" are "id").
// A struct whose tags fold to the same name is decoded differently there
// (an exact match wins): give such a struct to json.Unmarshal.
func Name(name []byte, field string) bool {
	if string(name) == field {
		return true
	}
	// The first bytes of two names that fold together are the same ASCII
	// letter in either case, or one is a multi-byte rune's (the Kelvin
	// sign folds to k, ſ to s): others need no EqualFold.
	if len(name) == 0 || len(field) == 0 ||
		name[0]|0x20 != field[0]|0x20 && name[0] < utf8.RuneSelf && field[0] < utf8.RuneSelf {
		return false
	}
	return bytes.EqualFold(name, []byte(field))
}

// String decodes the JSON value v (as Members hands it) into *dst, as
// json.Unmarshal decodes it into a string field: a string is unescaped
// with bytes that are not UTF-8 replaced by U+FFFD, null leaves *dst as
// it is, and any other value is encoding/json's error for it (an
// *json.UnmarshalTypeError, or a *json.SyntaxError for v that is not
// one JSON value).
func String(v []byte, dst *string) error {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		in := v[1 : len(v)-1]
		if ascii(in) || skipPlain(in, 0) == len(in) && utf8.Valid(in) { // nothing to unescape or replace
			*dst = string(in)
			return nil
		}
	}
	return json.Unmarshal(v, dst) // escapes, null, and every error
}

// Int64 decodes the JSON value v (as Members hands it) into *dst, as
// json.Unmarshal decodes it into an int64 field: a number that is an
// integer in int64's range is stored, null leaves *dst as it is, and any
// other value (a fraction, an exponent, too large, a string) is
// encoding/json's error for it (an *json.UnmarshalTypeError).
func Int64(v []byte, dst *int64) error {
	// -?(0|[1-9][0-9]{0,17}) fits in an int64 whatever its digits; the
	// rest (longer numbers, fractions, exponents, other values) is
	// json.Unmarshal's to decide.
	digits, neg := v, false
	if len(digits) > 0 && digits[0] == '-' {
		digits, neg = digits[1:], true
	}
	if len(digits) == 0 || len(digits) > 18 || digits[0] == '0' && len(digits) > 1 {
		return json.Unmarshal(v, dst)
	}
	var n int64
	for _, c := range digits {
		if !digit(c) {
			return json.Unmarshal(v, dst)
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	*dst = n
	return nil
}

// ascii reports whether b holds only the ASCII bytes a JSON string holds
// as they are (see plain): a string with nothing to unescape or replace.
// It tests eight bytes at a time, as skipPlain does, with the high bits
// too.
func ascii(b []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q, bs := x^(ones*'"'), x^(ones*'\\')
		if (x|(x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			return false
		}
	}
	for ; i < len(b); i++ {
		if !plainASCII[b[i]] {
			return false
		}
	}
	return true
}

// plainASCII is plain without the bytes from 0x80 on.
var plainASCII = func() (t [256]bool) {
	copy(t[:utf8.RuneSelf], plain[:utf8.RuneSelf])
	return t
}()
