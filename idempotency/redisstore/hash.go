package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// The hash layout, which earlier Stores wrote for every key and which this
// one still reads and writes where the string layout cannot be used:
// a key that holds a hash (written by an older gateway sharing the Redis),
// and a Redis older than 7.0 (whose SET cannot take NX with GET). Each key
// is a Redis hash with the fields s (state: "p" pending or "d" done), t
// (the owner token), f (the fingerprint) and, once done, c, y and b
// (status, content type and body of the response). A claim made in this
// layout has a token that begins with hashTokenPrefix, which is how
// Complete, Release and Extend know to run these scripts.

// hashTokenPrefix marks the tokens of claims made in the hash layout. The
// tokens of the string layout are hex and never begin with it.
const hashTokenPrefix = "h:"

// hashClaimScript: KEYS[1] key; ARGV token, fingerprint, ttl ms.
//
// go-redis replays a script whose reply was lost (a dropped connection). The
// token is unique to one Claim call, so a pending key holding it was claimed
// by this very call: the replay answers claimed instead of pending, and the
// claim is not orphaned until its TTL.
//
// It answers a word (claimed, mismatch, pending) or, for a done key, the
// list {'done', status, content type, body}. An absent key costs HEXISTS
// rather than a six-field HMGET (a hash without s counts as absent).
var hashClaimScript = newScript(`
if redis.call('HEXISTS', KEYS[1], 's') == 0 then
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'f', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 'claimed'
end
local v = redis.call('HMGET', KEYS[1], 's', 'f', 'c', 'y', 'b', 't')
if v[2] ~= ARGV[2] then return 'mismatch' end
if v[1] == 'p' then
  if v[6] == ARGV[1] then return 'claimed' end
  return 'pending'
end
return {'done', v[3] or '0', v[4] or '', v[5] or ''}
`)

// hashCompleteScript: KEYS[1] key; ARGV token, status, content type, body,
// ttl ms. A key that no longer holds a hash (taken over in the string
// layout) is a lost claim, not an error: hence the pcall.
var hashCompleteScript = newScript(`
local v = redis.pcall('HMGET', KEYS[1], 's', 't')
if type(v) ~= 'table' or v.err or v[1] ~= 'p' or v[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 'c', ARGV[2], 'y', ARGV[3], 'b', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// hashReleaseScript: KEYS[1] key; ARGV token.
var hashReleaseScript = newScript(`
local v = redis.pcall('HMGET', KEYS[1], 's', 't')
if type(v) ~= 'table' or v.err or v[1] ~= 'p' or v[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`)

// hashExtendScript: KEYS[1] key; ARGV token, ttl ms.
var hashExtendScript = newScript(`
local v = redis.pcall('HMGET', KEYS[1], 's', 't')
if type(v) ~= 'table' or v.err or v[1] ~= 'p' or v[2] ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// claimHash is Claim in the hash layout.
func (s *Store) claimHash(ctx context.Context, key, fingerprint string, ttlMS int64) (idempotency.Claim, error) {
	token := hashTokenPrefix + s.tokens.next()
	cmd := s.run(ctx, hashClaimScript, scriptArgs(s.prefix+key, token, fingerprint, ttlMS))
	if err := cmd.Err(); err != nil {
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: %w", key, err)
	}
	if word, ok := cmd.Val().(string); ok {
		switch word {
		case "claimed":
			return idempotency.Claim{Key: key, Token: token, Fingerprint: fingerprint}, nil
		case "mismatch":
			return idempotency.Claim{}, idempotency.ErrFingerprintMismatch
		case "pending":
			return idempotency.Claim{}, idempotency.ErrPending
		}
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: unexpected reply %q", key, word)
	}
	res, err := cmd.StringSlice()
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: %w", key, err)
	}
	if len(res) != 4 || res[0] != "done" {
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: unexpected reply %q", key, res)
	}
	status, err := strconv.Atoi(res[1])
	if err != nil {
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: corrupt status %q", key, res[1])
	}
	return idempotency.Claim{}, doneError(key, fingerprint, status, res[2], res[3])
}

// isHashClaim reports whether c was claimed in the hash layout.
func isHashClaim(c idempotency.Claim) bool {
	return strings.HasPrefix(c.Token, hashTokenPrefix)
}
