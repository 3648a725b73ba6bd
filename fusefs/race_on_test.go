//go:build race

package fusefs_test

// raceDetector says the tests run under -race, whose instrumentation
// changes what the heap holds (sync.Pool, for one, drops a quarter of
// what is put back on purpose): memory figures are not the mount's then.
const raceDetector = true
