//go:build race

package app

// raceDetector is true when the tests run with -race.
const raceDetector = true
