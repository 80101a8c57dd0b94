// Package redisstore is the Redis backend of idempotency.Store, over
// go-redis v9.
//
// Use it when several gateway instances must share their keys:
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := redisstore.New(rdb, redisstore.Options{})
//	h, err := idempotency.NewHandler(store, publisher.Publish, idempotency.Options{...})
//
// Each operation is one command, so it is atomic on the server even when
// many instances race on one key: Claim is SET with NX and GET (Redis 7.0
// or later; an older Redis gets the scripts of the hash layout that Stores
// wrote before), Complete, Release and Extend are Lua scripts that check
// the caller's token.
//
// A gateway makes two round trips to Redis per request (Claim before the
// side effect, Complete after it), and neither can be dropped; the
// Handler makes the second after its answer, off the request's path. Under
// concurrency, pass go-redis's deferred AutoPipeliner instead of the client,
// so that the scripts of concurrent requests share one pipeline and one
// round trip:
//
//	ap, err := rdb.AsyncAutoPipeline()
//	store, err := redisstore.New(ap, redisstore.Options{})
//
// go-redis's FullDuplex option (AsyncAutoPipelineWithOptions) writes a
// command at once instead of after the batch in flight: claims wait less
// at a few concurrent requests, but at many the smaller batches cost Redis
// more CPU and throughput does not gain (docs/bench/history.md has the
// figures). The Store works alike through both.
//
// The guarantees are the same: each script still runs atomically on its
// own. The blocking
// face (AutoPipeline) is refused: it runs every command on a context of
// its own, so a hung Redis would hold a webhook for 35 s and more.
//
// # When Redis is down
//
// Every Store call waits at most until its context ends (the Handler's
// StoreTimeout, 2 s by default), then fails with an outcome-unknown error
// and the Handler answers 503 without running the side effect. To answer a
// refused connection in milliseconds rather than at that deadline, bound
// go-redis's own dial retries, which by default try 5 dials 100 ms apart
// for each of 4 attempts of a command (1.8 to 3.8 s measured, with Redis
// stopped):
//
//	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, DialTimeout: time.Second})
//
// (about 0.1 s measured). Only the dials change: a command whose reply was
// lost is still replayed (MaxRetries), which the scripts are written for.
// A plain *redis.Client may overrun the context on a hung server (up to
// 5 s measured, in its connection handshake); the deferred AutoPipeliner
// does not.
//
// # Guarantees
//
//   - Claim takes a key only if it is absent: of any number of concurrent
//     Claims of one key, exactly one succeeds.
//   - Complete and Release act only while the key holds the caller's token;
//     a claim that expired and was taken over is reported as
//     idempotency.ErrClaimLost and never overwrites its successor.
//   - A pending key expires after its TTL (Redis's own expiry, on the
//     server's clock), so a gateway that dies between Claim and Complete
//     blocks retries for at most that TTL.
//
// It assumes Redis is a cache of keys, not the guarantee: if Redis loses
// keys (restart without persistence, failover before replication), a
// duplicate is published again and the downstream deduplicator drops it. When
// Redis is unreachable, Claim fails and the Handler answers 503 without
// running the side effect; through the deferred AutoPipeliner each call
// ends with its context, so the 503 comes within StoreTimeout even when
// Redis hangs.
package redisstore
