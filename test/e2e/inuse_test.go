package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Issue 22, finding 6: a device mounted outside volumed, named as a
// manifest's device.path, is refused with an InUse condition: never
// staged, never published (the CSI path builds the same volume through
// agent/csi/translate.go and goes through the same attach).
func TestDeviceMountedElsewhereIsRefused(t *testing.T) {
	e := newEnv(t)
	dev, _ := e.loopDisk("busy.img", 64<<20)
	if out, err := exec.Command("mkfs.ext4", "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	elsewhere := t.TempDir()
	if err := unix.Mount(dev, elsewhere, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Unmount(elsewhere, unix.MNT_DETACH) }()
	if err := os.WriteFile(elsewhere+"/theirs", []byte("another user's data"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.write("busy.yaml", fmt.Sprintf(`apiVersion: volumed/v1
kind: Volume
metadata: {name: busy}
spec:
  source: {device: {path: %s}}
  filesystem: {type: ext4}
  mounts: [{path: %s}]
`, dev, e.target("busy")))
	e.start()
	c := e.waitCondition("busy", "InUse", "mounted at "+elsewhere)
	if c.Reason != "InUseOutsideVolumed" {
		t.Errorf("condition %+v, want reason InUseOutsideVolumed", c)
	}
	time.Sleep(2 * time.Second)
	for _, p := range []string{e.staging("busy"), e.target("busy")} {
		if ms := e.mounts()[p]; len(ms) > 0 {
			t.Errorf("%s is mounted: %+v", p, ms[0])
		}
	}

	// Once the other use stops, the volume comes up on its own.
	if err := unix.Unmount(elsewhere, 0); err != nil {
		t.Fatal(err)
	}
	e.stop()
	e.waitExit(30 * time.Second)
	e.start()
	e.waitReady("busy")
	if _, err := os.Stat(e.target("busy") + "/theirs"); err != nil {
		t.Errorf("the filesystem published is not the device's: %v", err)
	}
}
