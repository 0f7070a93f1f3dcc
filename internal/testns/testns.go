// Package testns runs a test binary inside a private mount namespace so
// that the mounts a test makes never reach the host and vanish with it.
package testns

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

const envMarker = "VOLUMED_TEST_PRIVATE_NS"

// Main is called from a package's TestMain. Outside the namespace it
// re-executes the test binary under `unshare -m --propagation private`
// and exits with its status; inside, it runs the tests.
//
// Go cannot unshare a mount namespace for the whole process after start
// (unshare(2) acts on one thread), hence the re-exec.
func Main(m *testing.M) {
	if os.Getenv(envMarker) == "1" {
		os.Exit(m.Run())
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "testns: these tests need root (loop devices, mounts); run them as root, e.g. sudo make test")
		os.Exit(1)
	}
	args := append([]string{"-m", "--propagation", "private", "--", os.Args[0]}, os.Args[1:]...)
	cmd := exec.Command("unshare", args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), envMarker+"=1")
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "testns:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Inside reports whether the caller already runs in the private namespace.
func Inside() bool { return os.Getenv(envMarker) == "1" }
