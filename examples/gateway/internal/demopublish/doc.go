// Package demopublish holds the demo's variants of the gateway's Kafka
// publish, which the deployable gateway does not have: the demo harness
// builds examples/gateway with -tags demo (harness/internal/demo.BuildBinaries),
// and only that build registers their flags (examples/gateway/demo.go).
//
// [Faulty] fails a fraction of publishes on purpose, before the write (as
// an unreachable broker would) or after it (as a lost acknowledgement
// would), so a demo or a test can watch the gateway and the processor
// recover. [Naive] is the first article's gateway, kept as its bug: it
// answers 2xx before Kafka acknowledged the event.
//
// # Guarantees
//
// None, by design: Faulty answers every fault with an error, so the
// provider retries and nothing is lost, but after [ErrAckLost] the event
// is in Kafka already and the retry writes it again (the processor's
// dedup drops the copy). Naive loses every event whose publish fails after
// it answered.
package demopublish
