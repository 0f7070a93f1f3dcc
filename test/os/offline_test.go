package ostest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Offline is the machine's root disk read on the host while no qemu
// runs: a raw copy of the overlay, taken by Machine.Offline.
type Offline struct {
	Raw string // the raw ext4 image
	dir string
}

// Offline copies the machine's disk as it is now (qemu must have exited)
// to a raw image on the host, to check it with host tools.
func (m *Machine) Offline(t testing.TB) *Offline {
	t.Helper()
	dir, err := os.MkdirTemp(m.Dir, "offline-")
	if err != nil {
		t.Fatal(err)
	}
	o := &Offline{Raw: filepath.Join(dir, "root.raw"), dir: dir}
	if out, err := exec.Command("qemu-img", "convert", "-f", "qcow2", "-O", "raw", m.Disk, o.Raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img convert %s: %v: %s", m.Disk, err, out)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return o
}

// Fsck runs e2fsck -fn (forced, read-only) on the root filesystem and
// returns its output and whether it found it clean: cleanly unmounted
// (no journal to replay) and without errors.
func (o *Offline) Fsck(t testing.TB) (string, bool) {
	t.Helper()
	e2fsck, err := lookTool("e2fsck")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(e2fsck, "-fn", o.Raw).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s\n(e2fsck: %v)", out, err), false
	}
	// -n does not replay a journal; a filesystem that needs it is not
	// clean, though e2fsck may still exit 0 for its unreplayed state.
	state, err := o.debugfs(t, "stats")
	if err != nil {
		t.Fatal(err)
	}
	clean := !containsAny(state, "needs_recovery", "Filesystem state:         not clean")
	return string(out) + "\n" + firstLines(state, 12), clean
}

// Journal runs the host's journalctl on the guest's persistent journal
// (/var/log/journal, copied out of the image) with args and returns what
// it printed. The machine's last boot is "-b", "0" here; the one before it
// "-b", "-1".
func (o *Offline) Journal(t testing.TB, args ...string) string {
	t.Helper()
	dir := filepath.Join(o.dir, "journal")
	if _, err := os.Stat(dir); err != nil {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := o.debugfs(t, "rdump /var/log/journal "+dir); err != nil {
			t.Fatalf("copy the journal out of the image: %v: %s", err, out)
		}
	}
	out, err := exec.Command("journalctl", append([]string{"--no-pager", "-D", filepath.Join(dir, "journal")}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("journalctl %v: %v: %s", args, err, out)
	}
	return string(out)
}

func (o *Offline) debugfs(t testing.TB, req string) (string, error) {
	t.Helper()
	debugfs, err := lookTool("debugfs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(debugfs, "-R", req, o.Raw)
	out, err := cmd.Output() // stderr has debugfs's banner
	return string(out), err
}
