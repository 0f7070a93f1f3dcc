// Package testtool is for tests that need a program or a facility of the
// machine: off CI a missing one skips the test with what to install; under
// CI (CI set, as .ci/run runs) it fails, because .ci/run installs
// everything the tests need and a skipped test proves nothing.
package testtool

import (
	"os"
	"os/exec"
	"testing"
)

// Missing reports that what (a program, a facility) is not on this
// machine: it fails the test under CI and skips it elsewhere.
func Missing(t testing.TB, what, install string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is missing under CI, where .ci/run installs it (%s): %v", what, install, err)
	}
	t.Skipf("%s is missing on this machine (%s; .ci/run installs it): %v", what, install, err)
}

// Need returns the path of each program, or reports the first missing
// one with Missing; install says where it comes from (a Debian package).
func Need(t testing.TB, install string, programs ...string) []string {
	t.Helper()
	paths := make([]string, 0, len(programs))
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			Missing(t, p, install, err)
		}
		paths = append(paths, path)
	}
	return paths
}
