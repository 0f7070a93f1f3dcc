package mount

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/volumed/volumed/internal/testns"
	"github.com/volumed/volumed/internal/testtool"
)

func TestMain(m *testing.M) { testns.Main(m) }

// tmpfs mounts a fresh tmpfs at dir (created if missing) and makes sure
// it is gone before t.TempDir's cleanup walks into it.
func tmpfs(t *testing.T, dir string, flags uintptr) *mountinfo.Info {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "size=8m"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", dir, err)
	}
	cleanupMounts(t, dir)
	m, err := Lookup(dir)
	if err != nil || m == nil {
		t.Fatalf("Lookup(%s) after mount = %v, %v", dir, m, err)
	}
	return m
}

// cleanupMounts lazily detaches whatever is still mounted at dir when
// the test ends, whatever it left there.
func cleanupMounts(t *testing.T, dir string) {
	t.Cleanup(func() {
		for unix.Unmount(dir, unix.MNT_DETACH) == nil {
		}
	})
}

func optionSet(m *mountinfo.Info) []string { return strings.Split(m.Options, ",") }

func TestParseOptions(t *testing.T) {
	cases := []struct {
		in    []string
		flags uintptr
		data  string
		prop  uintptr
	}{
		{nil, 0, "", 0},
		{[]string{"noatime"}, unix.MS_NOATIME, "", 0},
		{[]string{"ro", "nosuid", "nodev", "noexec"}, unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0},
		{[]string{"sync", "relatime"}, unix.MS_SYNCHRONOUS | unix.MS_RELATIME, "", 0},
		{[]string{"ro", "rw"}, 0, "", 0},
		{[]string{"discard", "subvol=x", "noatime"}, unix.MS_NOATIME, "discard,subvol=x", 0},
		{[]string{"noatime,nodev", "commit=30"}, unix.MS_NOATIME | unix.MS_NODEV, "commit=30", 0},
		{[]string{"defaults", "nofail", "_netdev", "x-systemd.automount", "noauto", ""}, 0, "", 0},
		{[]string{`context="system_u:object_r:tmp_t:s0:c1,c2"`, "ro"}, unix.MS_RDONLY, `context="system_u:object_r:tmp_t:s0:c1,c2"`, 0},
		{[]string{"bind", "ro"}, unix.MS_BIND | unix.MS_RDONLY, "", 0},
		{[]string{"rshared"}, 0, "", unix.MS_SHARED | unix.MS_REC},
		{[]string{"prjquota", "inode64"}, 0, "prjquota,inode64", 0},
	}
	for _, c := range cases {
		got := ParseOptions(c.in)
		if got.Flags != c.flags || got.Data != c.data || got.Propagation != c.prop {
			t.Errorf("ParseOptions(%q) = %#x %q %#x; want %#x %q %#x", c.in, got.Flags, got.Data, got.Propagation, c.flags, c.data, c.prop)
		}
	}
}

func loopImage(t *testing.T) string {
	t.Helper()
	testtool.Need(t, "e2fsprogs, util-linux", "mkfs.ext4", "losetup")
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return testtool.Losetup(t, img)
}

func TestLookupUnmount(t *testing.T) {
	target := filepath.Join(t.TempDir(), "staging")
	mounted := tmpfs(t, target, 0)
	m, err := Lookup(target + "/")
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || m.ID != mounted.ID || m.FSType != "tmpfs" {
		t.Fatalf("Lookup with a trailing slash = %+v, want the tmpfs %d", m, mounted.ID)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := Unmount(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	if m, err := Lookup(target); err != nil || m != nil {
		t.Fatalf("after Unmount, Lookup = %+v, %v", m, err)
	}
	if _, err := os.Stat(filepath.Join(target, "f")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file written on the mount still visible at the target: %v", err)
	}
	// Idempotent: nothing there is success.
	if err := Unmount(context.Background(), target); err != nil {
		t.Fatalf("second Unmount: %v", err)
	}
	if err := Unmount(context.Background(), filepath.Join(target, "missing")); err != nil {
		t.Fatalf("Unmount of a missing path: %v", err)
	}
}

func TestSameSource(t *testing.T) {
	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	st := tmpfs(t, staging, 0)
	if err := os.Mkdir(filepath.Join(staging, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	whole, sub := filepath.Join(root, "whole"), filepath.Join(root, "sub")
	for subPath, dst := range map[string]string{"": whole, "logs": sub} {
		cleanupMounts(t, dst)
		if err := SafeBind(staging, subPath, dst, BindOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := tmpfs(t, filepath.Join(root, "other"), 0)
	wholeM, _ := Lookup(whole)
	subM, _ := Lookup(sub)

	for _, c := range []struct {
		name    string
		a, b    *mountinfo.Info
		subPath string
		want    bool
	}{
		{"bind of staging", wholeM, st, "", true},
		{"bind of subPath", subM, st, "logs", true},
		{"bind of subPath, with slashes", subM, st, "/logs/", true},
		{"bind of subPath, asked as whole", subM, st, "", false},
		{"whole, asked as subPath", wholeM, st, "logs", false},
		{"unrelated tmpfs", other, st, "", false},
		{"nil", nil, st, "", false},
	} {
		if got := SameSource(c.a, c.b, c.subPath); got != c.want {
			t.Errorf("%s: SameSource = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUnmountBusy(t *testing.T) {
	target := filepath.Join(t.TempDir(), "busy")
	m := tmpfs(t, target, 0)
	f, err := os.Create(filepath.Join(target, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = Unmount(ctx, target)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), target) {
		t.Fatalf("Unmount of a busy mount = %v, want ErrBusy naming %s", err, target)
	}
	if still, _ := Lookup(target); still == nil || still.ID != m.ID {
		t.Fatalf("busy mount gone after failed Unmount: %+v", still)
	}

	f.Close()
	if err := Unmount(context.Background(), target); err != nil {
		t.Fatalf("Unmount after closing the file: %v", err)
	}
	if m, _ := Lookup(target); m != nil {
		t.Fatalf("still mounted: %+v", m)
	}
}

func TestUnmountBusyCwd(t *testing.T) {
	target := filepath.Join(t.TempDir(), "busy")
	tmpfs(t, target, 0)
	// A process whose working directory is inside the mount.
	cmd := exec.Command("sleep", "60")
	cmd.Dir = target
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := Unmount(ctx, target); !errors.Is(err, ErrBusy) {
		t.Fatalf("Unmount with a process cwd inside = %v, want ErrBusy", err)
	}
	if m, _ := Lookup(target); m == nil {
		t.Fatal("mount gone after ErrBusy")
	}
}

func TestUnmountStacked(t *testing.T) {
	target := filepath.Join(t.TempDir(), "stack")
	bottom := tmpfs(t, target, 0)
	if err := os.WriteFile(filepath.Join(target, "bottom"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	top := tmpfs(t, target, 0)

	tbl, err := ReadTable()
	if err != nil {
		t.Fatal(err)
	}
	at := tbl.At(target)
	if len(at) != 2 || at[0].ID != bottom.ID || at[1].ID != top.ID || tbl.Top(target).ID != top.ID {
		t.Fatalf("At(%s) = %+v, want [bottom %d, top %d]", target, at, bottom.ID, top.ID)
	}

	if err := Unmount(context.Background(), target); err != nil {
		t.Fatal(err)
	}
	m, err := Lookup(target)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || m.ID != bottom.ID {
		t.Fatalf("after unmounting the top, Lookup = %+v, want the bottom mount %d", m, bottom.ID)
	}
	if _, err := os.Stat(filepath.Join(target, "bottom")); err != nil {
		t.Fatalf("bottom mount's file not visible: %v", err)
	}
}

func TestStackOrderFollowsParents(t *testing.T) {
	// Propagation can tuck a new mount underneath: file order is then not
	// stack order, the parent links are.
	ms := []*mountinfo.Info{
		{ID: 30, Parent: 20, Mountpoint: "/x"},
		{ID: 20, Parent: 1, Mountpoint: "/x"},
		{ID: 40, Parent: 30, Mountpoint: "/x"},
		{ID: 1, Parent: 1, Mountpoint: "/"},
	}
	tbl := newTable(ms)
	var ids []int
	for _, m := range tbl.At("/x") {
		ids = append(ids, m.ID)
	}
	if !slices.Equal(ids, []int{20, 30, 40}) {
		t.Fatalf("stack = %v, want [20 30 40]", ids)
	}
	if tbl.Top("/") == nil || tbl.Top("/nothing") != nil {
		t.Fatal("Top of / or of an unmounted path wrong")
	}
}

func TestEnsureDir(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	root := t.TempDir()
	deep := filepath.Join(root, "a", "b", "c")
	if err := EnsureDir(deep); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b"), deep} {
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v %v, want a 0755 directory", p, fi.Mode(), err)
		}
	}
	if err := EnsureDir(deep); err != nil {
		t.Fatalf("EnsureDir on an existing directory: %v", err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(file); err == nil {
		t.Error("EnsureDir on a regular file succeeded")
	}
	if err := EnsureDir(filepath.Join(file, "below")); err == nil {
		t.Error("EnsureDir below a regular file succeeded")
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(deep, link); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDir(link); err == nil {
		t.Error("EnsureDir on a symlink to a directory succeeded")
	}
	if err := EnsureDir(filepath.Join(link, "below")); err == nil {
		t.Error("EnsureDir below a symlink to a directory succeeded")
	}
	if _, err := os.Lstat(filepath.Join(deep, "below")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("EnsureDir created a directory through a symlink: %v", err)
	}
}
