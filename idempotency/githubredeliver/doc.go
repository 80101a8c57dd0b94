// Package githubredeliver redelivers GitHub webhook deliveries that failed,
// because GitHub never does.
//
// GitHub records a delivery answered non-2xx, or not answered within 10 s, as
// failed, and leaves it there: there is no automatic retry. A failed delivery
// can be redelivered, with the same X-GitHub-Delivery GUID, by hand or
// through the REST API, for 3 days. Without this package, every 503 the
// gateway answers while Kafka or its idempotency store is down is an event
// lost for good.
//
// A [Redeliverer] watches one webhook: a repository's ([RepoHook]), an
// organization's ([OrgHook]) or a GitHub App's ([AppHook]). Each pass lists
// the hook's recent deliveries (GET .../hooks/{id}/deliveries, newest first,
// following the Link header's cursor), groups them by GUID (each redelivery
// is a new delivery with the same GUID), and asks GitHub to redeliver (POST
// .../deliveries/{id}/attempts) every GUID whose attempts all failed with a
// transient status (5xx, a timeout or connection failure, 408, 409, 425,
// 429). A GUID answered with another 4xx was rejected for good by the
// gateway and is reported, not redelivered.
//
//	r, err := githubredeliver.New(githubredeliver.RepoHook("octo-org", "app", 42),
//		githubredeliver.Options{Token: os.Getenv("GITHUB_TOKEN")})
//	err = r.Run(ctx) // a pass every Options.Interval until ctx ends
//
// [Redeliverer.Pass] runs one pass, for a cron job or a gateway's admin
// endpoint; examples/githubredeliver is a command around it.
//
// # State
//
// A [State] keeps what a pass must not forget: the newest delivery id already
// examined (so a pass lists only newer deliveries) and every GUID still
// waiting to succeed, with its redelivery count and time (so a GUID whose
// redelivery is in flight is not requested again at once, and requests back
// off exponentially while the gateway stays down). [MemoryState] keeps it in
// memory; [CheckpointState] in a checkpoint.Storage, to survive restarts.
// With a lost state the next pass examines the whole 3-day window again.
//
// # Rate limits
//
// Every response's X-RateLimit-Remaining and X-RateLimit-Reset are honoured:
// with none left the pass waits until the reset. A 403 or 429 is a rate
// limit: the pass waits Retry-After, else until X-RateLimit-Reset, else one
// minute (GitHub's advice for secondary limits), and tries again. A wait
// longer than Options.MaxWait ends the pass with a *RateLimitError; Run waits
// it out.
//
// # Errors
//
// Match them with errors.Is (the sentinels) or errors.As (the types):
//
//   - [ErrInvalidOptions] reports options New refuses.
//   - [ErrCorrupt] reports a saved state that cannot be read.
//   - [ErrRateLimited] matches a *RateLimitError.
//   - [APIError] is a GitHub answer that is neither success nor a rate
//     limit.
//   - [RateLimitError] ends a pass that would have to wait longer than
//     Options.MaxWait for GitHub's rate limit.
//
// # Guarantees
//
//   - Every GUID seen failing transiently within the window is requested
//     again until one of its deliveries succeeds, or until its newest failed
//     delivery leaves GitHub's 3-day window: it is then reported in
//     Result.Expired and logged at error level, never dropped silently.
//   - A redelivery carries the original GUID, so the gateway's idempotency
//     store and the stream's deduplicator absorb a redelivery of an event
//     that was in fact published (a request repeated after a crash between
//     the POST and saving the state, or a delivery that timed out at GitHub
//     after the gateway published it).
//   - The token is sent only to Options.BaseURL's host: a Link header that
//     points elsewhere ends the pass with an error.
//
// A Redeliverer's methods must not be called concurrently.
package githubredeliver
