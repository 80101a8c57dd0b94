package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// The string layout, in which a Store writes every key it claims: one Redis
// string per key, so that Claim is one native command (SET with NX, GET and
// PX) rather than a Lua script of three. Its value is, pending:
//
//	"p" token NUL fingerprint
//
// and done:
//
//	"d" status NUL len(fingerprint) NUL len(content type) NUL fingerprint content-type body
//
// with the numbers in decimal. Tokens are hex, so the NUL after one ends it.

// The scripts of the string layout take KEYS[1] key and ARGV[1] the
// caller's token, and act only on a key whose value begins with that
// token's pending prefix, "p" token NUL; a key that holds anything else
// (absent, done, another token's claim, a hash) is a lost claim.

// completeScript: ARGV[2] status, [3] content type, [4] body, [5] ttl ms.
var completeScript = newScript(`
local p = 'p' .. ARGV[1] .. '\0'
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then return 0 end
local f = string.sub(v, #p + 1)
redis.call('SET', KEYS[1], 'd' .. ARGV[2] .. '\0' .. #f .. '\0' .. #ARGV[3] .. '\0' .. f .. ARGV[3] .. ARGV[4], 'PX', ARGV[5])
return 1
`)

var releaseScript = newScript(`
local p = 'p' .. ARGV[1] .. '\0'
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// extendScript: ARGV[2] ttl ms.
var extendScript = newScript(`
local p = 'p' .. ARGV[1] .. '\0'
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' or string.sub(v, 1, #p) ~= p then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// setScript is the claim's SET for a client that runs scripts only (the
// redis.Scripter that New takes, without Process).
var setScript = newScript(`return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'GET', 'PX', ARGV[2])`)

// processor is a client that runs any command: *redis.Client,
// *redis.ClusterClient, *redis.Ring.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

var (
	argSet any = "set"
	argNX  any = "nx"
	argGet any = "get"
	argPX  any = "px"
)

// claimString is Claim in the string layout: SET key pending NX GET PX ttl
// sets the key only if it is absent and answers what it held. go-redis
// replays a command whose reply was lost; the replay finds the key holding
// this very call's token, and answers claimed. It reports ok false when the
// key must be claimed in the hash layout instead.
func (s *Store) claimString(ctx context.Context, key, fingerprint string, ttlMS int64) (c idempotency.Claim, ok bool, err error) {
	// The value, "p" token NUL fingerprint, in one allocation; the token
	// is a substring of it.
	pending := s.tokens.pending(fingerprint)
	token, k := pending[1:1+tokenLen], s.prefix+key
	var cmd *redis.Cmd
	switch p, isProcessor := s.rdb.(processor); {
	case s.sub != nil:
		cmd = s.submit(ctx, []any{argSet, k, pending, argNX, argGet, argPX, ttlMS})
	case isProcessor:
		cmd = redis.NewCmd(ctx, argSet, k, pending, argNX, argGet, argPX, ttlMS)
		_ = p.Process(ctx, cmd)
	default:
		cmd = s.run(ctx, setScript, scriptArgs(k, pending, ttlMS))
	}
	switch err := cmd.Err(); {
	case errors.Is(err, redis.Nil):
		return idempotency.Claim{Key: key, Token: token, Fingerprint: fingerprint}, true, nil
	case err == nil:
	case strings.Contains(err.Error(), "WRONGTYPE"):
		return idempotency.Claim{}, false, nil // a hash: claimed by an older gateway
	case strings.Contains(err.Error(), "syntax error"):
		// Redis before 7.0, where SET cannot take NX with GET: every
		// Store sharing it claims in the hash layout.
		s.hashOnly.Store(true)
		return idempotency.Claim{}, false, nil
	default:
		return idempotency.Claim{}, true, fmt.Errorf("redisstore: claim %q: %w", key, err)
	}
	v, _ := cmd.Val().(string)
	if rest, isPending := strings.CutPrefix(v, "p"); isPending {
		held, fp, found := strings.Cut(rest, "\x00")
		switch {
		case !found:
		case fp != fingerprint:
			return idempotency.Claim{}, true, idempotency.ErrFingerprintMismatch
		case held == token:
			return idempotency.Claim{Key: key, Token: token, Fingerprint: fingerprint}, true, nil
		default:
			return idempotency.Claim{}, true, idempotency.ErrPending
		}
	} else if d, isDone := parseDone(v); isDone {
		if d.fingerprint != fingerprint {
			return idempotency.Claim{}, true, idempotency.ErrFingerprintMismatch
		}
		return idempotency.Claim{}, true, doneError(key, fingerprint, d.status, d.contentType, d.body)
	}
	return idempotency.Claim{}, true, fmt.Errorf("redisstore: claim %q: corrupt value %q", key, v)
}

type done struct {
	status                         int
	fingerprint, contentType, body string
}

// parseDone reads the value of a done key.
func parseDone(v string) (done, bool) {
	rest, ok := strings.CutPrefix(v, "d")
	if !ok {
		return done{}, false
	}
	var n [3]int
	for i := range n {
		field, after, found := strings.Cut(rest, "\x00")
		num, err := strconv.Atoi(field)
		if !found || err != nil || num < 0 {
			return done{}, false
		}
		n[i], rest = num, after
	}
	if n[1]+n[2] > len(rest) {
		return done{}, false
	}
	return done{
		status:      n[0],
		fingerprint: rest[:n[1]],
		contentType: rest[n[1] : n[1]+n[2]],
		body:        rest[n[1]+n[2]:],
	}, true
}

// doneError is Claim's answer for a done key.
func doneError(key, fingerprint string, status int, contentType, body string) error {
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return &idempotency.DoneError{Record: idempotency.Record{
		Key:         key,
		Fingerprint: fingerprint,
		Response:    idempotency.Response{Status: status, ContentType: contentType, Body: b},
	}}
}
