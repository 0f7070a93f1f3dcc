package ostest

import (
	"os"
	"testing"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/test/crashcheck"
)

// TestMain runs the tests in a private mount namespace: the crash
// replays mount the guest's disks on the host (test/crashcheck),
// which also re-executes this binary as its bbolt checker. The run's
// .debs go with it.
func TestMain(m *testing.M) {
	crashcheck.HelperMain()
	if !testns.Inside() {
		testns.Main(m)
		return
	}
	code := m.Run()
	if base != nil {
		base.cpu.report(os.Stdout)
		// go test shows a passing package's output only with -v: make
		// test's os-tier prints this file instead.
		if p := os.Getenv("VOLUMED_OS_CPU_REPORT"); p != "" {
			if f, err := os.Create(p); err == nil {
				base.cpu.report(f)
				f.Close()
			}
		}
		os.RemoveAll(base.work) // the run's .debs
	}
	os.Exit(code)
}
