package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/agent/api"
	"github.com/volumed/volumed/agent/manifest"
	"github.com/volumed/volumed/drivers/mount"
	"github.com/volumed/volumed/internal/blank"
	"github.com/volumed/volumed/internal/filesystem"
	"github.com/volumed/volumed/store"
)

// fakeMounter shows mounted (mount ID 7) the paths in mounted, and
// refuses unmounts with unmountErr.
type fakeMounter struct {
	mounted    map[string]bool
	unmountErr error
	// table is what the mount table shows.
	table []*mountinfo.Info
	// onUnmount, when set, is called before each unmount.
	onUnmount func(p string)
}

func (m *fakeMounter) MountDevice(string, string, string, []string) error { return nil }
func (m *fakeMounter) Bind(string, string, string, BindOptions) error     { return nil }
func (m *fakeMounter) EnsureDir(string) error                             { return nil }
func (m *fakeMounter) BindDevice(string, string, BindOptions) error       { return nil }
func (m *fakeMounter) Remount(string, int, []string, []string) error      { return nil }
func (m *fakeMounter) SetBindOptions(string, int, BindOptions) error      { return nil }
func (m *fakeMounter) Entries(string) (int, error)                        { return 0, nil }
func (m *fakeMounter) Mounts() (MountTable, error)                        { return mount.NewTable(m.table), nil }
func (m *fakeMounter) At(p string) (MountPoint, error) {
	return MountPoint{MountID: 7, Root: m.mounted[p]}, nil
}

func (m *fakeMounter) Unmount(_ context.Context, p string) error {
	if m.onUnmount != nil {
		m.onUnmount(p)
	}
	if m.unmountErr != nil {
		return m.unmountErr
	}
	delete(m.mounted, p)
	return nil
}

// fakeFS has devices of size bytes and fails grows with growErr.
type fakeFS struct {
	size    int64
	fsBytes int64 // the filesystem's own size, by Inspect
	growErr error
	sizeErr error
}

func (f *fakeFS) Probe(context.Context, string) ([]Signature, error)           { return nil, nil }
func (f *fakeFS) Mkfs(context.Context, string, string, string, []string) error { return nil }
func (f *fakeFS) Inspect(context.Context, string) (FSInfo, error) {
	return FSInfo{Bytes: f.fsBytes}, nil
}
func (f *fakeFS) CheckReadOnly(context.Context, string, string) (FSCheck, error) {
	return FSCheckUnknown, nil
}
func (f *fakeFS) Examine(_ context.Context, dev string, _ bool) (blank.Facts, error) {
	return blank.Facts{Device: dev, Zeros: blank.Zeros{Read: true, FirstNonZero: -1}}, nil
}
func (f *fakeFS) Grow(context.Context, string, string, string) error { return f.growErr }
func (f *fakeFS) DeviceSize(string) (int64, error)                   { return f.size, f.sizeErr }

func condition(v api.Volume, typ string) (api.Condition, bool) {
	for _, c := range v.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return api.Condition{}, false
}

func statusOf(t *testing.T, a *Agent, name string) api.Volume {
	t.Helper()
	for _, v := range a.Status() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no status for %s", name)
	return api.Volume{}
}

// A grow that fails shows as GrowFailed with the tool's words, and the
// volume is not Ready; the next grow that works clears it.
func TestGrowFailedRaisedAndCleared(t *testing.T) {
	fs := &fakeFS{size: 128 << 20, growErr: errors.New("resize2fs: exit status 1: Permission denied to resize filesystem")}
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.FS, a.cfg.Mounter = fs, &fakeMounter{}
	d := &Desired{Name: "g", Kind: "fake", Spec: &manifest.VolumeSpec{Filesystem: &manifest.Filesystem{Type: "ext4", Grow: true}}}
	stagedAt64Mi(t, a, d)

	if err := a.opGrow(context.Background(), d); err == nil {
		t.Fatal("grow succeeded with a failing resize")
	}
	v := statusOf(t, a, "g")
	c, ok := condition(v, CondGrowFailed)
	if v.Phase != api.PhaseDegraded || !ok || !strings.Contains(c.Message, "Permission denied to resize") {
		t.Fatalf("after a failed grow: phase %s, conditions %+v; want Degraded with GrowFailed naming the error", v.Phase, v.Conditions)
	}

	fs.growErr = nil
	if err := a.opGrow(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if v := statusOf(t, a, "g"); v.Phase != api.PhaseReady || len(v.Conditions) > 0 {
		t.Fatalf("after a grow that worked: phase %s, conditions %+v; want Ready and none", v.Phase, v.Conditions)
	}
}

// An unmount refused as busy shows as TeardownBlocked naming the process
// that holds the target; once the unmount goes through it is cleared.
func TestTeardownBlockedNamesHolder(t *testing.T) {
	target := t.TempDir()
	sleep := exec.Command("sleep", "60")
	sleep.Dir = target
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()

	m := &fakeMounter{mounted: map[string]bool{target: true}, unmountErr: fmt.Errorf("unmount %s: %w", target, ErrBusy)}
	a := sessionAgent(t, &fakeTarget{})
	a.cfg.Mounter = m
	rec := &store.Volume{Name: "b", Kind: "fake", Targets: []store.MountRecord{{Path: target, MountID: 7, Owned: true}}}
	if err := a.state.Adopt(rec); err != nil {
		t.Fatal(err)
	}

	if err := a.opUnpublish(context.Background(), "b", "fake", target); err == nil {
		t.Fatal("unpublish succeeded while busy")
	}
	c, ok := condition(statusOf(t, a, "b"), CondTeardownBlocked)
	if !ok || !strings.Contains(c.Message, "pid "+strconv.Itoa(sleep.Process.Pid)+" (sleep, cwd)") {
		t.Fatalf("TeardownBlocked = %+v (present %v); want it to name pid %d (sleep, cwd)", c, ok, sleep.Process.Pid)
	}

	m.unmountErr = nil
	if err := a.opUnpublish(context.Background(), "b", "fake", target); err != nil {
		t.Fatal(err)
	}
	if a.conds.Has("b", CondTeardownBlocked) {
		t.Fatal("TeardownBlocked still set after the unmount went through")
	}
}

// The filesystem holding images is full with no space at all, or with
// less than 16 MiB when that is under 1 % of it; a small filesystem with
// a few MiB free is not.
func TestLowSpace(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		avail, size int64
		want        bool
	}{
		{0, 48 * mi, true},
		{-1, 48 * mi, true},
		{4 * mi, 48 * mi, false},
		{15 * mi, 100 << 30, true},
		{17 * mi, 100 << 30, false},
		{100 * mi, 100 << 30, false},
	} {
		if got := (dirSpace{avail: c.avail, size: c.size}).low(); got != c.want {
			t.Errorf("low(avail %d, size %d) = %v, want %v", c.avail, c.size, got, c.want)
		}
	}
}

// ext4 names its sysfs directory after the kernel's name of the device,
// which a mapping's path (/dev/mapper/volumed-x, for dm-N) is not: the
// error count of an encrypted volume was read from a directory that
// never exists, so its errors were never seen.
func TestExt4SysByKernelName(t *testing.T) {
	// Any block device the kernel knows will do; a node of it under
	// another name stands for the mapping's path.
	ents, err := os.ReadDir("/sys/dev/block")
	if err != nil || len(ents) == 0 {
		t.Fatalf("no block device in /sys/dev/block to name by another path: %v", err)
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(ents[0].Name(), "%d:%d", &major, &minor); err != nil {
		t.Fatalf("/sys/dev/block/%s: %v", ents[0].Name(), err)
	}
	target, err := os.Readlink(filepath.Join("/sys/dev/block", ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(t.TempDir(), "volumed-x")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		t.Fatalf("mknod %s (root is needed): %v", node, err)
	}
	want := "/sys/fs/ext4/" + filepath.Base(target) + "/errors_count"
	ext4, _ := filesystem.Lookup("ext4")
	if _, got, err := ext4.ErrorCount("", node); err != nil || got != want {
		t.Errorf("ext4's error count of %s (block %d:%d) read from %s (%v), want %s", node, major, minor, got, err, want)
	}
}
