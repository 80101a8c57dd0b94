// Package bench compares the SDK with libraries it does not depend on. It is
// a module of its own (bench/go.mod, with a replace of the SDK to ../), so
// that github.com/exactlyonce/exactlyonce never requires them; it holds only
// benchmarks. Run them with `make bench` at the repository's root, or here
// with `go test -run '^$' -bench . -benchtime 20x`.
//
// BenchmarkSinkVsClickHouseGo inserts the same rows into the same embedded
// ClickHouse through sink/chsink and through clickhouse-go v2's batch API
// (PrepareBatch, Append or Column().Append, Send), beside raw ch-go.
package bench
