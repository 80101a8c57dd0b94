// Package jsonscan reads the few members a webhook gateway needs from a JSON
// payload in one pass, where encoding/json would scan it three times.
//
// A GitHub payload is 1 to 30 KB (a pull_request event 28 KB) and its
// partition key sits in four small objects: organization, repository.owner,
// installation and sender. json.Unmarshal of the whole payload into a
// struct of those fields validates every byte (checkValid) and then decodes
// every byte again, skipping what the struct lacks through its reflective
// state machine; the gateway also checked the payload with json.Valid
// first. On a 28 KB pull_request that was 180 µs for the partition alone,
// more than the rest of a request.
//
// [Unmarshal] instead walks the payload once, checking it as json.Valid
// does and copying out only the members a decoder into v would look at
// (named by a [Fields] tree), then hands that small document to
// json.Unmarshal. [Valid] is the same walk without the copy.
//
// # Guarantees
//
//   - Valid(b) == json.Valid(b) for every b: the same grammar, the same
//     nesting limit (10,000), bytes of 0x80 and above accepted in strings
//     without a UTF-8 check, as encoding/json's scanner does (differential
//     fuzz test FuzzValid).
//   - Unmarshal(b, v, keep) leaves in v what json.Unmarshal(b, v) would,
//     and returns an error with the same message, provided keep names
//     every member v's type decodes (FuzzUnmarshal, on both sides of the
//     size below which it decodes the whole document directly): member
//     names are matched as encoding/json matches them (a struct's fields
//     case-insensitively, bytes.EqualFold after unescaping; a map's keys
//     exactly), duplicates are kept in their order (the last one wins, as
//     there), and a kept value that is not an object is kept whole, so a
//     type mismatch fails the same way. A map may also get members keep
//     does not name. A payload that is not a valid JSON object is decoded
//     by json.Unmarshal itself, so its syntax error is encoding/json's own.
package jsonscan
