package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/exactlyonce/exactlyonce/idempotency"
)

// DefaultPrefix is prepended to every key unless Options.Prefix is set.
const DefaultPrefix = "idem:"

// Options configures a Store. The zero value is valid.
type Options struct {
	// Prefix is prepended to every idempotency key to form the Redis key,
	// so that one Redis can serve several gateways. Default DefaultPrefix.
	Prefix string
}

// Store is an idempotency.Store in Redis. Each key is a Redis hash with the
// fields s (state: "p" pending or "d" done), t (the owner token), f (the
// fingerprint) and, once done, c, y and b (status, content type and body of
// the response). Its Redis TTL is the pending TTL, then the done TTL.
//
// Every method is one Lua script, so each step is atomic on the server:
// Claim creates the hash only if it is absent, and Complete and Release act
// only if the hash still holds the caller's token.
//
// Durability is Redis's: a Redis without persistence that restarts forgets
// every key, so duplicates of events published before the restart are
// published again. Downstream deduplication absorbs them; nothing is lost.
//
// Errors other than the idempotency sentinels (a timeout, a refused
// connection) leave the outcome unknown; see idempotency.IsOutcomeUnknown. go-redis
// replays a command whose reply was lost: a replayed Claim returns the claim
// it made, but a replayed Complete or Release reports ErrClaimLost although
// its first run took effect (the key is done, or absent). A Store is safe
// for concurrent use.
type Store struct {
	rdb    redis.Scripter
	sub    submitter // rdb's deferred face, when it has one
	prefix string
	tokens tokens
}

// submitter is the deferred face of go-redis's AutoPipeliner
// (AsyncAutoPipeline): Submit queues a command and returns a future whose
// WaitContext honours the caller's context. The blocking face
// (AutoPipeline) runs every command on the pipeliner's own context instead,
// so a hung Redis would hold a Store call far past Options.StoreTimeout
// (35 to 40 s measured with go-redis's defaults, where GitHub gives up on
// an answer after 10 s); New refuses it.
type submitter interface {
	Submit(ctx context.Context, cmd redis.Cmder) redis.AutoFuture
}

var _ idempotency.Store = (*Store)(nil)

// New returns a Store over rdb, a *redis.Client, *redis.ClusterClient, the
// *redis.AutoPipeliner of AsyncAutoPipeline (recommended for a busy
// gateway: see the package doc) or any other go-redis client that runs
// scripts and honours each call's context. The caller keeps ownership of
// rdb and closes it.
//
// New refuses the blocking AutoPipeliner (AutoPipeline) with an error
// wrapping idempotency.ErrInvalidOptions: it ignores each call's context,
// so Options.StoreTimeout would not bound a call to a hung Redis. Its
// deferred face (AsyncAutoPipeline) batches alike and lets the Store wait
// with the caller's context.
func New(rdb redis.Scripter, opts Options) (*Store, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", idempotency.ErrInvalidOptions)
	}
	if b, ok := rdb.(interface{ IsBlocking() bool }); ok && b.IsBlocking() {
		return nil, fmt.Errorf("%w: go-redis's blocking AutoPipeline ignores each call's deadline; pass AsyncAutoPipeline's", idempotency.ErrInvalidOptions)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	s := &Store{rdb: rdb, prefix: opts.Prefix}
	if err := s.tokens.init(); err != nil {
		return nil, err
	}
	s.sub, _ = rdb.(submitter)
	return s, nil
}

// script is a Lua script with the arguments of its commands boxed once:
// converting a string to an interface allocates, and these are the same in
// every call.
type script struct {
	s            *redis.Script
	hash, source any
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{s: s, hash: s.Hash(), source: src}
}

var (
	argEvalSHA any = "evalsha"
	argEval    any = "eval"
)

// scriptArgs is the command of a script on one key: its first two slots,
// left nil, take EVALSHA or EVAL and the script; then come the number of
// keys, key, and args. One allocation for the whole command.
func scriptArgs(key string, args ...any) []any {
	all := make([]any, 4, 4+len(args))
	all[2], all[3] = 1, key
	return append(all, args...)
}

// run runs sc on the command of scriptArgs like redis.Script.Run: EVALSHA,
// then EVAL when Redis does not know the script. Through a deferred
// AutoPipeliner it waits for the reply only as long as ctx allows: the
// command may still run after ctx ended, which leaves the outcome unknown,
// as any error but the idempotency sentinels does.
func (s *Store) run(ctx context.Context, sc *script, all []any) *redis.Cmd {
	if s.sub == nil {
		return sc.s.Run(ctx, s.rdb, []string{all[3].(string)}, all[4:]...)
	}
	all[0], all[1] = argEvalSHA, sc.hash
	cmd := s.submit(ctx, all)
	// HasErrorPrefix allocates (an errors.As target) even for nil: asked
	// only about an error.
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A fresh slice: the first command keeps its own.
		all = append([]any{argEval, sc.source}, all[2:]...)
		cmd = s.submit(ctx, all)
	}
	return cmd
}

func (s *Store) submit(ctx context.Context, all []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, all...)
	if err := s.sub.Submit(ctx, cmd).WaitContext(ctx); err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The command is still queued or in flight: reading it would race
		// the pipeline. Answer with the context's error.
		out := redis.NewCmd(ctx)
		out.SetErr(err)
		return out
	}
	return cmd
}

// claimScript: KEYS[1] key; ARGV token, fingerprint, ttl ms.
//
// go-redis replays a script whose reply was lost (a dropped connection). The
// token is unique to one Claim call, so a pending key holding it was claimed
// by this very call: the replay answers claimed instead of pending, and the
// claim is not orphaned until its TTL.
var claimScript = newScript(claimSrc)

// claimSrc answers a word (claimed, mismatch, pending) or, for a done key, the
// list {'done', status, content type, body}. An absent key, the common
// case, costs HEXISTS rather than a six-field HMGET (a hash without s
// counts as absent, as before), and its word is one bulk string for
// go-redis to read rather than a list.
const claimSrc = `
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
`

// completeScript: KEYS[1] key; ARGV token, status, content type, body, ttl ms.
var completeScript = newScript(completeSrc)

const completeSrc = `
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] ~= 'p' or v[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 's', 'd', 'c', ARGV[2], 'y', ARGV[3], 'b', ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`

// releaseScript: KEYS[1] key; ARGV token.
var releaseScript = newScript(releaseSrc)

const releaseSrc = `
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] ~= 'p' or v[2] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
`

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (idempotency.Claim, error) {
	if err := idempotency.CheckClaimArgs(key, ttl); err != nil {
		return idempotency.Claim{}, err
	}
	token := s.tokens.next()
	cmd := s.run(ctx, claimScript, scriptArgs(s.prefix+key, token, fingerprint, ms(ttl)))
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
	switch {
	case len(res) == 4 && res[0] == "done":
		status, err := strconv.Atoi(res[1])
		if err != nil {
			return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: corrupt status %q", key, res[1])
		}
		var body []byte
		if res[3] != "" {
			body = []byte(res[3])
		}
		return idempotency.Claim{}, &idempotency.DoneError{Record: idempotency.Record{
			Key:         key,
			Fingerprint: fingerprint,
			Response:    idempotency.Response{Status: status, ContentType: res[2], Body: body},
		}}
	default:
		return idempotency.Claim{}, fmt.Errorf("redisstore: claim %q: unexpected reply %q", key, res)
	}
}

// Complete implements idempotency.Store.
func (s *Store) Complete(ctx context.Context, c idempotency.Claim, resp idempotency.Response, ttl time.Duration) error {
	if err := idempotency.CheckClaimArgs(c.Key, ttl); err != nil {
		return err
	}
	n, err := s.run(ctx, completeScript, scriptArgs(s.prefix+c.Key,
		c.Token, resp.Status, resp.ContentType, resp.Body, ms(ttl))).Int()
	if err != nil {
		return fmt.Errorf("redisstore: complete %q: %w", c.Key, err)
	}
	if n != 1 {
		return idempotency.ErrClaimLost
	}
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	if c.Key == "" || c.Token == "" {
		return idempotency.ErrClaimLost
	}
	n, err := s.run(ctx, releaseScript, scriptArgs(s.prefix+c.Key, c.Token)).Int()
	if err != nil {
		return fmt.Errorf("redisstore: release %q: %w", c.Key, err)
	}
	if n != 1 {
		return idempotency.ErrClaimLost
	}
	return nil
}

// ms converts a TTL to whole milliseconds, at least 1.
func ms(d time.Duration) int64 {
	return max(int64(d/time.Millisecond), 1)
}

// tokens makes the owner tokens of a Store's claims: a random prefix drawn
// once, and a counter. Within a Store the counter makes each token unique;
// two Stores (two gateway instances, or one restarted) share a token only
// if they drew the same 96-bit prefix. That is what a token needs: the
// claim that wrote it is the only one that can match it. It is no secret,
// as nobody but the Store's callers reaches Redis, so a counter does what
// 128 fresh random bits per claim did, without the system call.
type tokens struct {
	prefix [24]byte // hex of 12 random bytes
	seq    atomic.Uint64
}

func (t *tokens) init() error {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("redisstore: token: %w", err)
	}
	hex.Encode(t.prefix[:], b[:])
	return nil
}

// next returns a token never returned before by this Store.
func (t *tokens) next() string {
	var b [40]byte
	copy(b[:], t.prefix[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], t.seq.Add(1))
	hex.Encode(b[24:], n[:])
	return string(b[:])
}
