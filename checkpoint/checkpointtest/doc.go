// Package checkpointtest is the conformance suite for checkpoint.Storage
// implementations. Every backend, the in-memory and filesystem ones included,
// runs it:
//
//	func TestStorage(t *testing.T) {
//		checkpointtest.TestStorage(t, func(t *testing.T) checkpoint.Storage {
//			return newMyStorage(t)
//		})
//	}
package checkpointtest
