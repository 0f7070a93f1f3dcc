//go:build !race

package e2e

// raceEnabled: the tests run with -race, and so does the agent they build.
const raceEnabled = false
