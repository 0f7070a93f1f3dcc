package testtool

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// MountElsewhere mounts the block device dev (carrying a filesystem) at
// a temporary directory in a mount namespace of its own, held by a
// child process until the test ends: this namespace's mount table does
// not show the mount, but the kernel holds the device open exclusively,
// as for a container's or a PrivateMounts= service's mount. The child
// is killed, and the mount goes with its namespace, before the cleanups
// registered earlier (such as the device's detach) run.
func MountElsewhere(t testing.TB, dev string) {
	t.Helper()
	Need(t, "util-linux", "unshare", "mount")
	holder := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount "$1" "$2" && echo mounted && exec sleep 600`, "sh", dev, t.TempDir())
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "mounted" {
		t.Fatalf("the child did not mount %s (%q)", dev, line)
	}
}
