package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/volumed/volumed/agent/api"
)

// TestWaitShowsProgress: waiting for a volume that cannot attach is not a
// silent pause: wait says on stderr, while it waits, which volume is not
// Ready and why, and its timeout repeats the reason.
func TestWaitShowsProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.unattachable("stuck")
	e.start()
	e.waitFor("stuck known", func(st *api.Status) bool { return len(st.Volumes) == 1 })
	cmd := exec.Command(volumedBin, "wait", "stuck", "--timeout", "3s", "--socket", e.socket)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("wait for a volume that cannot attach: %v, want exit 1; stderr:\n%s", err, stderr.String())
	}
	lines := strings.Split(stderr.String(), "\n")
	if !strings.HasPrefix(lines[0], "waiting (") || !strings.Contains(lines[0], "stuck: ") || !strings.Contains(lines[0], "stuck-absent.img") {
		t.Fatalf("wait's first line %q, want a progress line naming the volume and its error; stderr:\n%s", lines[0], stderr.String())
	}
	if !strings.Contains(stderr.String(), "volumed wait: timed out after 3s:") {
		t.Fatalf("stderr lacks the timeout:\n%s", stderr.String())
	}
}
