// Package jsonscan reads the few members a webhook gateway or a stream
// processor needs from a JSON payload in one pass, where encoding/json
// would scan it two or three times.
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
// A stream processor's events are the other case: records of a few
// hundred bytes, decoded by the million, where json.Unmarshal into a
// four-field struct was 63 % of a job's CPU (bench/peers' sdkjob).
// [Members] walks such a record once and hands each top-level member's
// name and raw value to a function, which decodes the fields it wants
// with [Name], [String] and [Int64]: 0.85 µs a record against
// json.Unmarshal's 3.2 (docs/json-events.md).
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
//   - Members(b, f), with f storing the members a struct names through
//     Name, String and Int64, accepts what json.Unmarshal(b, &struct)
//     accepts and leaves the same fields (FuzzMembers): names folded as
//     there, duplicates in their order, null a document of no members;
//     invalid JSON gets encoding/json's own *json.SyntaxError, even after
//     an error from f, and another document that is not an object
//     ErrNotObject. String and Int64 decode any bytes as json.Unmarshal
//     decodes them into a string and an int64, with the same errors
//     (FuzzValue). No input panics.
package jsonscan
