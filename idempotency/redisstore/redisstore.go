package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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

// Store is an idempotency.Store in Redis. Each key is a Redis string that
// holds its state (pending, with the owner token and the fingerprint, or
// done, with the fingerprint and the response to replay); its Redis TTL is
// the pending TTL, then the done TTL.
//
// Every method is one command, so each step is atomic on the server: Claim
// is SET with NX and GET, which creates the key only if it is absent and
// returns what it held (one native command, where a Lua script of three
// ran before: about a fifth less of Redis's CPU per delivery); Complete,
// Release and Extend are Lua scripts that act only if the key still holds
// the caller's token.
//
// Keys written by older Stores, as Redis hashes, are still read and
// written: a Claim that finds a hash claims, replays or refuses it as
// those Stores did, and its claim is completed, released or extended in
// that layout. Older Stores sharing the Redis cannot read the strings and
// fail their calls on those keys (a 503, retried): upgrade every gateway
// of a Redis together. A Redis before 7.0 (no SET with NX and GET) gets
// the hash layout throughout.
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
	rdb      redis.Scripter
	sub      submitter // rdb's deferred face, when it has one
	prefix   string
	tokens   tokens
	hashOnly atomic.Bool // Redis before 7.0: claims in the hash layout
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

var (
	_ idempotency.Store    = (*Store)(nil)
	_ idempotency.Extender = (*Store)(nil)
)

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

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, ttl time.Duration) (idempotency.Claim, error) {
	if err := idempotency.CheckClaimArgs(key, ttl); err != nil {
		return idempotency.Claim{}, err
	}
	if !s.hashOnly.Load() {
		if c, ok, err := s.claimString(ctx, key, fingerprint, ms(ttl)); ok {
			return c, err
		}
	}
	return s.claimHash(ctx, key, fingerprint, ms(ttl))
}

// Complete implements idempotency.Store.
func (s *Store) Complete(ctx context.Context, c idempotency.Claim, resp idempotency.Response, ttl time.Duration) error {
	if err := idempotency.CheckClaimArgs(c.Key, ttl); err != nil {
		return err
	}
	sc := completeScript
	if isHashClaim(c) {
		sc = hashCompleteScript
	}
	n, err := s.ownerScript(ctx, sc, c, c.Token, resp.Status, resp.ContentType, resp.Body, ms(ttl))
	if err != nil {
		return fmt.Errorf("redisstore: complete %q: %w", c.Key, err)
	}
	return n
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, c idempotency.Claim) error {
	if c.Key == "" {
		return idempotency.ErrClaimLost
	}
	sc := releaseScript
	if isHashClaim(c) {
		sc = hashReleaseScript
	}
	n, err := s.ownerScript(ctx, sc, c, c.Token)
	if err != nil {
		return fmt.Errorf("redisstore: release %q: %w", c.Key, err)
	}
	return n
}

// Extend implements idempotency.Extender.
func (s *Store) Extend(ctx context.Context, c idempotency.Claim, ttl time.Duration) error {
	if err := idempotency.CheckClaimArgs(c.Key, ttl); err != nil {
		return err
	}
	sc := extendScript
	if isHashClaim(c) {
		sc = hashExtendScript
	}
	n, err := s.ownerScript(ctx, sc, c, c.Token, ms(ttl))
	if err != nil {
		return fmt.Errorf("redisstore: extend %q: %w", c.Key, err)
	}
	return n
}

// ownerScript runs one of the scripts that act only while c's key holds
// c's token, with args (the token first): it returns an error for a
// failed call, and otherwise idempotency.ErrClaimLost when the script did
// nothing, nil when it acted.
func (s *Store) ownerScript(ctx context.Context, sc *script, c idempotency.Claim, args ...any) (lost, err error) {
	// A token with a NUL could match a prefix of another's pending value.
	if c.Token == "" || strings.IndexByte(c.Token, 0) >= 0 {
		return idempotency.ErrClaimLost, nil
	}
	n, err := s.run(ctx, sc, scriptArgs(s.prefix+c.Key, args...)).Int()
	if err != nil {
		return nil, err
	}
	if n != 1 {
		return idempotency.ErrClaimLost, nil
	}
	return nil, nil
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

// tokenLen is the length of a token.
const tokenLen = 40

// next returns a token never returned before by this Store.
func (t *tokens) next() string {
	var b [tokenLen]byte
	t.put(b[:])
	return string(b[:])
}

// pending returns the value of a key claimed with a new token, "p" token
// NUL fingerprint (see the string layout), in one allocation.
func (t *tokens) pending(fingerprint string) string {
	b := make([]byte, 1+tokenLen+1+len(fingerprint))
	b[0] = 'p'
	t.put(b[1 : 1+tokenLen])
	copy(b[2+tokenLen:], fingerprint)
	return string(b)
}

// put writes a new token into b, tokenLen bytes.
func (t *tokens) put(b []byte) {
	copy(b, t.prefix[:])
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], t.seq.Add(1))
	hex.Encode(b[24:], n[:])
}
