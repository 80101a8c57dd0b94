//go:build race

package sim

// raceEnabled: the race detector slows the simulation about fivefold, so
// make test (which runs -race) checks fewer seeds per scenario.
const raceEnabled = true
