package window

import "flag"

// update rewrites the golden snapshot in testdata (TestRestoreVersion1Snapshot)
// after a deliberate format change, which needs a new snapshotVersion.
var update = flag.Bool("update", false, "rewrite golden files")
