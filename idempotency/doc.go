// Package idempotency makes a side effect run once per idempotency key, and
// says "done" only when the side effect is done.
//
// It is stage 1 of the pipeline: webhooks from GitHub and Jira reach a
// gateway that must publish each event to Kafka and answer the provider.
// A delivery can arrive more than once (a retry, a redelivery, a sender that
// timed out on a slow answer), so the gateway deduplicates by the provider's
// delivery id. The classic mistake is to claim the key and answer 2xx before
// the publish is acknowledged: one broker hiccup then loses the event for
// good, because nobody sends a 2xx again and a second copy would be taken for
// a duplicate. This package orders it the other way.
//
// # What the providers do with a failed delivery
//
// They do not behave alike, and a non-2xx answer means different things:
//
//   - GitHub never retries on its own. A delivery answered non-2xx, or not
//     answered within 10 s, is recorded as failed and stays failed until it
//     is redelivered by hand or through the REST API, within 3 days (with
//     the same X-GitHub-Delivery). Package githubredeliver does that; run it
//     beside every GitHub endpoint, or a 503 is an event lost.
//   - Jira Cloud retries a delivery answered 408, 409, 425, 429 or 5xx, or
//     not answered in time, for up to about 30 minutes, with the same
//     X-Atlassian-Webhook-Identifier and a growing
//     X-Atlassian-Webhook-Retry. Other answers are final.
//
// So the Handler answers 5xx only for transient failures (the store or the
// side effect failed), and 4xx with a reason for a delivery that can never be
// accepted (bad signature, malformed body, [Reject] from Options.Check).
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
// [Do] is the protocol without HTTP: claim, run the side effect, complete or
// release. A Kafka or gRPC consumer calls it directly.
//
// [Handler] is the webhook endpoint, configured with a [Provider] preset,
// [GitHub] or [JiraCloud] (there is no default provider: a Jira endpoint
// must not read GitHub's headers). It reads the body within
// Options.ReadTimeout (408 after it), checks the body size (413), the
// signature over the body as sent (401), the content type (415: GitHub
// sends application/json or application/x-www-form-urlencoded, Jira
// application/json; Provider.ContentTypes), the key, the event type and
// that the payload is a JSON object in valid UTF-8 (400, after decoding
// GitHub's form-encoded bodies); answers 200 without publishing an event type it ignores (GitHub's
// "ping", Options.Ignore); finds the tenant partition key (422 without one);
// runs Options.Check ([Reject]: its 4xx; [ErrIgnored]: 200; other errors:
// 503). Only then it calls [Do]: claims, runs the side effect (a [Func], such
// as kafkapub's Publisher.Publish, which carries the delivery id, event
// type, source, hook id and retry count as Kafka headers), and either
// completes and answers 202, or releases and answers 503 with Retry-After;
// a side effect whose outcome is unknown ([ErrOutcomeUnknown]) is answered
// 503 and its key held, not released.
// A side effect's [*RejectError] (kafkapub's 413 for a payload too large
// for the topic) is answered as that permanent 4xx. Every answer comes
// within Options.AnswerTimeout (8 s, under GitHub's 10 s), whatever the
// store and the side effect do: one still running then is answered 503
// (and the connection closed, so that a keep-alive client's next request
// does not wait behind it), its claim extended while it runs ([Extender]),
// and its key settled when it ends. Beyond Options.MaxInFlight deliveries a new
// one is answered 503 at once. The key is completed or released after the
// answer is sent; over net/http's server "done" is written after
// ServeHTTP returned, so the connection serves its next request meanwhile
// ([Handler.Close] waits for those writes).
// Duplicates of a done key replay the stored 202 with Idempotent-Replayed:
// true; duplicates of a pending key get 503 with Retry-After (see [Handler]
// for why not 409); a reused key with another payload gets 422, as Stripe's
// API answers.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrBodyTooLarge]: the body exceeds Options.MaxBodyBytes (413).
//   - [ErrSignature]: the signature is missing or wrong (401).
//   - [ErrNoKey]: the request carries no usable idempotency key (400).
//   - [ErrMalformed]: the body is not a JSON object in valid UTF-8, or the
//     event type is missing (400).
//   - [ErrMediaType]: the request's Content-Type is not one the provider
//     sends (Provider.ContentTypes), or names a charset other than UTF-8
//     (415).
//   - [ErrNoPartition]: the payload names no tenant to partition it by
//     (Provider.Partition); answered 422.
//   - [ErrIgnored] is returned, wrapped, by an Options.Check hook for an
//     event the application does not consume: it is answered 200, claims
//     nothing, publishes nothing, and is counted in idempotency.ignored.
//   - [ErrPending] is returned by Claim when another claim holds the key.
//   - [ErrDone] matches (with errors.Is) the *DoneError that Claim returns
//     for a key whose side effect is done.
//   - [ErrFingerprintMismatch] is returned by Claim when the key is pending
//     or done for a request whose fingerprint differs: the same key was
//     reused for a different payload.
//   - [ErrClaimLost] is returned by Complete and Release when the key no
//     longer holds the claim: its pending TTL ran out, and the key expired
//     or was claimed by someone else.
//   - [ErrStoreFull] is returned by a bounded store's Claim when it holds
//     its maximum number of pending keys and can evict nothing.
//   - [ErrInvalidArgument] is returned by a Store for an empty key or a TTL
//     that is not positive: a bad argument to one call.
//   - [ErrInvalidOptions] is wrapped by the errors NewHandler,
//     NewMemoryStore and the backends' constructors return for a missing
//     argument or an invalid option.
//   - [ErrOutcomeUnknown] is wrapped by a side effect's ([Func], or [Do]'s
//     fn) error when the side effect may have taken effect although it
//     failed: a publish sent to a broker that did not answer.
//   - [DoneError] is returned by Claim for a key whose side effect is done.
//   - [EffectError] is returned by [Do] when fn failed: the key was released
//     (or ReleaseErr says why not), so a retry runs fn again; or, when fn's
//     error wraps ErrOutcomeUnknown, held (Held): it stays pending until its
//     PendingTTL, and retries until then get ErrPending.
//   - [RejectError] is a permanent rejection of a delivery by an
//     Options.Check hook: the Handler answers Status with Reason, claims
//     nothing and publishes nothing.
//
// # Guarantees
//
//   - A key is done only after its side effect returned nil, so every 2xx
//     answered for a delivery (first or replayed) means the side effect is
//     durable. A side effect that failed definitely leads to a 503 and a
//     released key, so a retry (Jira's own, or GitHub's redelivery through
//     githubredeliver) runs it again.
//   - A key whose side effect's outcome is unknown is never released as
//     failed. While the side effect runs on past its answer (a 503 at
//     Options.AnswerTimeout), the Handler extends its claim (with a store
//     that implements [Extender], as both of the SDK's do), so the key
//     stays pending however long it runs, and a retry meanwhile gets 503,
//     never a second run. When it ends, the key is completed (a retry gets
//     the stored 202, replayed), released (it failed definitely: a retry
//     runs it once), or, when it ended with an error wrapping
//     [ErrOutcomeUnknown], held until its PendingTTL runs out; a retry
//     after that runs it again. With kafkapub's IdempotentPublisher a
//     publish returns only once its outcome is known, so a delivery
//     answered 503 is never written twice by its redelivery; with
//     kafkapub's plain Publisher, whose outcome stays unknown after a
//     timeout, it may be, after PendingTTL.
//   - If the gateway process dies while a key is pending (its side effect
//     running, or its "done" not yet written), the key expires after
//     PendingTTL and a redelivery runs the side effect again, although the
//     first run may have been written: the two records carry the same
//     delivery id (kafkapub's event-id header), which the stream
//     processor's deduplicator (package dedup) keys on, so it counts the
//     event once. That dedup is what makes the pipeline exactly-once
//     across gateway crashes; this layer keeps such copies rare.
//   - While the store remembers a key, at most one side effect for it runs at
//     a time, and none runs after it is done. A key answered 2xx is pending
//     in the store until its "done" is written after the answer: a
//     duplicate then is replayed by the Handler that answered it, and
//     answered 503 by any other (its retry replays); if the "done" is lost,
//     the key stays pending until PendingTTL and the redelivery after it
//     runs the side effect again.
//   - Rejected requests (401, 413, 415, 400, 405, 422 and Check's 4xx) and
//     ignored events (200) claim nothing and run nothing; ignored events
//     are counted in idempotency.ignored.
//
// What it does not promise: exactly one side effect per delivery. The store
// can forget a key (TTL, eviction, a Redis restart), a side effect can
// outlive its claim (a store without [Extender], a gateway that dies, or
// one stalled for more than two thirds of PendingTTL, as the claim is
// extended every third of it), and a publish can be written twice by a
// client without idempotence (kafkapub's plain Publisher retrying, or its
// redelivery after PendingTTL). Each of those produces a duplicate, never
// a loss; the side effect carries the delivery id, and the stream
// processor's deduplicator (package dedup) drops the copy. This layer is the cheap first filter, and the
// guarantee that nothing is acknowledged before it is durable.
//
// All Store implementations and the Handler are safe for concurrent use.
package idempotency
