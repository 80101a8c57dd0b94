// Package idempotency makes a side effect run once per idempotency key, and
// says "done" only when the side effect is done.
//
// It is stage 1 of the pipeline: webhooks from GitHub and Jira reach a
// gateway that must publish each event to Kafka and answer the provider.
// Providers retry what was not answered 2xx, so the gateway deduplicates by
// the provider's delivery id. The classic mistake is to claim the key and
// answer 2xx before the publish is acknowledged: one broker hiccup then loses
// the event for good, because the provider does not retry a 2xx and a retry
// would be taken for a duplicate. This package orders it the other way.
//
// # Tour
//
// A [Store] keeps two states per key. [Store.Claim] makes an absent key
// pending for a short TTL and returns a [Claim] with an owner token;
// [Store.Complete] makes it done, with the response to replay, only if the
// key still holds that claim; [Store.Release] deletes it on the same
// condition. A claim that expired and was taken over gets [ErrClaimLost],
// never overwrites. Claim of a done key returns a [*DoneError] with the stored
// [Record]; of a pending key, [ErrPending]; of a key stored with another
// request fingerprint, [ErrFingerprintMismatch].
//
// [MemoryStore] is the embedded, bounded backend; package redisstore shares
// keys between gateway instances; package idempotencytest is the conformance
// suite both pass.
//
// [Handler] is the webhook endpoint. It checks the body size (413), the
// signature ([GitHubSignature], 401), the key ([HeaderKey], 400) and that the
// body is a JSON object (400) before claiming anything; then claims, runs the
// side effect (a [Func], such as kafkapub's Publisher.Publish), and either
// completes and answers 202, or releases and answers 503 with Retry-After.
// Duplicates of a done key replay the stored 202 with Idempotent-Replayed:
// true; duplicates of a pending key get 503 with Retry-After (see [Handler]
// for why not 409); a reused key with another payload gets 422, as Stripe's
// API answers.
//
// # Guarantees
//
//   - A key is done only after its side effect returned nil, so every 2xx
//     answered for a delivery (first or replayed) means the side effect is
//     durable. A failed side effect always leads to a non-2xx and a released
//     key, so the provider's retry runs it again.
//   - While the store remembers a key, at most one side effect for it runs at
//     a time, and none runs after it is done.
//   - Rejected requests (401, 413, 400, 405) claim nothing and run nothing.
//
// What it does not promise: exactly one side effect per delivery. The store
// can forget a key (TTL, eviction, a Redis restart), a side effect can
// outlive its claim, and a publish can be written twice by the client's own
// retries. Each of those produces a duplicate, never a loss; the side effect
// carries the delivery id, and the stream processor's deduplicator (package
// dedup) drops the copy. This layer is the cheap first filter, and the
// guarantee that nothing is acknowledged before it is durable.
//
// All Store implementations and the Handler are safe for concurrent use.
package idempotency
