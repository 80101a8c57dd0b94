package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
)

// Fields names the members of an object to keep, each with the members to
// keep of its value when that is an object; a nil Fields keeps the value
// whole. The tree follows the decoded type: Fields{"repository":
// {"owner": {"login": nil}}} for a struct with Repository.Owner.Login.
type Fields map[string]Fields

// minReduce is the size from which Unmarshal reads the members it keeps
// first: in a document of a few members (the 112-byte payloads of the
// gateway's benchmark) most are kept, and the pass costs more than
// json.Unmarshal saves (3.5 µs against 2.5); at 256 bytes of a GitHub
// pull_request it is 1.0 µs against 2.1, at 28 KB 25 against 130.
const minReduce = 256

// maxDepth is encoding/json's nesting limit: a value inside more than
// 10,000 arrays and objects is a syntax error there.
const maxDepth = 10000

// Valid reports whether b is one JSON value with only white space around
// it, exactly as json.Valid does.
func Valid(b []byte) bool {
	s := scanner{b: b}
	s.space()
	if !s.value(0) {
		return false
	}
	s.space()
	return s.i == len(b)
}

// Unmarshal decodes data into v, which points to a struct or a map, as
// json.Unmarshal(data, v) does, reading of data only the members keep
// names: v's struct fields (matched case-insensitively, as encoding/json
// matches them) or map keys (matched exactly). keep must name every member
// v decodes: one it leaves out stays unset. A member keep does not name may
// still reach a map (a small document is decoded whole).
func Unmarshal(data []byte, v any, keep Fields) error {
	return unmarshal(data, v, keep, minReduce)
}

// unmarshal is Unmarshal, reading the kept members first from documents of
// minSize bytes and more (tests take both ways with 0 and the default).
func unmarshal(data []byte, v any, keep Fields, minSize int) error {
	exact := false
	if t := reflect.TypeOf(v); t != nil && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Map {
		exact = true
	}
	s := scanner{b: data, exact: exact}
	s.space()
	if len(data) >= minSize && s.i < len(data) && data[s.i] == '{' {
		out, ok := s.object(make([]byte, 0, 256), keep, 1)
		if s.space(); ok && s.i == len(data) {
			return json.Unmarshal(out, v)
		}
	}
	// Small, not an object, or not valid: encoding/json's own answer and
	// error.
	return json.Unmarshal(data, v)
}

// scanner walks b from i. Each method reads one piece of the grammar at i
// and reports whether it was well formed, leaving i after it.
type scanner struct {
	b     []byte
	i     int
	exact bool // match member names exactly (a map's keys), not folded
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next reports whether the byte at i is c.
func (s *scanner) next(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

// value skips one value inside depth arrays and objects.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		_, ok := s.object(nil, nil, depth+1)
		return ok
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

// object reads the object at i, at depth. With out != nil it appends to
// out the object with only the members keep names (their values reduced
// the same way where keep has Fields for them and they are objects).
func (s *scanner) object(out []byte, keep Fields, depth int) ([]byte, bool) {
	if depth > maxDepth {
		return out, false
	}
	s.i++ // '{'
	reduce := out != nil
	if reduce {
		out = append(out, '{')
	}
	s.space()
	if s.next('}') {
		s.i++
		if reduce {
			out = append(out, '}')
		}
		return out, true
	}
	kept := 0
	for {
		name, escaped, ok := s.memberName()
		if !ok {
			return out, false
		}
		sub, keepIt := Fields(nil), false
		if reduce {
			sub, keepIt = s.lookup(keep, name, escaped)
		}
		if keepIt {
			if kept > 0 {
				out = append(out, ',')
			}
			kept++
			out = append(append(out, name...), ':')
			if sub != nil && s.next('{') {
				out, ok = s.object(out, sub, depth+1)
			} else {
				v := s.i
				ok = s.value(depth)
				out = append(out, s.b[v:s.i]...)
			}
		} else {
			ok = s.value(depth)
		}
		if !ok {
			return out, false
		}
		if end, ok := s.memberEnd(); !ok || end {
			if end && reduce {
				out = append(out, '}')
			}
			return out, ok
		}
	}
}

// memberName reads an object member's quoted name and the colon after it,
// leaving s at its value. ok is false where the object is malformed.
func (s *scanner) memberName() (quoted []byte, escaped, ok bool) {
	if !s.next('"') {
		return nil, false, false
	}
	start := s.i
	if escaped, ok = s.str(); !ok {
		return nil, false, false
	}
	quoted = s.b[start:s.i]
	if s.space(); !s.next(':') {
		return nil, false, false
	}
	s.i++
	s.space()
	return quoted, escaped, true
}

// memberEnd reads what follows an object member's value: a comma, after
// which another member comes, or the closing brace (end).
func (s *scanner) memberEnd() (end, ok bool) {
	s.space()
	switch {
	case s.next(','):
		s.i++
		s.space()
		return false, true
	case s.next('}'):
		s.i++
		return true, true
	}
	return false, false
}

// lookup finds the member whose quoted name is quoted in keep, as
// encoding/json finds a struct field (bytes.EqualFold of the unescaped
// name) or a map key (equal).
func (s *scanner) lookup(keep Fields, quoted []byte, escaped bool) (Fields, bool) {
	name := quoted[1 : len(quoted)-1]
	if escaped {
		var u string
		if json.Unmarshal(quoted, &u) != nil {
			return nil, false // cannot happen: str checked it
		}
		name = []byte(u)
	}
	for k, sub := range keep {
		if s.exact && string(name) == k || !s.exact && bytes.EqualFold(name, []byte(k)) {
			return sub, true
		}
	}
	return nil, false
}

func (s *scanner) array(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.i++ // '['
	s.space()
	if s.next(']') {
		s.i++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.space()
		switch {
		case s.next(','):
			s.i++
			s.space()
		case s.next(']'):
			s.i++
			return true
		default:
			return false
		}
	}
}

// plain marks the bytes a string holds as they are: not the quote, the
// backslash, or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str reads the string at i and reports whether it has escapes.
func (s *scanner) str() (escaped, ok bool) {
	b, i := s.b, s.i+1
	for {
		i = skipPlain(b, i)
		if i >= len(b) || b[i] < 0x20 {
			return escaped, false
		}
		if b[i] == '"' {
			s.i = i + 1
			return escaped, true
		}
		// A backslash: one of \" \\ \/ \b \f \n \r \t, or \u and four hex digits.
		escaped = true
		if i+1 >= len(b) {
			return escaped, false
		}
		switch b[i+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i += 2
		case 'u':
			if i+6 > len(b) || !hex(b[i+2]) || !hex(b[i+3]) || !hex(b[i+4]) || !hex(b[i+5]) {
				return escaped, false
			}
			i += 6
		default:
			return escaped, false
		}
	}
}

// skipPlain returns the index of the first byte from i on that a string
// does not hold as it is (see plain), or len(b). It tests eight bytes at a
// time (the has-zero-byte and has-less-than word tricks): most of a
// payload is string bytes. A word the test flags is looked at byte by
// byte; the test never misses a byte, and a false alarm (a borrow out of
// a flagged byte's neighbour) only costs that look.
func skipPlain(b []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for {
		for ; i+8 <= len(b); i += 8 {
			x := binary.LittleEndian.Uint64(b[i:])
			q, bs := x^(ones*'"'), x^(ones*'\\')
			if ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
				break
			}
		}
		for end := min(i+8, len(b)); i < end; i++ {
			if !plain[b[i]] {
				return i
			}
		}
		if i >= len(b) {
			return i
		}
	}
}

func hex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func digit(c byte) bool { return '0' <= c && c <= '9' }

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && digit(b[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if i++; i >= len(b) || !digit(b[i]) {
			return false
		}
		for i < len(b) && digit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !digit(b[i]) {
			return false
		}
		for i < len(b) && digit(b[i]) {
			i++
		}
	}
	s.i = i
	return true
}

func (s *scanner) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}
