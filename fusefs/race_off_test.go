//go:build !race

package fusefs_test

// raceDetector: see race_on_test.go.
const raceDetector = false
