package ostest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A Snapshot is a guest stopped in the middle of a boot and saved with
// its disks and memory (qemu's savevm). A machine made from it
// (NewMachineFrom) resumes there instead of booting: a test that needs
// many machines alike up to some point (the power cuts) pays for the
// boot up to there once. The saved guest must be waiting for a line on
// its console (waitConsoleLine), which a resumed machine is sent at once.
type Snapshot struct {
	name  string
	disk  string // the root overlay, which also holds the memory
	disks []disk // the extra disks, qcow2
	seed  string // the seed disk it booted with, attached again on resume
}

// waitConsoleLine is guest shell that blocks until the host sends a line
// to the console: where a guest is saved for a Snapshot.
const waitConsoleLine = `say OSTEST-SAVE-HERE; read -r _ </dev/ttyS0`

// SaveWhenWaiting waits for the guest to wait at waitConsoleLine, stops
// it, saves it as snapshot name and ends the run.
func (r *Run) SaveWhenWaiting(t testing.TB, name string) *Snapshot {
	t.Helper()
	r.WaitFor(t, "OSTEST-SAVE-HERE", 5*time.Minute)
	for _, cmd := range []string{"stop", "savevm " + name} {
		// savevm says nothing when it succeeds.
		if out, err := r.Monitor(cmd); err != nil || out != "" {
			t.Fatalf("%s: %s: %v %s", r.m.Name, cmd, err, out)
		}
	}
	r.Kill()
	for _, d := range r.m.disks {
		if d.format != "qcow2" {
			t.Fatalf("%s: disk %s is %s: qemu saved no snapshot of it (AddQcow2Disk)", r.m.Name, d.serial, d.format)
		}
	}
	return &Snapshot{name: name, disk: r.m.Disk, disks: r.m.disks, seed: r.seed}
}

// NewMachineFrom is a machine whose first boot resumes snap, on copies of
// its disks; later boots boot them.
func (img *Image) NewMachineFrom(t testing.TB, name string, snap *Snapshot) *Machine {
	t.Helper()
	m := img.machineIn(t, name)
	if err := copyFile(snap.disk, m.Disk); err != nil {
		t.Fatal(err)
	}
	for _, d := range snap.disks {
		src := d.path
		d.path = filepath.Join(m.Dir, filepath.Base(src))
		if err := copyFile(src, d.path); err != nil {
			t.Fatal(err)
		}
		m.disks = append(m.disks, d)
	}
	m.resume = snap
	return m
}

// copyFile copies a disk, keeping its holes.
func copyFile(from, to string) error {
	if out, err := exec.Command("cp", "--sparse=always", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s: %v: %s", from, err, out)
	}
	return nil
}
